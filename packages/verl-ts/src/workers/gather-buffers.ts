/**
 * Where a worker that keeps its models sharded at rest all-gathers whole units, kept from one phase to
 * the next. A new array per gather is allocated before the garbage collector has freed the previous
 * phase's arrays, so it lands on pages the process has not written lately, and on a virtual machine
 * whose host takes freed memory back the first write of such a page is by far the slowest memory access
 * (docs/gpus.md measures 0.2-1 GB/s against 11-13 GB/s for pages written before): the generation phase
 * of the 0.5B probe wrote its 272 MB embedding unit to fresh pages every step. Arrays lent here go back
 * when their borrower says it no longer reads them (after evicting the model that held them), so the
 * actor's and the reference's passes write the same pages, phase after phase.
 */

type GatherArray = Float32Array | Uint16Array;
type GatherCtor = Float32ArrayConstructor | Uint16ArrayConstructor;

/** Where a gather of `length` values of `ctor` goes (GatherBuffers.take for one borrower, or a new array). */
export type GatherTake = <C extends GatherCtor>(ctor: C, length: number) => InstanceType<C>;

export class GatherBuffers {
  private readonly idle: GatherArray[] = [];
  private readonly lent = new Map<string, GatherArray[]>();
  /**
   * What a whole gather left in an array (markHolding), until the array is lent for another: a phase
   * that would gather the same values again (the old log-prob pass after generation, with no optimizer
   * step between) takes them back instead (takeHolding).
   */
  private readonly contents = new Map<GatherArray, string>();
  /** Bytes taken back by takeHolding so far: gathers not made. */
  reusedBytes = 0;

  /**
   * An array of `length` elements of `ctor` lent to `borrower` until `reclaim(borrower)`: one kept from
   * an earlier phase when one of that type and length is idle (its old values still in it: a gather
   * overwrites every element), else a new one.
   */
  take<C extends GatherCtor>(borrower: string, ctor: C, length: number): InstanceType<C> {
    // an idle array that names no content first: one that does may be asked for by takeHolding
    const fits = (a: GatherArray) => a.constructor === ctor && a.length === length;
    let i = this.idle.findIndex((a) => fits(a) && !this.contents.has(a));
    if (i < 0) i = this.idle.findIndex(fits);
    const arr = (i >= 0 ? this.idle.splice(i, 1)[0]! : new ctor(length)) as InstanceType<C>;
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
