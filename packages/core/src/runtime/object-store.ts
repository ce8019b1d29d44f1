/**
 * The objects this process owns (its put()s and the results of the calls it made), with reference
 * counts: `local` = live ObjectRef instances here, `out` = serialized copies held elsewhere.
 * An entry is freed when both reach zero.
 */
export const PENDING = 0;
export const READY = 1;
export const FAILED = 2;

export interface Entry {
  state: 0 | 1 | 2;
  value: any;
  waiters: Array<(e: Entry) => void> | null;
  local: number;
  out: number;
}

export class ObjectStore {
  readonly entries = new Map<number, Entry>();
  freed = 0;

  create(seq: number): Entry {
    const e: Entry = { state: PENDING, value: undefined, waiters: null, local: 0, out: 0 };
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
    }
  }

  /** Frees one object now, whatever its counts. */
  remove(seq: number): void {
    if (this.entries.delete(seq)) this.freed++;
  }

  /** Drops everything (shutdown). */
  clear(): void {
    this.entries.clear();
  }
}
