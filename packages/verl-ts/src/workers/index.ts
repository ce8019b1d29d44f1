// Workers: the FSDP-style ActorRolloutRef worker (actor + colocated rollout + reference policy) and
// the critic, with the sharding pieces they share.
export {
  type ActorRolloutRefOptions,
  ActorRolloutRefWorker,
  layoutForMiniBatches,
  logProbMicroRows,
  rolloutSampling,
  type ToolSpec,
  type WorkerMemory,
} from "./actor-rollout-ref.js";
export {
  CheckpointError,
  type FullState,
  readAllShards,
  type ShardMeta,
  writeShard,
} from "./checkpoint-files.js";
export { type CriticMemory, type CriticOptions, CriticWorker, criticSettings } from "./critic.js";
export {
  EXTERNAL_LIB_KEY,
  ExternalLibError,
  externalLibSpecifier,
  importExternalLib,
} from "./external-lib.js";
export { type FlatEntry, FlatLayout } from "./flat-params.js";
export {
  allReduceSum,
  asFloat32,
  byMicroBatch,
  globalMaskSum,
  lossTokenWeights,
  type MicroStep,
  microBatches,
  miniBatchPlan,
  padColumns,
  perWorkerRows,
  pickRows,
  type RankContext,
  responseTokenBatch,
  rowColumns,
  rowsOf,
  ShardedParameters,
  ShardedWorker,
  type ShardInfo,
  WorkerStateError,
} from "./fsdp.js";
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
export {
  PolicyNotReadyError,
  PolicyReplica,
  PolicyReplicaActor,
  type PolicyReplicaOptions,
  type PolicySamplingSettings,
  type PolicyUpdateStats,
} from "./policy-replica.js";
export {
  type AllReduceGradientsOptions,
  allReduceGradients,
  broadcastParameters,
  type GradientReduceOp,
  GradientSyncError,
} from "./replica-sync.js";
export { SftWorker, type SftWorkerOptions } from "./sft-worker.js";
