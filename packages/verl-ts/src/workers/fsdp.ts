/**
 * The FSDP-style pieces every trained worker shares (the actor and the critic), one file each:
 * - sharded-parameters.ts: this rank's shard of the flat parameter vector and its AdamW state, the
 *   optimizer step (reduce-scatter, global norm, clip, AdamW, all-gather) and checkpoints of the shard;
 * - sharded-worker.ts: the worker base with the update loop and the registered shard methods;
 * - loss-weights.ts: global loss aggregation (per-token weights, so any number of ranks gives the
 *   gradient of the global loss);
 * - micro-batches.ts: mini-batch plans and micro-batch packing (fixed rows or a token budget);
 * - rows.ts: row and column helpers over a DataProto's host tensors;
 * - rank-context.ts, errors.ts, fault-injection.ts: a rank's place in its group, the workers' state
 *   error, the test fault hook.
 */
export { WorkerStateError } from "./errors.js";
export { globalMaskSum, lossTokenWeights } from "./loss-weights.js";
export { byMicroBatch, microBatches, miniBatchPlan, perWorkerRows } from "./micro-batches.js";
export { allReduceSum, type RankContext } from "./rank-context.js";
export { asFloat32, padColumns, pickRows, responseTokenBatch, rowColumns, rowsOf } from "./rows.js";
export { ShardedParameters } from "./sharded-parameters.js";
export { type MicroStep, ShardedWorker, type ShardInfo } from "./sharded-worker.js";
