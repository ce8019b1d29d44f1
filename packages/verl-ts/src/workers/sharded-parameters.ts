/**
 * This rank's shard of a model's parameters and of their AdamW state, FSDP style. All parameters laid
 * end to end form one flat vector (FlatLayout), cut into units: runs of consecutive parameters that are
 * gathered and reduce-scattered together (one per decoder layer, and the parameters around the layers).
 * Rank r of W owns shardRange(unit size, W, r) of every unit, plus the AdamW exp_avg / exp_avg_sq of
 * those elements, so one collective per unit moves a layer's parameters or gradients and no rank needs
 * the whole model's gradients at once. The optimizer step is the global gradient norm, clipping and
 * AdamW on the shard; the elementwise update makes the result independent of how the vector is cut.
 */
import { statSync } from "node:fs";
import { collective, shardRange } from "@torl-ts/actors";
import { float32Range, HalfArray, type StoredValues, type WeightDtype } from "../models/half-precision.js";
import { CheckpointError, readAllShards, writeShard } from "./checkpoint-files.js";
import { WorkerStateError } from "./errors.js";
import { type FlatEntry, FlatLayout } from "./flat-params.js";
import { layerUnitKey } from "./layer-sharding.js";
import { clipCoefficient, type OptimSettings, ShardedAdamW } from "./optim.js";
import { allReduceSum, type RankContext } from "./rank-context.js";
import { addInto, sumSquares, useNativeReductions } from "./vector-ops.js";

/** Consecutive parameters gathered and reduce-scattered together; [start, end) of the flat vector. */
export interface FlatUnit {
  key: string;
  start: number;
  end: number;
  entries: FlatEntry[];
}

/** This rank's piece of a unit: [start, end) of the flat vector, held at `local` in the shard. */
export interface ShardPiece {
  start: number;
  end: number;
  local: number;
}

/** The units of a layout: maximal runs of consecutive parameters with the same key. */
export function flatUnits(layout: FlatLayout, keyOf: (name: string) => string): FlatUnit[] {
  const units: FlatUnit[] = [];
  for (const e of layout.entries) {
    const key = keyOf(e.name);
    const last = units.at(-1);
    if (last && last.key === key) {
      last.end = e.offset + e.size;
      last.entries.push(e);
    } else units.push({ key, start: e.offset, end: e.offset + e.size, entries: [e] });
  }
  return units;
}

/**
 * How a model's parameters are sharded: the flat layout of `values`, its units (by `unitKey`), and this
 * rank's piece of every unit (shardRange of each), laid end to end in unit order (`length` in all).
 */
export function shardedLayout(
  values: Map<string, { length: number }>,
  ctx: RankContext,
  unitKey: (name: string) => string = layerUnitKey,
): { layout: FlatLayout; units: FlatUnit[]; pieces: ShardPiece[]; length: number } {
  if (ctx.worldSize > 1 && !ctx.group)
    throw new WorkerStateError(
      `rank ${ctx.rank} of ${ctx.worldSize} has no collective group (create the WorkerGroup with collective: true)`,
    );
  const layout = new FlatLayout([...values].map(([name, v]) => ({ name, size: v.length })));
  const units = flatUnits(layout, unitKey);
  let length = 0;
  const pieces = units.map((u) => {
    const { start, end } = shardRange(u.end - u.start, ctx.worldSize, ctx.rank);
    const piece = { start: u.start + start, end: u.start + end, local: length };
    length += end - start;
    return piece;
  });
  return { layout, units, pieces, length };
}

/** ShardedParameters made in this process so far (each names itself by its count). */
let shardInstances = 0;

export class ShardedParameters {
  readonly layout: FlatLayout;
  readonly units: FlatUnit[];
  /** This rank's piece of each unit, in unit order. */
  readonly pieces: ShardPiece[];
  /** The shard's parameters, the pieces end to end (the master copy). */
  readonly params: Float32Array;
  readonly optim: ShardedAdamW;
  /** Where gatherUnitStored rounds this rank's piece (the largest piece's size, kept between gathers). */
  private readonly roundScratch: (Uint16Array | undefined)[] = [undefined, undefined];
  /** Which of the two roundScratch arrays the next gather rounds into. */
  private nextRound = 0;
  /** Scheduler steps taken (one per update call). */
  schedulerStep = 0;
  /**
   * Storage dtype of the model these are the master weights of (model.dtype): recorded in checkpoints,
   * and a checkpoint of another dtype is refused on load.
   */
  weightDtype: WeightDtype = "float32";
  /** Where each parameter starts in the flat vector. */
  private readonly offsets: Map<string, number>;
  /** Which shard this is (distinct per instance in a process) and how many times step or load wrote it. */
  private readonly instance = ++shardInstances;
  private writes = 0;

  /**
   * `values`: every parameter (float32, or half bits widened here); only this rank's pieces are copied,
   * so building a shard costs the shard's memory, not the model's. `unitKey` names each parameter's
   * unit (default: its decoder layer, see layer-sharding.ts).
   */
  constructor(
    values: Map<string, StoredValues>,
    private readonly ctx: RankContext,
    optim: OptimSettings,
    unitKey: (name: string) => string = layerUnitKey,
  ) {
    // the gradients' reduce-scatters add in the addon's loop (the same bits as the ring's own)
    if (ctx.worldSize > 1) useNativeReductions();
    const sharding = shardedLayout(values, ctx, unitKey);
    this.layout = sharding.layout;
    this.units = sharding.units;
    this.pieces = sharding.pieces;
    const local = sharding.length;
    this.params = new Float32Array(local);
    for (const p of this.pieces)
      copyFlatRange(values, this.layout, p.start, p.end, this.params.subarray(p.local));
    this.offsets = new Map(this.layout.entries.map((e) => [e.name, e.offset]));
    this.optim = new ShardedAdamW(local, optim);
  }

  /**
   * Names the shard's values as they are now: it changes whenever step or load writes them. A copy
   * gathered under one version holds the values of any later gather under the same version.
   */
  get version(): string {
    return `shard ${this.instance}.${this.writes}`;
  }

  /** The number of ranks the parameters are sharded over. */
  get worldSize(): number {
    return this.ctx.worldSize;
  }

  /** Whether `mine` holds on every rank (an all-reduce of one number; one rank: `mine`). */
  async everyRank(mine: boolean): Promise<boolean> {
    if (this.ctx.worldSize === 1) return mine;
    const misses = new Float64Array([mine ? 0 : 1]);
    await allReduceSum(this.ctx, misses);
    return misses[0] === 0;
  }

  /** For each of `mine`, whether it holds on every rank (one all-reduce for all of them). */
  async everyRankEach(mine: boolean[]): Promise<boolean[]> {
    if (this.ctx.worldSize === 1) return mine;
    const misses = Float64Array.from(mine, (m) => (m ? 0 : 1));
    await allReduceSum(this.ctx, misses);
    return Array.from(misses, (m) => m === 0);
  }

  /**
   * Every rank's `values` end to end, in rank order (lengths may differ: the caller frames its own); one
   * rank: `values` itself. One collective call.
   */
  async allGatherConcat(values: Float32Array): Promise<Float32Array> {
    if (this.ctx.worldSize === 1) return values;
    return collective.allGather(values, this.ctx.group!);
  }

  /** Where parameter `name` starts in the flat vector. */
  offsetOf(name: string): number {
    const o = this.offsets.get(name);
    if (o === undefined) throw new WorkerStateError(`no parameter named ${name} in the sharded layout`);
    return o;
  }

  /** Values in this rank's largest piece of a unit (the size of the scratch buffers kept between calls). */
  private largestPiece(): number {
    return Math.max(...this.pieces.map((p) => p.end - p.start));
  }

  /** A zero gradient the size of this rank's shard (what reduceScatterUnit adds into). */
  newGradient(): Float32Array {
    return new Float32Array(this.params.length);
  }

  /**
   * Sums unit `u`'s gradient (full unit size, this rank's contribution) over the ranks and adds this
   * rank's piece of the sum into `shardGrad` (`overwrite`: writes it there, for the first write of a
   * gradient whose memory holds anything). Every rank calls it for the same units in the same order.
   * The sum is reduced in place into this rank's piece of `unitGrad` (no memory of its own: the
   * embedding's piece is 272 MB at Qwen2.5-0.5B's size), so that piece of `unitGrad` holds the sum after.
   */
  async reduceScatterUnit(
    u: number,
    unitGrad: Float32Array,
    shardGrad: Float32Array,
    overwrite = false,
  ): Promise<void> {
    const unit = this.units[u]!;
    const piece = this.pieces[u]!;
    if (unitGrad.length !== unit.end - unit.start)
      throw new RangeError(
        `unit ${unit.key}: gradient of ${unitGrad.length} values, expected ${unit.end - unit.start}`,
      );
    const own = piece.end - piece.start;
    const mine = unitGrad.subarray(piece.start - unit.start, piece.end - unit.start);
    if (this.ctx.worldSize > 1) await collective.reduceScatter(unitGrad, "sum", this.ctx.group!, mine);
    const into = shardGrad.subarray(piece.local, piece.local + own);
    if (overwrite) into.set(mine);
    else addInto(mine, into);
  }

  /**
   * The global gradient norm of the reduced shard gradient, clipping, AdamW on the shard. Returns the
   * (pre-clip) norm; a non-finite norm skips the update (veRL does the same). Clipping scales each
   * gradient value as the AdamW pass reads it (no second shard-sized array, no pass of its own). Call
   * `gather` afterwards to get the parameters the model should hold.
   */
  async step(shardGrad: Float32Array, lr: number, gradClip: number): Promise<number> {
    const g = shardGrad;
    const sq = new Float64Array([sumSquares(g)]);
    await allReduceSum(this.ctx, sq);
    const norm = Math.sqrt(sq[0]!);
    if (!Number.isFinite(norm)) return norm;
    // clipping folded into the AdamW pass: the bits of scaling the gradient first, one pass fewer
    this.writes++;
    this.optim.update(this.params, g, lr, clipCoefficient(norm, gradClip));
    return norm;
  }

  /**
   * All-gathers unit `u`'s parameters (unit size, in flat order), into `out` when given (one rank: the
   * shard's own values, unless `out` is given).
   */
  async gatherUnit(u: number, out?: Float32Array): Promise<Float32Array> {
    const unit = this.units[u]!;
    const piece = this.pieces[u]!;
    const mine = this.params.subarray(piece.local, piece.local + piece.end - piece.start);
    this.checkUnitOut(u, out);
    if (this.ctx.worldSize === 1) {
      out?.set(mine);
      return out ?? mine;
    }
    return (await collective.allGather(
      mine,
      this.ctx.group!,
      out ?? new Float32Array(unit.end - unit.start),
    )) as Float32Array;
  }

  /**
   * All-gathers unit `u`'s parameters rounded into `dtype` (half dtypes: their bit patterns), into `out`
   * when given (a Float32Array for float32, else a Uint16Array of the bits). Each rank rounds only its own
   * piece and the ring moves 2 bytes a value instead of 4; rounding is elementwise, so the result has the
   * bits of gatherUnit's values rounded after the gather.
   */
  async gatherUnitStored(
    u: number,
    dtype: WeightDtype,
    out?: Float32Array | Uint16Array,
  ): Promise<StoredValues> {
    if (dtype === "float32") {
      if (out !== undefined && !(out instanceof Float32Array))
        throw new TypeError(`unit ${this.units[u]!.key}: a float32 gather needs a Float32Array out`);
      return this.gatherUnit(u, out);
    }
    if (out !== undefined && !(out instanceof Uint16Array))
      throw new TypeError(`unit ${this.units[u]!.key}: a ${dtype} gather needs a Uint16Array out (the bits)`);
    this.checkUnitOut(u, out);
    const unit = this.units[u]!;
    const piece = this.pieces[u]!;
    const own = this.params.subarray(piece.local, piece.local + piece.end - piece.start);
    if (this.ctx.worldSize === 1) {
      if (!out) return HalfArray.fromFloat32(own, dtype);
      const half = new HalfArray(dtype, out);
      half.assign(own);
      return half;
    }
    const group = this.ctx.group!;
    if (out && collective.usesSharedMemory(group)) {
      // rounded straight into this rank's part of out and gathered in place: through shared memory the
      // gather copies the part into its file before it returns, so nothing else need hold it
      const part = shardRange(out.length, this.ctx.worldSize, this.ctx.rank);
      const mine = out.subarray(part.start, part.end);
      new HalfArray(dtype, mine).assign(own);
      await collective.allGather(mine, group, out);
      return new HalfArray(dtype, out);
    }
    // rounded into memory kept between gathers (fresh pages of a new array cost more than the rounding
    // itself, see docs/gpus.md), two arrays in turn: the ring sends from this one without a copy, and a
    // gather's input must stay as it is until a later gather has returned
    const k = this.nextRound;
    this.nextRound = 1 - k;
    let scratch = this.roundScratch[k];
    if (!scratch || scratch.length < own.length) {
      scratch = new Uint16Array(this.largestPiece());
      this.roundScratch[k] = scratch;
    }
    const mine = scratch.subarray(0, own.length);
    new HalfArray(dtype, mine).assign(own);
    const full = await collective.allGather(mine, group, out ?? new Uint16Array(unit.end - unit.start), {
      inputUnchanged: true,
    });
    return new HalfArray(dtype, full as Uint16Array);
  }

  private checkUnitOut(u: number, out: Float32Array | Uint16Array | undefined): void {
    const unit = this.units[u]!;
    if (out !== undefined && out.length !== unit.end - unit.start)
      throw new RangeError(
        `unit ${unit.key}: out holds ${out.length} values, the unit ${unit.end - unit.start}`,
      );
  }

  /** All-gathers every unit into the full parameters, by name. */
  async gather(): Promise<Map<string, Float32Array>> {
    const full = new Float32Array(this.layout.total);
    for (const [u, unit] of this.units.entries()) full.set(await this.gatherUnit(u), unit.start);
    return this.layout.unflatten(full);
  }

  /** Writes this rank's shard (params + AdamW state + counters) under `dir`; returns the bytes written. */
  save(dir: string): number {
    writeShard(
      dir,
      {
        rank: this.ctx.rank,
        worldSize: this.ctx.worldSize,
        ranges: this.pieces.map((p) => [p.start, p.end]),
        total: this.layout.total,
        adamStep: this.optim.step,
        schedulerStep: this.schedulerStep,
        layout: this.layout.entries.map((e) => [e.name, e.size]),
        dtype: this.weightDtype,
      },
      this.params,
      this.optim.expAvg,
      this.optim.expAvgSq,
    );
    return statSync(`${dir}/rank_${this.ctx.rank}.bin`).size;
  }

  /**
   * Loads the shards written by `save` (by any number of ranks, cut into any units), takes this rank's
   * pieces, and returns the full parameters by name (for the model's variables).
   */
  load(dir: string): Map<string, Float32Array> {
    const full = readAllShards(dir);
    const entries = this.layout.entries;
    const same =
      full.layout.length === entries.length &&
      full.layout.every(([name, size], i) => entries[i]!.name === name && entries[i]!.size === size);
    if (!same) throw new CheckpointError(`${dir}: the checkpoint's parameters do not match the model`);
    if (full.dtype !== this.weightDtype)
      throw new CheckpointError(
        `${dir}: written by a run storing weights in ${full.dtype}, this one stores them in ${this.weightDtype}; set actor_rollout_ref.model.dtype=${full.dtype} to resume it`,
      );
    const mine = (flat: Float32Array) => {
      const out = new Float32Array(this.params.length);
      for (const p of this.pieces) out.set(flat.subarray(p.start, p.end), p.local);
      return out;
    };
    this.writes++;
    this.params.set(mine(full.params));
    this.optim.loadState({ step: full.adamStep, expAvg: mine(full.expAvg), expAvgSq: mine(full.expAvgSq) });
    this.schedulerStep = full.schedulerStep;
    return this.layout.unflatten(full.params);
  }
}

/** Elements [start, end) of the flat vector of `values` (laid out by `layout`) into `out`, as float32. */
function copyFlatRange(
  values: Map<string, StoredValues>,
  layout: FlatLayout,
  start: number,
  end: number,
  out: Float32Array,
): void {
  for (const e of layout.entries) {
    const from = Math.max(start, e.offset);
    const to = Math.min(end, e.offset + e.size);
    if (from < to)
      float32Range(values.get(e.name)!, from - e.offset, to - e.offset, out.subarray(from - start));
  }
}
