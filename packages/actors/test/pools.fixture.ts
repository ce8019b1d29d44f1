/**
 * Code for the pool tests: CPU tasks run in ThreadPool threads, and an actor class used by the
 * ActorPool tests.
 */
import { threadId, workerData } from "node:worker_threads";
import { countPrimes } from "../src/bench/pool-task.js";

/** Counts primes below `n` (the pool bench's CPU work) and says which thread did it. */
export default function countPrimesHere(n: number): { count: number; threadId: number } {
  return { count: countPrimes(n), threadId };
}

/**
 * Records how many tasks run at once in the pool's workerData.counters (Int32Array over a
 * SharedArrayBuffer: [running, maxRunning, started]) and holds the thread for `ms`.
 */
export function occupy(ms: number): number {
  // a pool thread's workerData is [the library's data, the pool's workerData option].
  const c = (workerData as [unknown, { counters: Int32Array }])[1].counters;
  const now = Atomics.add(c, 0, 1) + 1;
  Atomics.add(c, 2, 1);
  let max = Atomics.load(c, 1);
  while (now > max && Atomics.compareExchange(c, 1, max, now) !== max) max = Atomics.load(c, 1);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  Atomics.sub(c, 0, 1);
  return threadId;
}

/** Sums a Float64Array moved to the thread. */
export function sum(a: Float64Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]!;
  return s;
}

export function fail(message: string): never {
  throw new RangeError(message);
}

/** Actor for the ActorPool tests. */
export class Squarer {
  calls = 0;
  constructor(readonly id: string) {}
  async square(x: number, delayMs = 0): Promise<{ id: string; y: number }> {
    this.calls++;
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    if (x < 0) throw new RangeError(`negative input ${x}`);
    return { id: this.id, y: x * x };
  }
  pid(): number {
    return process.pid;
  }
  /** CPU work on a ThreadPool inside this actor's process (this module is the task module). */
  async primesInThreads(ns: number[]): Promise<{ counts: number[]; threads: number[]; pid: number }> {
    // Imported here, not at the top: the threads import this module and need none of it.
    const { ThreadPool } = await import("@torl-ts/actors");
    const pool = new ThreadPool<number, { count: number; threadId: number }>({
      filename: import.meta.url,
      size: 2,
    });
    try {
      const res = await Promise.all(ns.map((n) => pool.run(n)));
      return { counts: res.map((r) => r.count), threads: res.map((r) => r.threadId), pid: process.pid };
    } finally {
      await pool.close();
    }
  }
  die(): never {
    process.exit(3);
  }
}
