/**
 * The objects this process owns (its put()s and the results of the calls it made), with reference
 * counts: `local` = live ObjectRef instances here, `out` = serialized copies held elsewhere.
 * An entry is freed when both reach zero.
 *
 * Recycled put buffers. `put` copies large typed arrays into buffers from `pool` (memory earlier
 * objects used, already paged in) and records them in `entry.pooled`. The safety rule:
 *
 *   A pooled buffer goes back to the pool only if the entry's value never left the store.
 *   Every path that lets the value out - `get`/await on the owner (getOne), an owned ref inlined
 *   into a call (tryInline), the object server encoding it for a FETCH (its frames are views that
 *   ZeroMQ may still read after the send resolves) - goes through `handOut`, which drops
 *   `pooled`; such buffers are then never recycled and the GC reclaims them once the last view
 *   is gone. So no view a user, a peer or a pending send holds can ever see a later object's data.
 *
 * A value that was never handed out is reachable only from `entry.value`, which is dropped when
 * the entry is freed (all refs gone, or `free()`), so releasing its buffers then is safe.
 * The pool also zeroes any slack past the object's end, so recycled memory shows no old bytes.
 */
import { BufferPool } from "./buffer-pool.js";

export const PENDING = 0;
export const READY = 1;
export const FAILED = 2;

export interface Entry {
  state: 0 | 1 | 2;
  value: any;
  waiters: Array<(e: Entry) => void> | null;
  local: number;
  out: number;
  /** Pooled buffers behind `value` (put only), or null once the value has been handed out. */
  pooled: ArrayBuffer[] | null;
}

export class ObjectStore {
  readonly entries = new Map<number, Entry>();
  freed = 0;
  readonly pool = new BufferPool();

  create(seq: number): Entry {
    const e: Entry = { state: PENDING, value: undefined, waiters: null, local: 0, out: 0, pooled: null };
    this.entries.set(seq, e);
    return e;
  }

  settle(seq: number, state: 1 | 2, value: any): void {
    const e = this.entries.get(seq);
    if (!e || e.state !== PENDING) return;
    e.state = state;
    e.value = value;
    const w = e.waiters;
    if (w) {
      e.waiters = null;
      for (const f of w) f(e);
    }
    this.maybeFree(seq, e);
  }

  /** The entry's value for use outside the store: its buffers are never recycled after this. */
  handOut(e: Entry): any {
    e.pooled = null;
    return e.value;
  }

  onSettled(e: Entry, f: (e: Entry) => void): void {
    if (e.state !== PENDING) f(e);
    else (e.waiters ??= []).push(f);
  }

  addLocal(seq: number): void {
    const e = this.entries.get(seq);
    if (e) e.local++;
  }

  dropLocal(seq: number): void {
    const e = this.entries.get(seq);
    if (!e) return;
    e.local--;
    this.maybeFree(seq, e);
  }

  addOut(seq: number, n: number): void {
    const e = this.entries.get(seq);
    if (!e) return;
    e.out += n;
    this.maybeFree(seq, e);
  }

  private maybeFree(seq: number, e: Entry): void {
    if (e.local <= 0 && e.out <= 0 && !e.waiters) {
      this.entries.delete(seq);
      this.freed++;
      this.recycle(e);
    }
  }

  /** Frees one object now, whatever its counts. */
  remove(seq: number): void {
    const e = this.entries.get(seq);
    if (!e) return;
    this.entries.delete(seq);
    this.freed++;
    this.recycle(e);
  }

  private recycle(e: Entry): void {
    const bufs = e.pooled;
    if (!bufs) return;
    e.pooled = null;
    e.value = undefined; // the store's own views must not outlive the buffers' return
    for (const b of bufs) this.pool.release(b);
  }

  /** Fails every object still pending with the error `why(seq)` makes (shutdown). */
  failPending(why: (seq: number) => Error): void {
    for (const [seq, e] of [...this.entries]) if (e.state === PENDING) this.settle(seq, FAILED, why(seq));
  }

  /** Drops everything (shutdown). */
  clear(): void {
    this.entries.clear();
    this.pool.clear();
  }
}
