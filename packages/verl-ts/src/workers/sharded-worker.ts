/**
 * The base of the trained workers (the actor and the critic): their rank context, the update loop over
 * mini- and micro-batches with global loss weights, the optimizer step on the shard, and the registered
 * methods every such worker has (shard info, gathered parameters, checkpoint save and load).
 */
import * as tf from "@tensorflow/tfjs";
import type { TokenBatch } from "../models/token-batch.js";
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { Dispatch, register } from "../single-controller/decorator.js";
import { Worker } from "../single-controller/worker.js";
import { WorkerStateError } from "./errors.js";
import { FaultInjector } from "./fault-injection.js";
import { globalMaskSum, lossTokenWeights } from "./loss-weights.js";
import { microBatches, miniBatchPlan } from "./micro-batches.js";
import { learningRate, type OptimSettings } from "./optim.js";
import { allReduceSum, type RankContext } from "./rank-context.js";
import { pickRows, responseTokenBatch, rowsOf } from "./rows.js";
import type { ShardedParameters } from "./sharded-parameters.js";

/** Where a rank's shard lies and the bytes it holds. */
export interface ShardInfo {
  rank: number;
  worldSize: number;
  numParameters: number;
  shardStart: number;
  shardEnd: number;
  /** fp32 master shard of the parameters. */
  paramShardBytes: number;
  /** AdamW exp_avg + exp_avg_sq of the shard. */
  optimizerBytes: number;
  /** The gathered weights the model computes with (full size on every rank). */
  gatheredParamBytes: number;
  backend: string;
  pid: number;
}

/** One micro-batch of an update, as the loss sees it. */
export interface MicroStep {
  /** Its rows. */
  part: DataProto;
  /** Their tokens, trimmed (responseTokenBatch). */
  tokens: { tb: TokenBatch; P: number; R: number; kept: number };
  /** The global loss weight of each of their response tokens [rows, R]. */
  weights: BatchTensor;
  /** The mini-batch's metric sums, to add to. */
  sums: Float64Array;
  /**
   * Asks for tensors' values after the backward pass: `use` gets them (in order) once the gradients are
   * read, all in one round trip. The loss runs inside the gradient tape, where nothing can be awaited,
   * and synchronous reads do not exist on GPU backends.
   */
  afterBackward(tensors: tf.Tensor[], use: (values: Float32Array[]) => void): void;
  /** Reads asked for by afterBackward, not yet served. */
  pending: { tensors: tf.Tensor[]; use: (values: Float32Array[]) => void }[];
}

/**
 * A worker that trains a sharded model (the actor, the critic): its rank context and the registered
 * methods every such worker has (gathered parameters, checkpoint save and load of its shard).
 */
export abstract class ShardedWorker extends Worker {
  protected sharded?: ShardedParameters;
  /** The tensor backend initModel selected. */
  protected backendName = "";
  private readonly faults = new FaultInjector(() => this.rank);

  protected get ctx(): RankContext {
    return { rank: this.rank, worldSize: this.worldSize, group: this.env.collectiveGroup };
  }

  /** Test fault hook (fault-injection.ts): call at the start of a method a test may crash. */
  protected injectFault(method: string): void {
    this.faults.at(method);
  }

  /** The trained parameters by name, as the model holds them now (the flat layout's order). */
  protected abstract currentParameters(): Promise<Map<string, Float32Array>>;

  /** Puts full parameters (by name) into the model. */
  protected abstract applyParameters(values: Map<string, Float32Array>): void;

  protected needSharded(): ShardedParameters {
    if (!this.sharded)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before training or checkpointing`);
    return this.sharded;
  }

  /** Parameters of the model this worker computes with (the sharded ones, unless it holds others). */
  protected numParameters(): number {
    return this.sharded?.layout.total ?? 0;
  }

  /** Where this rank's shard lies and the bytes it holds. */
  @register({ dispatchMode: Dispatch.ONE_TO_ALL })
  shardInfo(): ShardInfo {
    const s = this.sharded;
    const total = this.numParameters();
    return {
      rank: this.rank,
      worldSize: this.worldSize,
      numParameters: total,
      shardStart: s?.start ?? 0,
      shardEnd: s?.end ?? 0,
      paramShardBytes: s?.params.byteLength ?? 0,
      optimizerBytes: s?.optim.stateBytes ?? 0,
      gatheredParamBytes: total * 4,
      backend: this.backendName,
      pid: process.pid,
    };
  }

  /**
   * The update loop both trained workers run: `epochs` passes over the rank's rows in local
   * mini-batches (laid out by layoutForMiniBatches), each cut into micro-batches (fixed rows, or a token
   * budget), the gradient of `loss` accumulated over them with the global token weights of
   * `lossAggMode`, then one optimizer step on the shards and the gathered parameters back in the model.
   * `loss` runs inside the gradient tape and adds its metric sums to `step.sums` (all-reduced per
   * mini-batch, summed over mini-batches). One scheduler step per call.
   */
  protected async updateEpochs(
    data: DataProto,
    plan: {
      /** What the mini-batch is, for errors ("actor.ppo_mini_batch_size x rollout.n"). */
      what: string;
      globalMiniRows: number;
      micro: number | null;
      maxTokens: number | null;
      epochs: number;
      lossAggMode: string;
      optim: OptimSettings;
      gradClip: number;
      /** Metric sums per mini-batch. */
      sums: number;
    },
    vars: tf.Variable[],
    paramNameOf: Map<string, string>,
    loss: (step: MicroStep) => tf.Scalar,
  ): Promise<{ sums: Float64Array; miniBatches: number; gradNorm: number; skipped: number; lr: number }> {
    const sharded = this.needSharded();
    const { localMini, micro } = miniBatchPlan(
      this.ctx,
      data.length,
      plan.globalMiniRows,
      plan.micro,
      plan.what,
    );
    const lr = learningRate(plan.optim, sharded.schedulerStep);
    const sums = new Float64Array(plan.sums);
    let gradNormSum = 0;
    let updates = 0;
    let skipped = 0;
    for (let epoch = 0; epoch < plan.epochs; epoch++) {
      for (let ms = 0; ms < data.length; ms += localMini) {
        const mini = data.slice(ms, ms + localMini);
        const R = mini.tensor("responses").shape[1]!;
        const mask = mini.batch.loss_mask ?? mini.tensor("response_mask");
        const globalTokens = await globalMaskSum(this.ctx, mask);
        const weights = lossTokenWeights(mask, plan.lossAggMode, globalTokens, plan.globalMiniRows);
        const grad = new Float32Array(sharded.layout.total);
        const mb = new Float64Array(plan.sums);
        for (const rows of microBatches(mini, micro, plan.maxTokens)) {
          const part = rowsOf(mini, rows);
          const step: MicroStep = {
            part,
            tokens: responseTokenBatch(part),
            weights: { data: pickRows(weights, R, rows), shape: [rows.length, R] },
            sums: mb,
            pending: [],
            afterBackward(tensors, use) {
              // A clone shares the data, so the loss the tape hands back can be disposed independently.
              this.pending.push({ tensors: tensors.map((t) => tf.keep(tf.clone(t))), use });
            },
          };
          const { value, grads } = tf.variableGrads(() => loss(step), vars);
          value.dispose();
          // The loss's metric reads come back together with the gradients, in the order asked.
          const reads = step.pending.splice(0);
          try {
            const [host] = await Promise.all([
              Promise.all(
                reads.map((r) => Promise.all(r.tensors.map((t) => t.data() as Promise<Float32Array>))),
              ),
              sharded.accumulate(grads, paramNameOf, grad),
            ]);
            for (const [i, r] of reads.entries()) r.use(host[i]!);
          } finally {
            for (const r of reads) for (const t of r.tensors) t.dispose();
          }
        }
        await allReduceSum(this.ctx, mb);
        for (let i = 0; i < plan.sums; i++) sums[i]! += mb[i]!;
        const norm = await sharded.step(grad, lr, plan.gradClip);
        if (Number.isFinite(norm)) {
          this.applyParameters(await sharded.gather());
          gradNormSum += norm;
          updates++;
        } else skipped++;
      }
    }
    sharded.schedulerStep++;
    return {
      sums,
      miniBatches: plan.epochs * (data.length / localMini),
      gradNorm: updates ? gradNormSum / updates : Number.NaN,
      skipped,
      lr,
    };
  }

  /** The gathered parameters as one flat vector (checkpoint order), from rank 0. */
  @register({ dispatchMode: Dispatch.RANK_ZERO })
  async gatheredParameters(): Promise<Float32Array> {
    return this.needSharded().layout.flatten(await this.currentParameters());
  }

  /** Writes this rank's shard (params + AdamW state + counters) under `dir`. */
  @register({ dispatchMode: Dispatch.ONE_TO_ALL })
  saveCheckpoint(dir: string): { rank: number; bytes: number } {
    return { rank: this.rank, bytes: this.needSharded().save(dir) };
  }

  /** Loads the shards written by saveCheckpoint (by any number of ranks) and takes this rank's range. */
  @register({ dispatchMode: Dispatch.ONE_TO_ALL })
  async loadCheckpoint(dir: string): Promise<{ rank: number; schedulerStep: number }> {
    const sharded = this.needSharded();
    this.applyParameters(sharded.load(dir));
    return { rank: this.rank, schedulerStep: sharded.schedulerStep };
  }
}
