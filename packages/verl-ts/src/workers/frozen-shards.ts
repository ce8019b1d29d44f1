/**
 * A frozen model sharded at rest, FSDP style: the reference policy. Rank r of W keeps its piece of every
 * unit (one per decoder layer, and the runs of parameters around the layers: the same cut as the actor's
 * ShardedParameters) in the storage dtype (model.dtype: 16-bit patterns for bfloat16 / float16), and a
 * pass all-gathers the units into the model when it begins, its owner evicting them when it ends, as
 * veRL's FSDP-wrapped reference does. Frozen: no master copy, no optimizer state, no gradient.
 *
 * Where the ranks' group uses shared memory (one host), the first gather publishes every rank's shard
 * into /dev/shm instead (collective.publish), once: from then on a gather reads each rank's piece from
 * there, with no collective call and nothing written, and the rank's own memory no longer holds its
 * shard (/dev/shm does, the same bytes).
 */
import { collective, type PublishedArrays, shardRange } from "@torl-ts/actors";
import {
  HalfArray,
  type HalfDtype,
  type StoredValues,
  storedRange,
  type WeightDtype,
} from "../models/half-precision.js";
import type { Qwen2Model } from "../models/qwen2.js";
import type { FlatLayout } from "./flat-params.js";
import type { GatherTake } from "./gather-buffers.js";
import type { RankContext } from "./rank-context.js";
import { type FlatUnit, type ShardPiece, shardedLayout } from "./sharded-parameters.js";

export class FrozenShards {
  readonly layout: FlatLayout;
  readonly units: FlatUnit[];
  readonly pieces: ShardPiece[];
  /**
   * This rank's pieces end to end, in the storage dtype (half dtypes: their bit patterns); undefined once
   * published (they are then in /dev/shm).
   */
  private shard: Float32Array | Uint16Array | undefined;
  /** The shard's bytes, wherever it is. */
  readonly bytes: number;
  /** Every rank's shard in /dev/shm, once published; null where publishing is not possible or failed. */
  private published: PublishedArrays<Float32Array | Uint16Array> | null | undefined;

  /**
   * `values`: every parameter, in the layout the model computes in and any dtype (the file's); only this
   * rank's pieces are kept, converted into `dtype` as the model's own store would hold them.
   */
  constructor(
    values: Map<string, StoredValues>,
    private readonly ctx: RankContext,
    readonly dtype: WeightDtype,
  ) {
    const { layout, units, pieces, length } = shardedLayout(values, ctx);
    this.layout = layout;
    this.units = units;
    this.pieces = pieces;
    const shard = dtype === "float32" ? new Float32Array(length) : new Uint16Array(length);
    for (const p of this.pieces)
      for (const e of this.layout.entries) {
        const from = Math.max(p.start, e.offset);
        const to = Math.min(p.end, e.offset + e.size);
        if (from < to)
          shard.set(
            fileRange(values.get(e.name)!, from - e.offset, to - e.offset, dtype),
            p.local + from - p.start,
          );
      }
    this.shard = shard;
    this.bytes = shard.byteLength;
  }

  /** Bytes of this rank's shard that live in /dev/shm (published), not in the process's own memory. */
  get publishedBytes(): number {
    return this.published ? this.bytes : 0;
  }

  /**
   * Publishes the shards on the first call where the group uses shared memory (every rank calls it at the
   * same point, as every gather); whether they are published. Where some rank could not write its shard
   * (no space in /dev/shm), every rank keeps gathering with allGather, and says so once.
   */
  private async publish(): Promise<boolean> {
    if (this.published !== undefined) return this.published !== null;
    const group = this.ctx.group;
    if (this.ctx.worldSize === 1 || !group || !collective.usesSharedMemory(group)) {
      this.published = null;
      return false;
    }
    try {
      this.published = await collective.publish(this.shard!, group);
    } catch (err) {
      this.published = null;
      console.warn(
        `rank ${this.ctx.rank}: the frozen shards stay in this process, gathered by allGather: ${(err as Error).message}`,
      );
      return false;
    }
    this.shard = undefined;
    return true;
  }

  /** Where rank q's piece of each unit starts in its shard (shardedLayout's `local`, for every rank). */
  private pieceStarts(q: number): number[] {
    let at = 0;
    return this.units.map((u) => {
      const { start, end } = shardRange(u.end - u.start, this.ctx.worldSize, q);
      const local = at;
      at += end - start;
      return local;
    });
  }

  /** pieceStarts of every rank, made on first use. */
  private starts: number[][] | undefined;

  /**
   * All-gathers every unit (or those `which` selects), one at a time, into `model`, whose evicted weights
   * are held again as the gathered values (already in its storage dtype: nothing is rounded). With `take`,
   * each unit of half bits is gathered into the array it returns (a Uint16Array of the unit's length)
   * instead of a new one; one rank copies its shard. Every rank calls it at the same point.
   */
  async gatherInto(model: Qwen2Model, take?: GatherTake, which?: (unit: FlatUnit) => boolean): Promise<void> {
    for (const [u, unit] of this.units.entries()) {
      if (which && !which(unit)) continue;
      const values = await this.gatherUnit(u, take);
      model.setStoredParameters(
        new Map(
          unit.entries.map((e) => {
            const at = e.offset - unit.start;
            return [e.name, storedRange(values, at, at + e.size)];
          }),
        ),
      );
    }
  }

  /**
   * Unit `u` all-gathered: its values in the storage dtype (half: as a HalfArray over the gathered bits),
   * the bits in the array `take` returns when given, float32 always in a new array (a float32 tensor made
   * from an array may keep reading it). Every rank calls it at the same point.
   */
  async gatherUnit(u: number, take?: GatherTake): Promise<StoredValues> {
    const unit = this.units[u]!;
    const size = unit.end - unit.start;
    const ctor = this.dtype === "float32" ? Float32Array : Uint16Array;
    const out = take && ctor === Uint16Array ? take(ctor, size) : new ctor(size);
    const half = (full: Float32Array | Uint16Array) =>
      full instanceof Uint16Array ? new HalfArray(this.dtype as HalfDtype, full) : full;
    if (await this.publish()) {
      const W = this.ctx.worldSize;
      this.starts ??= Array.from({ length: W }, (_, q) => this.pieceStarts(q));
      for (let q = 0; q < W; q++) {
        const { start, end } = shardRange(size, W, q);
        this.published!.read(q, this.starts[q]![u]!, out.subarray(start, end));
      }
      return half(out);
    }
    const piece = this.pieces[u]!;
    const mine = this.shard!.subarray(piece.local, piece.local + piece.end - piece.start);
    // the shard never changes: the ring sends it without a copy
    const full =
      this.ctx.worldSize === 1
        ? out
        : await collective.allGather(mine, this.ctx.group!, out, { inputUnchanged: true });
    if (this.ctx.worldSize === 1) full.set(mine);
    return half(full);
  }
}

/** Elements [from, to) of one parameter's values in `dtype` (half: bit patterns), as WeightStore holds them. */
function fileRange(
  v: StoredValues,
  from: number,
  to: number,
  dtype: WeightDtype,
): Float32Array | Uint16Array {
  if (v instanceof HalfArray && v.dtype === dtype) return v.bits.subarray(from, to);
  const f =
    v instanceof HalfArray
      ? new HalfArray(v.dtype, v.bits.subarray(from, to)).toFloat32()
      : v.subarray(from, to);
  return dtype === "float32" ? f : HalfArray.fromFloat32(f, dtype).bits;
}
