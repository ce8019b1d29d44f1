/**
 * This rank's shard of a model's parameters and of their AdamW state. All parameters laid end to end form
 * one flat vector (FlatLayout); rank r of W owns shardRange(total, W, r) of it. The optimizer step is
 * reduce-scatter of the gradient, global norm, clip, AdamW on the shard, all-gather of the parameters.
 */
import { statSync } from "node:fs";
import type * as tf from "@tensorflow/tfjs";
import { collective, shardRange } from "@torl-ts/actors";
import { CheckpointError, readAllShards, writeShard } from "./checkpoint-files.js";
import { WorkerStateError } from "./errors.js";
import { FlatLayout } from "./flat-params.js";
import { clipCoefficient, type OptimSettings, ShardedAdamW } from "./optim.js";
import { allReduceSum, type RankContext } from "./rank-context.js";

/** This rank's shard of a model's parameters and of their AdamW state (see the file comment). */
export class ShardedParameters {
  readonly layout: FlatLayout;
  readonly start: number;
  readonly end: number;
  /** The shard's parameters (the master copy; the model's variables hold the gathered values). */
  readonly params: Float32Array;
  readonly optim: ShardedAdamW;
  /** Scheduler steps taken (one per update call). */
  schedulerStep = 0;
  /** Where each parameter starts in the flat vector. */
  private readonly offsets: Map<string, number>;

  constructor(
    values: Map<string, Float32Array>,
    private readonly ctx: RankContext,
    optim: OptimSettings,
  ) {
    if (ctx.worldSize > 1 && !ctx.group)
      throw new WorkerStateError(
        `rank ${ctx.rank} of ${ctx.worldSize} has no collective group (create the WorkerGroup with collective: true)`,
      );
    this.layout = FlatLayout.of(values);
    const { start, end } = shardRange(this.layout.total, ctx.worldSize, ctx.rank);
    this.start = start;
    this.end = end;
    this.params = this.layout.flatten(values).slice(start, end);
    this.offsets = new Map(this.layout.entries.map((e) => [e.name, e.offset]));
    this.optim = new ShardedAdamW(end - start, optim);
  }

  /**
   * Reduce-scatter of the flat gradient, global norm, clipping, AdamW on the shard. Returns the
   * (pre-clip) global gradient norm; a non-finite norm skips the update (veRL does the same). Call
   * `gather` afterwards to get the parameters the model should hold.
   */
  async step(grad: Float32Array, lr: number, gradClip: number): Promise<number> {
    const g =
      this.ctx.worldSize > 1
        ? ((await collective.reduceScatter(grad, "sum", this.ctx.group!)) as Float32Array)
        : grad.subarray(this.start, this.end);
    const sq = new Float64Array(1);
    for (let i = 0; i < g.length; i++) sq[0]! += g[i]! * g[i]!;
    await allReduceSum(this.ctx, sq);
    const norm = Math.sqrt(sq[0]!);
    if (!Number.isFinite(norm)) return norm;
    const coef = clipCoefficient(norm, gradClip);
    this.optim.update(this.params, coef === 1 ? g : Float32Array.from(g, (x) => x * coef), lr);
    return norm;
  }

  /** All-gathers the shards into the full parameters, by name. */
  async gather(): Promise<Map<string, Float32Array>> {
    const full =
      this.ctx.worldSize > 1
        ? ((await collective.allGather(
            this.params,
            this.ctx.group!,
            new Float32Array(this.layout.total),
          )) as Float32Array)
        : this.params;
    return this.layout.unflatten(full);
  }

  /** Writes this rank's shard (params + AdamW state + counters) under `dir`; returns the bytes written. */
  save(dir: string): number {
    writeShard(
      dir,
      {
        rank: this.ctx.rank,
        worldSize: this.ctx.worldSize,
        start: this.start,
        end: this.end,
        total: this.layout.total,
        adamStep: this.optim.step,
        schedulerStep: this.schedulerStep,
        layout: this.layout.entries.map((e) => [e.name, e.size]),
      },
      this.params,
      this.optim.expAvg,
      this.optim.expAvgSq,
    );
    return statSync(`${dir}/rank_${this.ctx.rank}.bin`).size;
  }

  /**
   * Loads the shards written by `save` (by any number of ranks), takes this rank's range, and returns
   * the full parameters by name (for the model's variables).
   */
  load(dir: string): Map<string, Float32Array> {
    const full = readAllShards(dir);
    const entries = this.layout.entries;
    const same =
      full.layout.length === entries.length &&
      full.layout.every(([name, size], i) => entries[i]!.name === name && entries[i]!.size === size);
    if (!same) throw new CheckpointError(`${dir}: the checkpoint's parameters do not match the model`);
    this.params.set(full.params.subarray(this.start, this.end));
    this.optim.loadState({
      step: full.adamStep,
      expAvg: full.expAvg.subarray(this.start, this.end),
      expAvgSq: full.expAvgSq.subarray(this.start, this.end),
    });
    this.schedulerStep = full.schedulerStep;
    return this.layout.unflatten(full.params);
  }

  /** Adds tfjs gradients (by variable name) into a flat gradient vector, disposing them; one read for all. */
  async accumulate(
    grads: Record<string, tf.Tensor>,
    paramNameOf: Map<string, string>,
    flat: Float32Array,
  ): Promise<void> {
    const entries = Object.entries(grads);
    let host: Float32Array[];
    try {
      host = await Promise.all(entries.map(([, g]) => g.data() as Promise<Float32Array>));
    } finally {
      for (const [, g] of entries) g.dispose();
    }
    entries.forEach(([vname], e) => {
      const off = this.offsets.get(paramNameOf.get(vname)!)!;
      const gd = host[e]!;
      for (let i = 0; i < gd.length; i++) flat[off + i]! += gd[i]!;
    });
  }
}
