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
   * An array of `length` elements of `ctor` lent to `borrower` until `reclaim(borrower)`: one kept from
   * an earlier phase when one of that type and length is idle (its old values still in it: a gather
   * overwrites every element), else a new one.
   */
  take<C extends GatherCtor>(borrower: string, ctor: C, length: number): InstanceType<C> {
    const i = this.idle.findIndex((a) => a.constructor === ctor && a.length === length);
    const arr = (i >= 0 ? this.idle.splice(i, 1)[0]! : new ctor(length)) as InstanceType<C>;
    const mine = this.lent.get(borrower);
    if (mine) mine.push(arr);
    else this.lent.set(borrower, [arr]);
    return arr;
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
