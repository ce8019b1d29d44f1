// Workers: the FSDP-style ActorRolloutRef worker (actor + colocated rollout + reference policy).
export {
  type ActorRolloutRefOptions,
  ActorRolloutRefWorker,
  layoutForMiniBatches,
  type ShardInfo,
  type ToolSpec,
  WorkerStateError,
} from "./actor-rollout-ref.js";
export {
  CheckpointError,
  type FullState,
  readAllShards,
  type ShardMeta,
  writeShard,
} from "./checkpoint-files.js";
export { type FlatEntry, FlatLayout } from "./flat-params.js";
export {
  type AdamState,
  clipCoefficient,
  learningRate,
  lrMultiplier,
  OptimConfigError,
  type OptimSettings,
  ShardedAdamW,
  warmupSteps,
} from "./optim.js";
