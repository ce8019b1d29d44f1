// ThreadPool: real worker threads running a TypeScript task module.
import test from "ava";
import {
  ThreadPool,
  ThreadPoolClosedError,
  ThreadPoolQueueFullError,
  ThreadPoolTaskError,
} from "../src/pools.js";

const TASKS = new URL("./pools.fixture.ts", import.meta.url);

function primesBelow(n: number): number {
  const sieve = new Uint8Array(n);
  let count = 0;
  for (let i = 2; i < n; i++) {
    if (sieve[i]) continue;
    count++;
    for (let j = i * i; j < n; j += i) sieve[j] = 1;
  }
  return count;
}

// The same tests under each pool library ThreadPool can use.
for (const library of ["tinypool", "piscina"] as const) {
  test(`${library}: runs a CPU task on several threads and returns correct results`, async (t) => {
    const pool = new ThreadPool<number, { count: number; threadId: number }>({
      filename: TASKS,
      size: 2,
      library,
    });
    try {
      const ns = [20_000, 30_000, 40_000, 50_000, 60_000, 70_000];
      const res = await Promise.all(ns.map((n) => pool.run(n)));
      t.deepEqual(
        res.map((r) => r.count),
        ns.map(primesBelow),
      );
      // Ran in worker threads, not on the main thread (threadId 0).
      t.true(res.every((r) => r.threadId > 0));
      t.is(pool.stats.threads, 2);
      t.is(pool.stats.completed, ns.length);
    } finally {
      await pool.close();
    }
  });

  test(`${library}: named exports, transferred buffers and task errors`, async (t) => {
    const pool = new ThreadPool<unknown, unknown>({ filename: TASKS.href, size: 1, library });
    try {
      const a = new Float64Array(1000).map((_, i) => i);
      t.is(await pool.run(a, { name: "sum", transfer: [a.buffer] }), 499_500);
      t.is(a.byteLength, 0, "the buffer moved to the thread");
      const err = await t.throwsAsync(pool.run("bad input", { name: "fail" }), {
        instanceOf: ThreadPoolTaskError,
      });
      t.regex(err!.message, /task fail of .*pools\.fixture\.ts failed: bad input/);
      t.is((err!.cause as Error).name, "RangeError");
      // The pool keeps working after a task error.
      t.is(await pool.run(new Float64Array([1, 2]), { name: "sum" }), 3);
    } finally {
      await pool.close();
    }
    await t.throwsAsync(pool.run(1), { instanceOf: ThreadPoolClosedError });
  });

  test(`${library}: a full pool rejects with ThreadPoolQueueFullError (whenFull: reject)`, async (t) => {
    const counters = new Int32Array(new SharedArrayBuffer(12));
    const pool = new ThreadPool<number, number>({
      filename: TASKS,
      library,
      size: 1,
      maxQueue: 1,
      workerData: { counters },
    });
    try {
      const first = pool.run(200, { name: "occupy" });
      const second = pool.run(10, { name: "occupy" });
      const err = await t.throwsAsync(pool.run(10, { name: "occupy" }), {
        instanceOf: ThreadPoolQueueFullError,
      });
      t.regex(err!.message, /1 running, 1 queued/);
      await Promise.all([first, second]);
      t.is(Atomics.load(counters, 2), 2, "only the two admitted tasks ran");
    } finally {
      await pool.close();
    }
  });

  test(`${library}: whenFull: wait gives back-pressure: all tasks run, never more than size at once`, async (t) => {
    const counters = new Int32Array(new SharedArrayBuffer(12));
    const pool = new ThreadPool<number, number>({
      filename: TASKS,
      library,
      size: 2,
      maxQueue: 1,
      whenFull: "wait",
      workerData: { counters },
    });
    try {
      let maxOutstanding = 0;
      const runs: Promise<number>[] = [];
      for (let i = 0; i < 10; i++) {
        runs.push(pool.run(15, { name: "occupy" }));
        const s = pool.stats;
        maxOutstanding = Math.max(maxOutstanding, s.running + s.waiting);
      }
      t.true(pool.stats.waiting >= 7, "callers beyond capacity wait");
      const ids = await Promise.all(runs);
      t.is(Atomics.load(counters, 2), 10);
      t.true(Atomics.load(counters, 1) <= 2, `at most 2 ran at once, saw ${Atomics.load(counters, 1)}`);
      t.true(new Set(ids).size <= 2);
      t.is(pool.stats.waiting, 0);
    } finally {
      await pool.close();
    }
  });
}

test("bad options are refused", (t) => {
  t.throws(() => new ThreadPool({ filename: TASKS, size: 0 }), { instanceOf: RangeError, message: /size/ });
  t.throws(() => new ThreadPool({ filename: TASKS, maxQueue: -1 }), {
    instanceOf: RangeError,
    message: /maxQueue/,
  });
  t.throws(() => new ThreadPool({ filename: TASKS, whenFull: "drop" as never }), { message: /whenFull/ });
  t.throws(() => new ThreadPool({ filename: TASKS, library: "workerpool" as never }), { message: /library/ });
});
