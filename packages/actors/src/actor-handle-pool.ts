/**
 * ActorPool: spreads calls over a fixed set of actors, like Ray's `ray.util.ActorPool`.
 *
 *   const pool = new ActorPool([a, b]);
 *   for await (const y of pool.map((actor, x) => actor.double(x), [1, 2, 3, 4])) console.log(y);
 *   pool.submit((actor, x) => actor.double(x), 5);
 *   while (pool.hasNext()) console.log(await pool.getNext());
 *
 * Each actor runs one call from the pool at a time; an actor is handed the next queued value as
 * soon as its call completes (results wait in the pool until read). `map` and `mapUnordered` pull
 * values lazily and stop pulling while `maxInFlight` results are running or unread, so a slow
 * reader or an endless input does not pile up work. An actor whose call fails with
 * ActorDiedError leaves the pool (push it back once it is usable again); once the last actor has
 * died, queued and new work fails with ActorPoolEmptyError instead of waiting forever. A pool
 * emptied with popIdle() just queues work until an actor is pushed.
 */

/** Calls an actor method for one value; returns an ObjectRef or any promise. */
export type PoolCall<A, V, R> = (actor: A, value: V) => PromiseLike<R>;

/** `getNext` / `getNextUnordered` waited longer than their timeout. */
export class ActorPoolTimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no pool result became ready within ${timeoutMs} ms`);
    this.name = "ActorPoolTimeoutError";
  }
}

/** Work is queued but every actor of the pool has died (or was popped). */
export class ActorPoolEmptyError extends Error {
  constructor(readonly pending: number) {
    super(`the actor pool has no actors left and ${pending} submitted value(s) cannot run; push() an actor`);
    this.name = "ActorPoolEmptyError";
  }
}

/** getNext/getNextUnordered with nothing submitted. */
export class ActorPoolNoResultError extends Error {
  constructor() {
    super("no submitted values left in the pool (check hasNext() first)");
    this.name = "ActorPoolNoResultError";
  }
}

type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

interface Entry<A, R> {
  index: number;
  call: PoolCall<A, any, R>;
  value: unknown;
  /** Owned by a map()/mapUnordered() iterator: hidden from getNext*. */
  owner: object | null;
  outcome: Outcome<R> | undefined;
  settled: Promise<Outcome<R>>;
  resolve: (o: Outcome<R>) => void;
}

function isActorDied(err: unknown): boolean {
  return err instanceof Error && err.name === "ActorDiedError";
}

export interface ActorPoolMapOptions {
  /** Most values of this map that may be running or finished-but-unread. Default 2 x pool size. */
  maxInFlight?: number;
}

export class ActorPool<A, R = unknown> {
  private readonly idle: A[] = [];
  private readonly busy = new Map<A, Entry<A, R>>();
  private readonly queued: Entry<A, R>[] = [];
  private nextIndex = 0;
  /** Public (submit) entries not yet read, in submission order. */
  private readonly publicOrder: Entry<A, R>[] = [];
  /** Public entries finished but not yet read, in completion order. */
  private readonly publicDone: Entry<A, R>[] = [];
  private readonly consumed = new WeakSet<Entry<A, R>>();
  private doneWaiters: (() => void)[] = [];
  /** The last actor died (not popped): queued work could never run, so submits fail at once. */
  private emptiedByDeath = false;

  constructor(actors: Iterable<A>) {
    for (const a of actors) this.idle.push(a);
    if (this.idle.length === 0) throw new RangeError("ActorPool needs at least one actor");
  }

  /** Actors in the pool, idle or busy. */
  get size(): number {
    return this.idle.length + this.busy.size;
  }

  /** Whether an actor is idle (a submit would start at once). */
  hasFree(): boolean {
    return this.idle.length > 0 && this.queued.length === 0;
  }

  /** Adds an actor (new, or back after a restart); it starts on queued values at once. */
  push(actor: A): void {
    if (this.busy.has(actor) || this.idle.includes(actor))
      throw new Error("this actor is already in the pool");
    this.emptiedByDeath = false;
    this.release(actor);
  }

  /** Removes and returns an idle actor, or null when all are busy. */
  popIdle(): A | null {
    return this.idle.pop() ?? null;
  }

  /** Schedules `call(actor, value)` on the next free actor; read results with getNext*. */
  submit<V>(call: PoolCall<A, V, R>, value: V): void {
    const e = this.enqueue(call, value, null);
    this.publicOrder.push(e);
  }

  /** Whether submitted values remain unread by getNext / getNextUnordered. */
  hasNext(): boolean {
    return this.publicOrder.some((e) => !this.consumed.has(e));
  }

  /** Result of the oldest unread submit (in submission order); rethrows its error. */
  async getNext(timeoutMs?: number): Promise<R> {
    const e = this.publicOrder.find((x) => !this.consumed.has(x));
    if (!e) throw new ActorPoolNoResultError();
    const outcome = await this.within(e.settled, timeoutMs);
    this.consume(e);
    if (!outcome.ok) throw outcome.error;
    return outcome.value;
  }

  /** Result of whichever submit finished first among the unread ones. */
  async getNextUnordered(timeoutMs?: number): Promise<R> {
    if (!this.hasNext()) throw new ActorPoolNoResultError();
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const e = this.publicDone.find((x) => !this.consumed.has(x));
      if (e) {
        this.consume(e);
        if (!e.outcome!.ok) throw e.outcome!.error;
        return e.outcome!.value;
      }
      const wake = new Promise<void>((resolve) => this.doneWaiters.push(resolve));
      await this.within(
        wake,
        deadline === undefined ? undefined : Math.max(0, deadline - Date.now()),
        timeoutMs,
      );
    }
  }

  /** Results of `call(actor, v)` for every value, in input order; values are pulled lazily. */
  map<V, T extends R = R>(
    call: PoolCall<A, V, T>,
    values: Iterable<V> | AsyncIterable<V>,
    options: ActorPoolMapOptions = {},
  ): AsyncIterableIterator<T> {
    return this.mapImpl(call, values, options, true) as AsyncIterableIterator<T>;
  }

  /** Like map, but yields each result as soon as it is ready. */
  mapUnordered<V, T extends R = R>(
    call: PoolCall<A, V, T>,
    values: Iterable<V> | AsyncIterable<V>,
    options: ActorPoolMapOptions = {},
  ): AsyncIterableIterator<T> {
    return this.mapImpl(call, values, options, false) as AsyncIterableIterator<T>;
  }

  // ---- internals ------------------------------------------------------------------------------

  private async *mapImpl<V>(
    call: PoolCall<A, V, R>,
    values: Iterable<V> | AsyncIterable<V>,
    options: ActorPoolMapOptions,
    ordered: boolean,
  ): AsyncGenerator<R> {
    const limit = options.maxInFlight ?? 2 * Math.max(1, this.size);
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`maxInFlight must be >= 1, got ${limit}`);
    const owner = {};
    const it =
      Symbol.asyncIterator in values
        ? (values as AsyncIterable<V>)[Symbol.asyncIterator]()
        : (values as Iterable<V>)[Symbol.iterator]();
    const mine: Entry<A, R>[] = [];
    let exhausted = false;
    const fill = async () => {
      while (!exhausted && mine.length < limit) {
        const r = await it.next();
        if (r.done) exhausted = true;
        else mine.push(this.enqueue(call, r.value, owner));
      }
    };
    try {
      await fill();
      while (mine.length > 0) {
        let e: Entry<A, R>;
        if (ordered) {
          e = mine.shift()!;
          await e.settled;
        } else {
          e = await Promise.race(mine.map((x) => x.settled.then(() => x)));
          mine.splice(mine.indexOf(e), 1);
        }
        this.consumed.add(e);
        const o = e.outcome!;
        if (!o.ok) throw o.error;
        await fill();
        yield o.value;
      }
    } finally {
      // Stopped early (break / error): drop what has not started; running calls finish unread.
      for (const e of mine) {
        this.consumed.add(e);
        const q = this.queued.indexOf(e);
        if (q >= 0) this.queued.splice(q, 1);
      }
      if (!exhausted && typeof (it as Iterator<V>).return === "function") await (it as Iterator<V>).return!();
    }
  }

  private enqueue<V>(call: PoolCall<A, V, R>, value: V, owner: object | null): Entry<A, R> {
    let resolve!: (o: Outcome<R>) => void;
    const settled = new Promise<Outcome<R>>((r) => (resolve = r));
    const e: Entry<A, R> = {
      index: this.nextIndex++,
      call,
      value,
      owner,
      outcome: undefined,
      settled,
      resolve,
    };
    const actor = this.idle.shift();
    if (actor !== undefined) this.start(actor, e);
    else if (this.busy.size === 0 && this.emptiedByDeath)
      this.finish(e, { ok: false, error: new ActorPoolEmptyError(1) });
    else this.queued.push(e);
    return e;
  }

  private start(actor: A, e: Entry<A, R>): void {
    this.busy.set(actor, e);
    let p: PromiseLike<R>;
    try {
      p = e.call(actor, e.value);
    } catch (err) {
      p = Promise.reject(err);
    }
    Promise.resolve(p).then(
      (value) => this.settle(actor, e, { ok: true, value }),
      (error) => this.settle(actor, e, { ok: false, error }),
    );
  }

  private settle(actor: A, e: Entry<A, R>, outcome: Outcome<R>): void {
    this.busy.delete(actor);
    this.finish(e, outcome);
    if (!outcome.ok && isActorDied(outcome.error)) {
      // The actor is gone; if it was the last one, nothing queued can ever run.
      if (this.size === 0) this.emptiedByDeath = true;
      if (this.size === 0 && this.queued.length > 0) {
        const left = this.queued.splice(0);
        for (const q of left) this.finish(q, { ok: false, error: new ActorPoolEmptyError(left.length) });
      }
      return;
    }
    this.release(actor);
  }

  private release(actor: A): void {
    const next = this.queued.shift();
    if (next) this.start(actor, next);
    else this.idle.push(actor);
  }

  private finish(e: Entry<A, R>, outcome: Outcome<R>): void {
    e.outcome = outcome;
    e.resolve(outcome);
    if (e.owner === null) {
      this.publicDone.push(e);
      const waiters = this.doneWaiters;
      this.doneWaiters = [];
      for (const w of waiters) w();
    }
  }

  private consume(e: Entry<A, R>): void {
    this.consumed.add(e);
    const i = this.publicOrder.indexOf(e);
    if (i >= 0) this.publicOrder.splice(i, 1);
    const j = this.publicDone.indexOf(e);
    if (j >= 0) this.publicDone.splice(j, 1);
  }

  private within<T>(p: Promise<T>, ms: number | undefined, reportMs: number | undefined = ms): Promise<T> {
    if (ms === undefined) return p;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ActorPoolTimeoutError(reportMs ?? ms)), ms);
    });
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  }
}
