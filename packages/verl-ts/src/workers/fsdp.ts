/**
 * The FSDP-style pieces every trained worker shares (the actor and the critic): the sharded parameters
 * with their AdamW state, the optimizer step (reduce-scatter, global norm, clip, AdamW, all-gather),
 * checkpoints of the shard, global loss-token weights and the token batch of a DataProto.
 *
 * Sharding: all parameters laid end to end form one flat vector (FlatLayout); rank r of W owns
 * shardRange(total, W, r) of it, plus the AdamW exp_avg / exp_avg_sq of that range.
 *
 * Loss aggregation is global: the loss of a mini-batch is `aggLoss` of the whole global mini-batch (all
 * ranks' rows), not a mean of per-rank means. Every token gets a weight (token-mean: 1 / global loss
 * tokens; seq-mean-token-sum: 1 / global rows; seq-mean-token-mean: 1 / (row tokens x global rows);
 * seq-mean-token-sum-norm: 1 / response width) and the rank's loss is the weighted sum of its tokens'
 * losses, so the summed gradients are exactly those of the global loss, whatever W is.
 */
import { statSync } from "node:fs";
import * as tf from "@tensorflow/tfjs";
import { type CollectiveArray, collective, shardRange } from "@torl-ts/actors";
import type { TokenBatch } from "../models/qwen2.js";
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { Dispatch, type Registrations } from "../single-controller/registration.js";
import { Worker } from "../single-controller/worker.js";
import { CheckpointError, readAllShards, writeShard } from "./checkpoint-files.js";
import { FlatLayout } from "./flat-params.js";
import { clipCoefficient, learningRate, type OptimSettings, ShardedAdamW } from "./optim.js";

/** A worker used before its model is loaded, or asked for what its role does not hold. */
export class WorkerStateError extends Error {
  override name = "WorkerStateError";
}

/** Where a rank's collective calls go. */
export interface RankContext {
  rank: number;
  worldSize: number;
  /** The collective group (needed when worldSize > 1). */
  group?: string;
}

export async function allReduceSum(ctx: RankContext, arr: Float64Array | Float32Array): Promise<void> {
  if (ctx.worldSize > 1) await collective.allReduce(arr as CollectiveArray, "sum", ctx.group!);
}

/** This rank's shard of a model's parameters and of their AdamW state. */
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

/** A host tensor's values as float32 (no copy when they already are). */
export function asFloat32(t: BatchTensor): Float32Array {
  return t.data instanceof Float32Array ? t.data : Float32Array.from(t.data as ArrayLike<number>);
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
  static readonly registered = {
    shardInfo: Dispatch.ONE_TO_ALL,
    gatheredParameters: Dispatch.RANK_ZERO,
    saveCheckpoint: Dispatch.ONE_TO_ALL,
    loadCheckpoint: Dispatch.ONE_TO_ALL,
  } satisfies Registrations<ShardedWorker>;

  protected sharded?: ShardedParameters;
  /** The tensor backend initModel selected. */
  protected backendName = "";
  private readonly calls = new Map<string, number>();

  protected get ctx(): RankContext {
    return { rank: this.rank, worldSize: this.worldSize, group: this.env.collectiveGroup };
  }

  /**
   * Fault injection for tests: TORL_TEST_EXIT_AT="method:call:rank[:code]" makes this rank's process exit
   * at the start of its call-th call of `method` (as a crash would).
   */
  protected injectFault(method: string): void {
    const spec = process.env.TORL_TEST_EXIT_AT;
    const n = (this.calls.get(method) ?? 0) + 1;
    this.calls.set(method, n);
    if (!spec) return;
    const [m, call, rank, code] = spec.split(":");
    if (m === method && Number(call) === n && Number(rank) === this.rank) process.exit(Number(code ?? 1));
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
  async gatheredParameters(): Promise<Float32Array> {
    return this.needSharded().layout.flatten(await this.currentParameters());
  }

  /** Writes this rank's shard (params + AdamW state + counters) under `dir`. */
  saveCheckpoint(dir: string): { rank: number; bytes: number } {
    return { rank: this.rank, bytes: this.needSharded().save(dir) };
  }

  /** Loads the shards written by saveCheckpoint (by any number of ranks) and takes this rank's range. */
  async loadCheckpoint(dir: string): Promise<{ rank: number; schedulerStep: number }> {
    const sharded = this.needSharded();
    this.applyParameters(sharded.load(dir));
    return { rank: this.rank, schedulerStep: sharded.schedulerStep };
  }
}

/**
 * Rows per local mini-batch and per micro-batch for an update over `data` (checked: the global
 * mini-batch splits over the ranks and the rank's rows split into mini-batches).
 */
export function miniBatchPlan(
  ctx: RankContext,
  rows: number,
  globalMiniRows: number,
  microPerGpu: number | null | undefined,
  what: string,
): { localMini: number; micro: number } {
  const W = ctx.worldSize;
  if (globalMiniRows % W !== 0)
    throw new WorkerStateError(
      `${what}: a global mini-batch of ${globalMiniRows} rows does not split over ${W} ranks`,
    );
  const localMini = globalMiniRows / W;
  if (rows % localMini !== 0)
    throw new WorkerStateError(
      `${what}: rank ${ctx.rank} got ${rows} rows, not a multiple of its mini-batch (${localMini} rows = ${globalMiniRows} / ${W} ranks)`,
    );
  return { localMini, micro: microPerGpu ?? localMini };
}

/** Weight of every token of a local mini-batch in the global loss (see the file comment). */
export function lossTokenWeights(
  mask: BatchTensor,
  mode: string,
  globalTokens: number,
  globalRows: number,
): Float32Array {
  const [B, R] = mask.shape as [number, number];
  const w = new Float32Array(B * R);
  for (let b = 0; b < B; b++) {
    let rowTok = 0;
    for (let t = 0; t < R; t++) rowTok += Number(mask.data[b * R + t]);
    let scale: number;
    switch (mode) {
      case "token-mean":
        scale = globalTokens > 0 ? 1 / globalTokens : 0;
        break;
      case "seq-mean-token-sum":
        scale = 1 / globalRows;
        break;
      case "seq-mean-token-mean":
        scale = rowTok > 0 ? 1 / (rowTok * globalRows) : 0;
        break;
      case "seq-mean-token-sum-norm":
        scale = 1 / R;
        break;
      default:
        throw new WorkerStateError(`unknown loss_agg_mode "${mode}"`);
    }
    for (let t = 0; t < R; t++) w[b * R + t] = Number(mask.data[b * R + t]) * scale;
  }
  return w;
}

/** Sum of a mask over all ranks (the global loss-token count of a mini-batch). */
export async function globalMaskSum(ctx: RankContext, mask: BatchTensor): Promise<number> {
  const den = new Float64Array(1);
  for (let i = 0; i < mask.data.length; i++) den[0]! += Number(mask.data[i]);
  await allReduceSum(ctx, den);
  return den[0]!;
}

/**
 * The token batch of input_ids / attention_mask, trimmed: leading columns that are padding in every
 * row (prompts are left-padded to max_prompt_length) and trailing ones (responses are right-padded to
 * max_response_length) are dropped. The scores of real tokens do not change (causal attention, and
 * positions count real tokens), the forward gets much cheaper. P: prompt columns kept; R: the data's
 * response width; kept: response columns kept (the rest are padding in every row, scored 0).
 */
export function responseTokenBatch(data: DataProto): { tb: TokenBatch; P: number; R: number; kept: number } {
  const ids = data.tensor("input_ids");
  const attn = data.tensor("attention_mask");
  const R = data.tensor("responses").shape[1]!;
  const [B, L] = ids.shape as [number, number];
  let c0 = L - R;
  let c1 = L - R + 1; // at least one response column, so that every slice has a width
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < c0; t++) {
      if (Number(attn.data[b * L + t]) !== 0) {
        c0 = t;
        break;
      }
    }
    for (let t = L - 1; t >= c1; t--) {
      if (Number(attn.data[b * L + t]) !== 0) {
        c1 = t + 1;
        break;
      }
    }
  }
  const W = c1 - c0;
  const idOut = new Int32Array(B * W);
  const maskOut = new Uint8Array(B * W);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < W; t++) {
      idOut[b * W + t] = Number(ids.data[b * L + c0 + t]);
      maskOut[b * W + t] = Number(attn.data[b * L + c0 + t]);
    }
  }
  return { tb: { ids: idOut, mask: maskOut, batch: B, length: W }, P: L - R - c0, R, kept: c1 - (L - R) };
}

/** Columns [start, start + kept) of every row of a [B, L] host array, as rows of width R (zero-filled). */
export function rowColumns(
  full: Float32Array,
  B: number,
  L: number,
  start: number,
  kept: number,
  R: number,
): Float32Array {
  const out = new Float32Array(B * R);
  for (let b = 0; b < B; b++) out.set(full.subarray(b * L + start, b * L + start + kept), b * R);
  return out;
}

/** [b, kept] -> [b, R] with zero columns on the right (a trimmed batch's scores at full width). */
export function padColumns(t: tf.Tensor2D, R: number): tf.Tensor2D {
  const kept = t.shape[1];
  return kept === R
    ? t
    : tf.pad(t, [
        [0, 0],
        [0, R - kept],
      ]);
}

/**
 * Rows per micro-batch on one worker: the `_per_gpu` setting, else veRL's deprecated global form divided
 * over the workers (at least 1), else null (not set).
 */
export function perWorkerRows(
  perGpu: number | null | undefined,
  global: number | null | undefined,
  worldSize: number,
): number | null {
  if (perGpu !== null && perGpu !== undefined) return perGpu;
  return global ? Math.max(1, Math.floor(global / worldSize)) : null;
}

/**
 * The micro-batches of one pass over `data`, as row indices. Fixed: `rows` rows each, in order.
 * Dynamic (`maxTokens` set: veRL's use_dynamic_bsz with *_max_token_len_per_gpu): rows sorted by
 * length, longest first, and packed while the micro-batch's tensor stays within maxTokens tokens
 * (rows x (longest prompt + longest response): our forward pads a micro-batch to that); a row longer
 * than the budget gets a micro-batch of its own. Losses are weighted globally (lossTokenWeights), so
 * the grouping changes no gradient, only memory and speed.
 */
export function microBatches(data: DataProto, rows: number, maxTokens?: number | null): number[][] {
  const B = data.length;
  if (!maxTokens) {
    const out: number[][] = [];
    for (let s = 0; s < B; s += rows)
      out.push(Array.from({ length: Math.min(rows, B - s) }, (_, i) => s + i));
    return out;
  }
  const attn = data.tensor("attention_mask");
  const R = data.tensor("responses").shape[1]!;
  const L = attn.shape[1]!;
  const P = L - R;
  const len = (b: number, from: number, to: number) => {
    let n = 0;
    for (let t = from; t < to; t++) n += Number(attn.data[b * L + t]);
    return n;
  };
  const prompt = Array.from({ length: B }, (_, b) => len(b, 0, P));
  const response = Array.from({ length: B }, (_, b) => len(b, P, L));
  const order = Array.from({ length: B }, (_, b) => b).sort(
    (x, y) => prompt[y]! + response[y]! - (prompt[x]! + response[x]!) || x - y,
  );
  const out: number[][] = [];
  let group: number[] = [];
  let pMax = 0;
  let rMax = 0;
  for (const b of order) {
    const p = Math.max(pMax, prompt[b]!);
    const r = Math.max(rMax, response[b]!, 1);
    if (group.length > 0 && (group.length + 1) * (p + r) > maxTokens) {
      out.push(group);
      group = [];
      pMax = 0;
      rMax = 0;
    }
    group.push(b);
    pMax = Math.max(pMax, prompt[b]!);
    rMax = Math.max(rMax, response[b]!, 1);
  }
  if (group.length) out.push(group);
  return out;
}

/** Rows `idx` of a [B, R] host array. */
export function pickRows(data: Float32Array, R: number, idx: readonly number[]): Float32Array {
  const out = new Float32Array(idx.length * R);
  for (const [i, row] of idx.entries()) out.set(data.subarray(row * R, (row + 1) * R), i * R);
  return out;
}

/** Rows `idx` of `data`: a view when they are contiguous and in order, else a copy. */
export function rowsOf(data: DataProto, idx: readonly number[]): DataProto {
  const first = idx[0] ?? 0;
  return idx.every((row, i) => row === first + i)
    ? data.slice(first, first + idx.length)
    : data.selectRows(idx);
}

/**
 * Runs `score` on each micro-batch (row indices from microBatches) and assembles its outputs, host
 * arrays [rows, R], into arrays [data.length, R] in the data's row order.
 */
export async function byMicroBatch(
  data: DataProto,
  groups: number[][],
  R: number,
  score: (part: DataProto) => Promise<Float32Array[]>,
): Promise<Float32Array[]> {
  let outs: Float32Array[] | undefined;
  for (const g of groups) {
    const res = await score(rowsOf(data, g));
    outs ??= res.map(() => new Float32Array(data.length * R));
    for (const [k, r] of res.entries())
      for (const [i, row] of g.entries()) outs[k]!.set(r.subarray(i * R, (i + 1) * R), row * R);
  }
  return outs ?? [];
}
