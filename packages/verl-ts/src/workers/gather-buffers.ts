/**
 * Where a worker that keeps its models sharded at rest all-gathers whole units, kept from one phase to
 * the next. A new array per gather is allocated before the garbage collector has freed the previous
 * phase's arrays, so it lands on pages the process has not written lately, and on a virtual machine
 * whose host takes freed memory back the first write of such a page is by far the slowest memory access
 * (docs/gpus.md measures 0.2-1 GB/s against 11-13 GB/s for pages written before): the generation phase
 * of the 0.5B probe wrote its 272 MB embedding unit to fresh pages every step. Arrays lent here go back
 * when their borrower says it no longer reads them (after evicting the model that held them), so the
 * actor's and the reference's passes write the same pages, phase after phase.
 *
 * Arrays may also be carved out of memory another owner lends while it does not use it (the update's
 * gradient shard, idle outside the update: lendRegion). The owner takes it back whole (reclaimRegion):
 * the arrays carved from it are gone then, their pages the owner's again. So the decoder layers that
 * generation gathers and the update's gradient share one set of pages instead of two.
 */
import { WorkerStateError } from "./errors.js";

type GatherArray = Float32Array | Uint16Array;
type GatherCtor = Float32ArrayConstructor | Uint16ArrayConstructor;

/** Where a gather of `length` values of `ctor` goes (GatherBuffers.take for one borrower, or a new array). */
export type GatherTake = <C extends GatherCtor>(ctor: C, length: number) => InstanceType<C>;

/** Where carved arrays start: a multiple of this many bytes (a cache line). */
const CARVE_ALIGN = 64;

export class GatherBuffers {
  private idle: GatherArray[] = [];
  private readonly lent = new Map<string, GatherArray[]>();
  /**
   * What a whole gather left in an array (markHolding), until the array is lent for another: a phase
   * that would gather the same values again (the old log-prob pass after generation, with no optimizer
   * step between) takes them back instead (takeHolding).
   */
  private readonly contents = new Map<GatherArray, string>();
  /** Bytes taken back by takeHolding so far: gathers not made. */
  reusedBytes = 0;
  /** Memory lent by its owner (lendRegion) and how much of it is carved into arrays. */
  private region: { buffer: ArrayBuffer; used: number } | null = null;
  /** The arrays carved out of the region. */
  private readonly carved = new Set<GatherArray>();

  /**
   * An array of `length` elements of `ctor` lent to `borrower` until `reclaim(borrower)`: one kept from
   * an earlier phase when one of that type and length is idle (its old values still in it: a gather
   * overwrites every element), else a new one.
   */
  take<C extends GatherCtor>(
    borrower: string,
    ctor: C,
    length: number,
    options: { carve?: boolean } = {},
  ): InstanceType<C> {
    // an idle array that names no content first: one that does may be asked for by takeHolding; an array
    // carved from the lent region only where the caller may have one (it gives it back before the
    // region's owner takes it back)
    const carve = options.carve === true;
    const pick = (fits: (a: GatherArray) => boolean) => {
      let i = this.idle.findIndex((a) => fits(a) && !this.contents.has(a));
      if (i < 0) i = this.idle.findIndex(fits);
      return i >= 0 ? this.idle.splice(i, 1)[0]! : undefined;
    };
    const sized = (a: GatherArray) => a.constructor === ctor && a.length === length;
    // a borrower that may carve takes the region's arrays first, idle or new, so a phase's gathers lie in
    // it in their order (GatherBuffers' owner may read a unit where its own use of the memory puts it)
    const arr = (
      carve
        ? (pick((a) => sized(a) && this.carved.has(a)) ??
          this.carve(ctor, length) ??
          pick((a) => sized(a) && !this.carved.has(a)) ??
          new ctor(length))
        : (pick((a) => sized(a) && !this.carved.has(a)) ?? new ctor(length))
    ) as InstanceType<C>;
    // its borrower will write it: whatever it held is gone
    this.contents.delete(arr);
    this.lend(borrower, arr);
    return arr;
  }

  /** Whether an idle array holds `content` (markHolding), for takeHolding. */
  holds(content: string): boolean {
    for (const a of this.idle) if (this.contents.get(a) === content) return true;
    return false;
  }

  /**
   * The idle array that holds `content`, lent to `borrower` with its values as they are (it keeps naming
   * them: the borrower only reads it); undefined when none does.
   */
  takeHolding(borrower: string, content: string): GatherArray | undefined {
    const i = this.idle.findIndex((a) => this.contents.get(a) === content);
    if (i < 0) return undefined;
    const arr = this.idle.splice(i, 1)[0]!;
    this.lend(borrower, arr);
    this.reusedBytes += arr.byteLength;
    return arr;
  }

  /** `array`, lent and just written whole by a gather, holds `content` (the gather's source and version). */
  markHolding(array: GatherArray, content: string): void {
    if (![...this.lent.values()].some((mine) => mine.includes(array)))
      throw new RangeError("markHolding: the array is not lent from these buffers");
    for (const [a, c] of this.contents) if (c === content) this.contents.delete(a);
    this.contents.set(array, content);
  }

  private lend(borrower: string, arr: GatherArray): void {
    const mine = this.lent.get(borrower);
    if (mine) mine.push(arr);
    else this.lent.set(borrower, [arr]);
  }

  /**
   * Everything lent to `borrower` is idle again. The borrower must hold no view of those arrays any more
   * (its model evicted): the next phase's gathers overwrite them.
   */
  reclaim(borrower: string): void {
    const mine = this.lent.get(borrower);
    if (!mine) return;
    this.idle.push(...mine);
    this.lent.delete(borrower);
  }

  /**
   * Lends `buffer` for arrays taken with `carve` until reclaimRegion: its owner does not use it meanwhile.
   * Throws while another region is lent.
   */
  lendRegion(buffer: ArrayBuffer): void {
    if (this.region) throw new WorkerStateError("a region is lent already: reclaim it first");
    this.region = { buffer, used: 0 };
  }

  /**
   * Its owner takes the lent region back: the arrays carved from it, idle, are dropped with what they held.
   * Throws when one is still lent (its borrower would read memory the owner now writes). No-op when
   * nothing is lent.
   */
  reclaimRegion(): void {
    if (!this.region) return;
    for (const [borrower, mine] of this.lent)
      if (mine.some((a) => this.carved.has(a)))
        throw new WorkerStateError(
          `the lent region is still read by ${borrower}: its owner cannot take it back before it is reclaimed`,
        );
    this.idle = this.idle.filter((a) => !this.carved.has(a));
    for (const a of this.carved) this.contents.delete(a);
    this.carved.clear();
    this.region = null;
  }

  /** Whether a region is lent now (lendRegion, not yet reclaimRegion). */
  get regionLent(): boolean {
    return this.region !== null;
  }

  /**
   * Whether an idle array carved out of the lent region holds `content` (markHolding) and lies exactly
   * where `view` does: the region's owner may then read those values in place after taking it back.
   */
  holdsAt(content: string, view: GatherArray): boolean {
    return this.idle.some(
      (a) =>
        this.carved.has(a) &&
        this.contents.get(a) === content &&
        a.buffer === view.buffer &&
        a.byteOffset === view.byteOffset &&
        a.byteLength === view.byteLength,
    );
  }

  /** Bytes of the arrays carved out of the lent region (within bytes; the region's owner holds them). */
  get carvedBytes(): number {
    let n = 0;
    for (const a of this.carved) n += a.byteLength;
    return n;
  }

  /** A new array of `length` elements in the lent region's free part; undefined where it does not fit. */
  private carve<C extends GatherCtor>(ctor: C, length: number): InstanceType<C> | undefined {
    const region = this.region;
    if (!region) return undefined;
    const at = Math.ceil(region.used / CARVE_ALIGN) * CARVE_ALIGN;
    const bytes = length * ctor.BYTES_PER_ELEMENT;
    if (at + bytes > region.buffer.byteLength) return undefined;
    region.used = at + bytes;
    const arr = new ctor(region.buffer, at, length) as InstanceType<C>;
    this.carved.add(arr);
    return arr;
  }

  /** Bytes held, idle and lent. */
  get bytes(): number {
    let n = 0;
    for (const a of this.idle) n += a.byteLength;
    for (const mine of this.lent.values()) for (const a of mine) n += a.byteLength;
    return n;
  }

  /** Bytes held idle: memory of no model, kept for the next phase's gathers. */
  get idleBytes(): number {
    return this.idle.reduce((n, a) => n + a.byteLength, 0);
  }
}
