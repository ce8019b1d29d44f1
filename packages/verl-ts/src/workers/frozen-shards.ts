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
import { nativeBlas } from "../models/native-blas.js";
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
   * Every rank's published shard of half bits mapped into this process (the addon's mapFile), read where
   * /dev/shm holds it; null where it cannot be (no addon, float32 shards, nothing published).
   */
  private mapped: { buffer: ArrayBuffer; bits: Uint16Array }[] | null | undefined;
  /** Arrays for parameters cut between two ranks' pieces (unitParameters), reused unit after unit. */
  private readonly cutScratch: Uint16Array[] = [];

  /** Bytes of every rank's shard this rank reads in place (mapped), once the first pass mapped them. */
  get mappedBytes(): number {
    return this.mapped ? this.mapped.reduce((n, m) => n + m.buffer.byteLength, 0) : 0;
  }

  /** Maps the published shards on first use (see `mapped`); whether they are mapped. */
  private mapPublished(): boolean {
    if (this.mapped !== undefined) return this.mapped !== null;
    this.mapped = null;
    const blas = nativeBlas();
    const published = this.published;
    if (!blas || !published || this.dtype === "float32") return false;
    try {
      this.mapped = published.lengths.map((n, q) => {
        const buffer = blas.mapFile(published.descriptor(q), n * 2);
        return { buffer, bits: new Uint16Array(buffer) };
      });
    } catch (err) {
      console.warn(
        `rank ${this.ctx.rank}: the frozen shards are read, not mapped: ${(err as Error).message}`,
      );
    }
    return this.mapped !== null;
  }

  /**
   * Unit `u`'s parameters, by name, in the storage dtype. Where the shards are published and mapped, each
   * half-precision parameter is read where /dev/shm holds it, nothing copied, but for one cut between two
   * ranks' pieces (copied into an array kept for the next unit's: use the values before asking for the
   * next unit's). Elsewhere the unit is gathered (gatherUnit, with `take`) and cut. `release()` lets the
   * mapped pages leave the resident set once the values are no longer read. Every rank calls it at the
   * same point (the first call may publish).
   */
  async unitParameters(
    u: number,
    take?: GatherTake,
  ): Promise<{ values: Map<string, StoredValues>; release: () => void }> {
    const unit = this.units[u]!;
    const size = unit.end - unit.start;
    if (!((await this.publish()) && this.mapPublished())) {
      const whole = await this.gatherUnit(u, take);
      const values = new Map(
        unit.entries.map((e) => {
          const at = e.offset - unit.start;
          return [e.name, storedRange(whole, at, at + e.size)] as const;
        }),
      );
      return { values, release: () => {} };
    }
    const W = this.ctx.worldSize;
    this.starts ??= Array.from({ length: W }, (_, q) => this.pieceStarts(q));
    const mapped = this.mapped!;
    const bounds = Array.from({ length: W }, (_, q) => shardRange(size, W, q));
    // where element `at` of the unit lies: rank q's mapped shard, from this index
    const place = (at: number) => {
      const q = bounds.findIndex((b) => at < b.end);
      return { q, index: this.starts![q]![u]! + at - bounds[q]!.start };
    };
    const values = new Map<string, StoredValues>();
    const touched: { q: number; from: number; to: number }[] = [];
    let cuts = 0;
    for (const e of unit.entries) {
      const at = e.offset - unit.start;
      const first = place(at);
      const last = place(at + e.size - 1);
      let bits: Uint16Array;
      if (first.q === last.q) {
        bits = mapped[first.q]!.bits.subarray(first.index, first.index + e.size);
        touched.push({ q: first.q, from: first.index, to: first.index + e.size });
      } else {
        // cut between ranks: copied piece by piece into a kept array
        if ((this.cutScratch[cuts]?.length ?? 0) < e.size) this.cutScratch[cuts] = new Uint16Array(e.size);
        bits = this.cutScratch[cuts++]!.subarray(0, e.size);
        for (let q = first.q; q <= last.q; q++) {
          const from = Math.max(at, bounds[q]!.start);
          const to = Math.min(at + e.size, bounds[q]!.end);
          const src = this.starts[q]![u]! + from - bounds[q]!.start;
          bits.set(mapped[q]!.bits.subarray(src, src + to - from), from - at);
          touched.push({ q, from: src, to: src + to - from });
        }
      }
      values.set(e.name, new HalfArray(this.dtype as HalfDtype, bits));
    }
    const release = () => {
      const blas = nativeBlas();
      for (const { q, from, to } of touched)
        blas?.releaseMapped(mapped[q]!.buffer, from * 2, (to - from) * 2);
    };
    return { values, release };
  }

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
