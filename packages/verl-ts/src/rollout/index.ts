// TIR rollout: a step-wise, tool-overlapping generation engine generic over the Tool interface.
export {
  padRolloutBatch,
  promptsFromDataProto,
  type RolloutBatchArrays,
  RolloutBatchError,
  type RolloutBatchOptions,
  responseOffset,
  rolloutDataProto,
  rolloutMetrics,
  rolloutTrainingBatch,
} from "./batch.js";
export { benchRolloutCommand, DelayedRunner } from "./bench.js";
export { RaggedKVCache } from "./ragged-cache.js";
export {
  generateSequences,
  RolloutInputError,
  type TirCallRecord,
  type TirEvent,
  type TirRolloutOptions,
  type TirRolloutResult,
  type TirRolloutStats,
  type TirSample,
  ToolExecutionError,
  tirRollout,
} from "./tir.js";
