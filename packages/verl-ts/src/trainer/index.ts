// Trainer: veRL's PPO/GRPO fit loop with validation, metrics, checkpoints, resume and fault reports.

export { exportCommand, parseByteSize } from "../cli/export.js";
export {
  defineTrainCommand,
  type TrainCommandSpec,
  type TrainRunFlags,
  trainCommand,
} from "../cli/train.js";
export { AsyncPPOTrainer, createTrainer } from "./async-trainer.js";
export { balanceBatch, balancedPartitions } from "./balance.js";
export {
  type AsyncDataState,
  CheckpointManager,
  DriverRng,
  LATEST_FILE,
  TrainerCheckpointError,
  type TrainerState,
} from "./checkpoint.js";
export {
  DynamicSamplingError,
  FILTER_GROUPS_METRICS,
  type FilterGroupsMetric,
  filterInformativeGroups,
  filterMetricValues,
  type GroupFilter,
} from "./dynamic-sampling.js";
export { describeWorkerFailure, WorkerFailureError } from "./errors.js";
export {
  ADAPTER_EXPORTS,
  type AdapterExport,
  DEFAULT_MAX_SHARD_BYTES,
  EXPORT_DTYPES,
  type ExportDtype,
  ExportError,
  type ExportOptions,
  type ExportResult,
  exportCheckpoint,
  HF_METADATA_DIR,
  HF_METADATA_FILES,
  resolveActorDir,
  saveHfMetadata,
} from "./export.js";
export {
  dumpGenerations,
  formatGenerations,
  type GenerationRecord,
  pickGenerationsToLog,
} from "./generation-dump.js";
export {
  createMetricSinks,
  LoggerUnavailableError,
  type MetricSinkOptions,
  type MetricsSink,
} from "./loggers.js";
export {
  computeDataMetrics,
  computeThroughputMetrics,
  computeTimingPerTokenMetrics,
  computeToolMetrics,
  computeValidationMetrics,
  tokenCounts,
} from "./metrics.js";
export {
  RayPPOTrainer,
  type RewardScorerLike,
  type TrainerOptions,
  type TrainingSummary,
} from "./ppo-trainer.js";
export { applyRolloutCorrection } from "./rollout-correction.js";
export {
  FifoLock,
  RolloutQueue,
  RolloutQueueClosedError,
  RolloutQueueOverflowError,
  rolloutQueueCapacity,
} from "./rollout-queue.js";
export {
  formatStepLine,
  openRunLog,
  RunLog,
  type RunOptions,
  readMetrics,
  type StepMetrics,
} from "./run-log.js";
export {
  FSDPSFTTrainer,
  type SftSummary,
  type SftTrainerOptions,
  sftWorkerConfig,
} from "./sft-trainer.js";
export { crc32c, maskedCrc32c, scalarEvent, TensorBoardWriter, tfRecord } from "./tensorboard.js";
export {
  bootstrapSizes,
  computeMultiSampleValidationMetrics,
  type ValidationSample,
} from "./validation-metrics.js";
