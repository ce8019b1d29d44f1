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

/**
 * Published shards place each piece at a byte offset congruent to its place in its unit modulo this (see
 * FrozenShards.startsOf): a whole number of pages of 4, 16 or 64 KiB, so that units map page by page.
 */
const PLACE_ALIGN = 1 << 16;

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
   * The bfloat16 matrices held in the AMX tiles' layout (NativeBlas.packBf16Tiles), by name, with their
   * [k, n] shapes: see the constructor's `tiles`.
   */
  readonly tiles: ReadonlyMap<string, readonly [number, number]>;

  /**
   * `values`: every parameter, in the layout the model computes in and any dtype (the file's); only this
   * rank's pieces are kept, converted into `dtype` as the model's own store would hold them. `tiles`:
   * matrices ([k, n], k and n multiples of 32, dtype bfloat16, the addon loaded) to hold in the tiles'
   * layout instead, so that the products of a caller that takes them so (unitParameters' and gatherUnit's
   * `tiles`) pack nothing; every other caller gets them back row-major.
   */
  constructor(
    values: Map<string, StoredValues>,
    private readonly ctx: RankContext,
    readonly dtype: WeightDtype,
    tiles: ReadonlyMap<string, readonly [number, number]> = new Map(),
  ) {
    const blas = nativeBlas();
    for (const [name, [k, n]] of tiles) {
      const v = values.get(name);
      if (dtype !== "bfloat16" || !blas || !v || v.length !== k * n || k % 32 !== 0 || n % 32 !== 0)
        throw new RangeError(
          `${name}: the tile layout holds a bfloat16 [k, n] matrix (k and n multiples of 32) with the addon loaded; here dtype ${dtype}, shape [${k}, ${n}], ${v ? v.length : "no"} values, ${blas ? "addon loaded" : "no addon"}`,
        );
    }
    this.tiles = tiles;
    const { layout, units, pieces } = shardedLayout(values, ctx);
    this.layout = layout;
    this.units = units;
    this.pieces = pieces;
    // where the shards will be published, each piece sits where a page of the unit would (see placeOf)
    // (a group this process is not a member of, as `bench memory`'s accounting makes, gathers nothing)
    const group = ctx.group;
    this.placed =
      ctx.worldSize > 1 &&
      group !== undefined &&
      collective.isInitialized(group) &&
      collective.usesSharedMemory(group);
    const own = this.startsOf(ctx.rank);
    const last = pieces.length - 1;
    const length = last < 0 ? 0 : own[last]! + pieces[last]!.end - pieces[last]!.start;
    const shard = dtype === "float32" ? new Float32Array(length) : new Uint16Array(length);
    for (const [u, p] of this.pieces.entries())
      for (const e of this.layout.entries) {
        const from = Math.max(p.start, e.offset);
        const to = Math.min(p.end, e.offset + e.size);
        if (from >= to) continue;
        const at = own[u]! + from - p.start;
        const tile = tiles.get(e.name);
        if (tile)
          // this piece's run of the matrix's tile layout
          blas!.packBf16Tiles(
            fileRange(values.get(e.name)!, 0, e.size, dtype) as Uint16Array,
            tile[0],
            tile[1],
            from - e.offset,
            (shard as Uint16Array).subarray(at, at + to - from),
          );
        else shard.set(fileRange(values.get(e.name)!, from - e.offset, to - e.offset, dtype), at);
      }
    this.shard = shard;
    this.bytes = pieces.reduce((n, p) => n + (p.end - p.start), 0) * shard.BYTES_PER_ELEMENT;
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
    // laid out for publishing exactly where the group can publish (the constructor decided)
    if (!this.placed) {
      this.published = null;
      return false;
    }
    try {
      this.published = await collective.publish(this.shard!, this.ctx.group!);
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

  /** Whether the shard is laid out to be published and mapped (startsOf), not end to end. */
  private readonly placed: boolean;
  /** startsOf of every rank, made on first use. */
  private readonly starts: number[][] = [];

  /**
   * Where rank q's piece of each unit starts in its shard, in values. End to end (shardedLayout's
   * `local`), or, where the shards will be published, each piece at a byte offset congruent to its place
   * in the unit modulo PLACE_ALIGN: a unit can then be mapped from every rank's file into one array, page
   * by page (mapUnit), its pieces' whole pages read where /dev/shm holds them.
   */
  private startsOf(q: number): number[] {
    const known = this.starts[q];
    if (known) return known;
    const B = this.dtype === "float32" ? 4 : 2;
    let at = 0;
    const starts = this.units.map((u) => {
      const { start, end } = shardRange(u.end - u.start, this.ctx.worldSize, q);
      if (this.placed) at += ((((start * B - at * B) % PLACE_ALIGN) + PLACE_ALIGN) % PLACE_ALIGN) / B;
      const local = at;
      at += end - start;
      return local;
    });
    this.starts[q] = starts;
    return starts;
  }

  /**
   * Units mapped from the published files (mapUnit), by unit: one array over the unit whose pieces' whole
   * pages are the files' own (`mapped`, byte ranges: released after use, read from the files again) and
   * whose pages at the ranks' cuts hold copies made once (a few KiB a unit, kept).
   */
  private readonly unitMaps = new Map<
    number,
    { buffer: ArrayBuffer; bits: Uint16Array; mapped: { from: number; to: number }[] }
  >();
  /** Whether the published shards can be mapped here (canMap), once decided. */
  private mappable: boolean | undefined;

  /** Bytes of the units this rank reads in place (mapped) so far: every rank's pieces of them. */
  get mappedBytes(): number {
    let n = 0;
    for (const u of this.unitMaps.keys()) n += (this.units[u]!.end - this.units[u]!.start) * 2;
    return n;
  }

  /** Whether the published shards can be mapped here (decided once). */
  private canMap(): boolean {
    if (this.mappable === undefined) {
      const blas = nativeBlas();
      this.mappable =
        this.published != null &&
        this.placed &&
        this.dtype !== "float32" &&
        blas !== undefined &&
        PLACE_ALIGN % blas.pageSize() === 0;
    }
    return this.mappable;
  }

  /** Unit u mapped from every rank's published file (see unitMaps), made on first use. */
  private mapUnit(u: number) {
    const known = this.unitMaps.get(u);
    if (known) return known;
    const blas = nativeBlas()!;
    const page = blas.pageSize();
    const published = this.published!;
    const size = this.units[u]!.end - this.units[u]!.start;
    const buffer = blas.reserveMapping(Math.ceil((size * 2) / page) * page);
    const bits = new Uint16Array(buffer, 0, size);
    const mapped: { from: number; to: number }[] = [];
    const copy = (q: number, from: number, to: number, pieceStart: number) =>
      published.read(q, this.startsOf(q)[u]! + from - pieceStart, bits.subarray(from, to));
    for (let q = 0; q < this.ctx.worldSize; q++) {
      const { start, end } = shardRange(size, this.ctx.worldSize, q);
      if (start === end) continue;
      // the piece's whole pages, mapped; the bytes before and after them, in pages shared with the
      // neighbouring pieces, copied (the other ranks' parts of those pages come from theirs)
      const first = Math.ceil((start * 2) / page) * page;
      const past = Math.floor((end * 2) / page) * page;
      if (past > first) {
        const fileAt = this.startsOf(q)[u]! * 2 + first - start * 2;
        blas.mapFileInto(buffer, first, published.descriptor(q), fileAt, past - first);
        mapped.push({ from: first, to: past });
        if (first > start * 2) copy(q, start, first / 2, start);
        if (end * 2 > past) copy(q, past / 2, end, start);
      } else copy(q, start, end, start);
    }
    const m = { buffer, bits, mapped };
    this.unitMaps.set(u, m);
    return m;
  }

  /**
   * Unit `u`'s parameters, by name, in the storage dtype. Where the shards are published and mapped (half
   * bits, the addon loaded), they are views of one array over the unit whose pages are read where /dev/shm
   * holds them: nothing is copied but the pages at the ranks' cuts, once. Elsewhere the unit is gathered
   * (gatherUnit, with `take`) and cut. `release()` lets the mapped pages leave the resident set; the
   * values stay what they are (read again, from the files). Every rank calls it at the same point (the
   * first call may publish).
   */
  async unitParameters(
    u: number,
    take?: GatherTake,
    { tiles = false }: { tiles?: boolean } = {},
  ): Promise<{ values: Map<string, StoredValues>; release: () => void; tiled: ReadonlySet<string> }> {
    const unit = this.units[u]!;
    const tiled = new Set(tiles ? unit.entries.filter((e) => this.tiles.has(e.name)).map((e) => e.name) : []);
    if (!((await this.publish()) && this.canMap())) {
      const whole = await this.gatherUnit(u, take, { tiles });
      const values = new Map(
        unit.entries.map((e) => {
          const at = e.offset - unit.start;
          return [e.name, storedRange(whole, at, at + e.size)] as const;
        }),
      );
      return { values, release: () => {}, tiled };
    }
    const m = this.mapUnit(u);
    const values = new Map<string, StoredValues>(
      unit.entries.map((e) => {
        const at = e.offset - unit.start;
        const bits = m.bits.subarray(at, at + e.size);
        const tile = tiles ? undefined : this.tiles.get(e.name);
        // a caller that does not take the tile layout gets the matrix row-major, in an array of its own
        return [e.name, new HalfArray(this.dtype as HalfDtype, tile ? untiled(bits, tile) : bits)];
      }),
    );
    // the files' pages leave the resident set; read again, they are the same bytes
    const release = () => {
      releaseMappedWithin(m, 0, m.buffer.byteLength);
    };
    return { values, release, tiled };
  }

  /**
   * Lets the mapped pages that hold only values [from, to) of parameter `name` leave the resident set (as
   * unitParameters' release does for a whole unit): the whole pages of the files inside that range; the
   * pages at the ranks' cuts, copies, stay. The values stay what they are (read again, from the files).
   * Nothing where the parameter's unit is not mapped (gathered, or not read yet).
   */
  releaseValues(name: string, from: number, to: number): void {
    const u = this.units.findIndex((unit) => unit.entries.some((e) => e.name === name));
    if (u < 0) throw new RangeError(`the shards hold no parameter ${name}`);
    const unit = this.units[u]!;
    const entry = unit.entries.find((e) => e.name === name)!;
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to > entry.size || from > to)
      throw new RangeError(`${name}: values [${from}, ${to}) are not within its ${entry.size} values`);
    const m = this.unitMaps.get(u);
    const page = nativeBlas()?.pageSize();
    if (!m || !page) return;
    const at = (entry.offset - unit.start) * 2;
    this.releasedValueBytes += releaseMappedWithin(
      m,
      Math.ceil((at + from * 2) / page) * page,
      Math.floor((at + to * 2) / page) * page,
    );
  }

  /** Bytes of mapped pages releaseValues let go so far (every call's, pages counted each time). */
  releasedValueBytes = 0;

  /**
   * Units (those `which` selects) held by `model` as unitParameters gives them: read in place where the
   * shards are mapped, else gathered (with `take`). Returns what lets their mapped pages go, to call once
   * the pass is done with them.
   */
  async holdInto(
    model: Qwen2Model,
    take?: GatherTake,
    which?: (unit: FlatUnit) => boolean,
  ): Promise<() => void> {
    const releases: (() => void)[] = [];
    for (const [u, unit] of this.units.entries()) {
      if (which && !which(unit)) continue;
      const { values, release } = await this.unitParameters(u, take);
      model.setStoredParameters(values);
      releases.push(release);
    }
    return () => {
      for (const release of releases) release();
    };
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
  async gatherUnit(
    u: number,
    take?: GatherTake,
    { tiles = false }: { tiles?: boolean } = {},
  ): Promise<StoredValues> {
    const unit = this.units[u]!;
    const size = unit.end - unit.start;
    const ctor = this.dtype === "float32" ? Float32Array : Uint16Array;
    const out = take && ctor === Uint16Array ? take(ctor, size) : new ctor(size);
    const half = (full: Float32Array | Uint16Array) => {
      if (!(full instanceof Uint16Array)) return full;
      // the matrices in the tile layout back row-major, where the caller does not take them so
      if (!tiles)
        for (const e of unit.entries) {
          const tile = this.tiles.get(e.name);
          const at = e.offset - unit.start;
          if (tile) full.set(untiled(full.subarray(at, at + e.size), tile), at);
        }
      return new HalfArray(this.dtype as HalfDtype, full);
    };
    if (await this.publish()) {
      const W = this.ctx.worldSize;
      for (let q = 0; q < W; q++) {
        const { start, end } = shardRange(size, W, q);
        this.published!.read(q, this.startsOf(q)[u]!, out.subarray(start, end));
      }
      return half(out);
    }
    const piece = this.pieces[u]!;
    const own = this.startsOf(this.ctx.rank)[u]!;
    const mine = this.shard!.subarray(own, own + piece.end - piece.start);
    // the shard never changes: the ring sends it without a copy
    const full =
      this.ctx.worldSize === 1
        ? out
        : await collective.allGather(mine, this.ctx.group!, out, { inputUnchanged: true });
    if (this.ctx.worldSize === 1) full.set(mine);
    return half(full);
  }
}

/** A [k, n] matrix's bits row-major, in a new array, from its tile layout. */
function untiled(bits: Uint16Array, [k, n]: readonly [number, number]): Uint16Array {
  const rows = new Uint16Array(k * n);
  nativeBlas()!.unpackBf16Tiles(bits, k, n, rows);
  return rows;
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

/**
 * The mapped pieces of a unit's array (FrozenShards' unitMaps) between byte offsets `lo` and `hi` (whole
 * pages) leave the resident set: only the files' pages, never the copies at the ranks' cuts. Returns the
 * bytes let go.
 */
function releaseMappedWithin(
  m: { buffer: ArrayBuffer; mapped: { from: number; to: number }[] },
  lo: number,
  hi: number,
): number {
  const blas = nativeBlas();
  if (!blas) return 0;
  let released = 0;
  for (const r of m.mapped) {
    const a = Math.max(lo, r.from);
    const b = Math.min(hi, r.to);
    if (b > a) {
      blas.releaseMapped(m.buffer, a, b - a);
      released += b - a;
    }
  }
  return released;
}
