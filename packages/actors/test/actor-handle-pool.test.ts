// ActorPool: scheduling logic with in-process stand-ins (deterministic), then with real actors.

import {
  ActorDiedError,
  type ActorHandle,
  ActorPool,
  ActorPoolEmptyError,
  ActorPoolNoResultError,
  ActorPoolTimeoutError,
  actor,
  init,
  kill,
  RemoteError,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { Squarer } from "./pools.fixture.js";

const SquarerActor = actor(Squarer, { module: new URL("./pools.fixture.ts", import.meta.url).href });

/** A stand-in actor whose calls finish when the test says so. */
class Manual {
  readonly calls: { x: number; resolve: (v: number) => void; reject: (e: unknown) => void }[] = [];
  running = 0;
  maxRunning = 0;
  constructor(readonly id: string) {}
  square(x: number): Promise<number> {
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    return new Promise<number>((resolve, reject) => this.calls.push({ x, resolve, reject })).finally(
      () => this.running--,
    );
  }
  finish(i = 0): void {
    const c = this.calls.splice(i, 1)[0]!;
    c.resolve(c.x * c.x);
  }
}

const tick = () => new Promise((r) => setImmediate(r));

test("submit runs one call per actor at a time and queues the rest; getNext is in submission order", async (t) => {
  const a = new Manual("a");
  const b = new Manual("b");
  const pool = new ActorPool([a, b]);
  for (const x of [1, 2, 3, 4, 5]) pool.submit((actor, v: number) => actor.square(v), x);
  t.is(a.calls.length + b.calls.length, 2, "two running, three queued");
  t.false(pool.hasFree());
  // Finish out of order: 2 first; getNext still returns 1 first.
  b.finish();
  await tick();
  t.is(b.calls[0]!.x, 3, "b took the next queued value as soon as it was free");
  const first = pool.getNext();
  a.finish();
  t.is(await first, 1);
  t.is(await pool.getNext(), 4);
  while (a.calls.length + b.calls.length > 0) {
    for (const m of [a, b]) while (m.calls.length) m.finish();
    await tick();
  }
  t.deepEqual([await pool.getNext(), await pool.getNext(), await pool.getNext()], [9, 16, 25]);
  t.false(pool.hasNext());
  t.is(a.maxRunning, 1);
  t.is(b.maxRunning, 1);
  await t.throwsAsync(pool.getNext(), { instanceOf: ActorPoolNoResultError });
});

test("getNextUnordered returns the first finished; getNext times out without losing the result", async (t) => {
  const a = new Manual("a");
  const b = new Manual("b");
  const pool = new ActorPool([a, b]);
  pool.submit((m, v: number) => m.square(v), 7);
  pool.submit((m, v: number) => m.square(v), 8);
  await t.throwsAsync(pool.getNext(20), { instanceOf: ActorPoolTimeoutError });
  await t.throwsAsync(pool.getNextUnordered(20), { instanceOf: ActorPoolTimeoutError });
  b.finish();
  t.is(await pool.getNextUnordered(), 64);
  a.finish();
  t.is(await pool.getNext(), 49);
  t.false(pool.hasNext());
});

test("map pulls input lazily: at most maxInFlight values are running or unread", async (t) => {
  const a = new Manual("a");
  const pool = new ActorPool([a]);
  let pulled = 0;
  let closed = false;
  function* naturals() {
    try {
      for (let i = 0; ; i++) {
        pulled++;
        yield i;
      }
    } finally {
      closed = true;
    }
  }
  const it = pool.map((m, v: number) => m.square(v), naturals(), { maxInFlight: 3 });
  const next = it.next();
  await tick();
  t.is(pulled, 3, "three values pulled, then it waits");
  a.finish();
  t.deepEqual(await next, { value: 0, done: false });
  t.is(pulled, 4);
  const got: number[] = [];
  for (;;) {
    const p = it.next();
    await tick();
    while (a.calls.length) a.finish();
    const r = await p;
    got.push(r.value as number);
    if (got.length === 5) break;
    t.true(pulled - 1 - got.length <= 3);
  }
  t.deepEqual(got, [1, 4, 9, 16, 25]);
  await it.return?.(undefined);
  t.true(closed, "breaking out closes the input iterator");
  while (a.calls.length) a.finish();
});

test("push adds actors, popIdle removes idle ones; work waits for a pushed actor", async (t) => {
  const a = new Manual("a");
  const pool = new ActorPool<Manual>([a]);
  t.true(pool.hasFree());
  t.is(pool.popIdle(), a);
  t.is(pool.size, 0);
  t.is(pool.popIdle(), null);
  pool.submit((m, v: number) => m.square(v), 3);
  const b = new Manual("b");
  pool.push(b);
  t.throws(() => pool.push(b), { message: /already in the pool/ });
  t.is(b.calls[0]!.x, 3, "the pushed actor took the queued value");
  b.finish();
  t.is(await pool.getNext(), 9);
  t.throws(() => new ActorPool([]), { instanceOf: RangeError });
});

test("when the last actor dies, queued and new work fails with ActorPoolEmptyError", async (t) => {
  const a = new Manual("a");
  const pool = new ActorPool([a]);
  pool.submit((m, v: number) => m.square(v), 1);
  pool.submit((m, v: number) => m.square(v), 2);
  const died = new Error("worker exited");
  died.name = "ActorDiedError";
  a.calls[0]!.reject(died);
  await t.throwsAsync(pool.getNext(), { is: died });
  await t.throwsAsync(pool.getNext(), { instanceOf: ActorPoolEmptyError });
  t.is(pool.size, 0);
  pool.submit((m, v: number) => m.square(v), 3);
  await t.throwsAsync(pool.getNext(), { instanceOf: ActorPoolEmptyError, message: /push\(\) an actor/ });
});

// ---- real actors ------------------------------------------------------------------------------

let actors: ActorHandle<Squarer>[] = [];

test.before(async () => {
  await init({ numCpus: 3 });
  actors = ["a", "b", "c"].map((id) => SquarerActor.remote(id));
  await Promise.all(actors.map((a) => a.ready()));
});

test.after.always(async () => {
  await shutdown();
});

test.serial("real actors: map keeps input order and spreads calls over all actors", async (t) => {
  const pool = new ActorPool<ActorHandle<Squarer>, { id: string; y: number }>(actors);
  const values = Array.from({ length: 30 }, (_, i) => i);
  const out: { id: string; y: number }[] = [];
  for await (const r of pool.map((s, v: number) => s.square(v, 5), values)) out.push(r);
  t.deepEqual(
    out.map((r) => r.y),
    values.map((v) => v * v),
  );
  t.deepEqual(new Set(out.map((r) => r.id)), new Set(["a", "b", "c"]));

  // mapUnordered: a slow first value does not hold back the others.
  const order: number[] = [];
  for await (const r of pool.mapUnordered(
    (s, v: number) => s.square(v, v === 1 ? 1500 : 0),
    [1, 2, 3, 4, 5],
  )) {
    order.push(r.y);
  }
  t.deepEqual(
    [...order].sort((x, y) => x - y),
    [1, 4, 9, 16, 25],
  );
  t.not(order[0], 1);

  // A remote exception reaches the reader; the pool keeps working.
  pool.submit((s, v: number) => s.square(v), -2);
  pool.submit((s, v: number) => s.square(v), 6);
  const err = await t.throwsAsync(pool.getNext(), { instanceOf: RemoteError });
  t.regex(err!.message, /negative input -2/);
  t.is((await pool.getNext()).y, 36);
  await t.throwsAsync(
    async () => {
      for await (const _ of pool.map((s, v: number) => s.square(v), [1, -1, 2])) {
        // consume
      }
    },
    { instanceOf: RemoteError },
  );
});

test.serial("real actors: a ThreadPool runs CPU work on threads inside an actor process", async (t) => {
  const c = actors[2]!;
  const res = await c.primesInThreads([10_000, 20_000, 30_000, 40_000]);
  t.deepEqual(res.counts, [1229, 2262, 3245, 4203]);
  t.is(res.pid, await c.pid());
  t.not(res.pid, process.pid);
  t.true(res.threads.every((id) => id > 0));
});

test.serial("real actors: a killed actor leaves the pool; the rest carry on", async (t) => {
  const [a, b] = actors as [ActorHandle<Squarer>, ActorHandle<Squarer>];
  const pool = new ActorPool<ActorHandle<Squarer>, { id: string; y: number }>([a, b]);
  pool.submit((s, v: number) => s.square(v, 3000), 1); // goes to a
  pool.submit((s, v: number) => s.square(v), 2); // goes to b
  kill(a);
  await t.throwsAsync(pool.getNext(), { instanceOf: ActorDiedError });
  t.is((await pool.getNext()).y, 4);
  t.is(pool.size, 1);
  for (const v of [3, 4, 5]) pool.submit((s, x: number) => s.square(x), v);
  const ids: string[] = [];
  while (pool.hasNext()) ids.push((await pool.getNext()).id);
  t.deepEqual(ids, ["b", "b", "b"]);
});
