/**
 * `torl bench actors`: Ray's microbenchmark figures for this runtime, next to the raw ZeroMQ floor
 * measured in the same run between two processes.
 */
import os from "node:os";
import path from "node:path";
import { createActor, free, get, init, put, shutdown, submitTask } from "../api.js";
import { defineBench } from "../cli/define.js";
import { siblingModule } from "../module-files.js";
import { generateClusterKeys } from "../wire/security.js";
import { RawEcho } from "./raw-zmq.js";
import type { BenchActor, BenchClient } from "./workload.js";

const WORKLOAD = siblingModule(import.meta.url, "./workload").href;

const usage = `usage: pnpm torl bench actors [--json] [--seconds S]

Measures (ops/s unless noted): 1_1_actor_calls_sync, 1_1_actor_calls_async, 1_1_actor_calls_concurrent,
1_1_thread_actor_calls_sync, 1_1_thread_actor_calls_async (the same calls to a thread actor, interleaved
with the process actor's and the raw floor; ratio_thread_vs_process_*),
n_n_actor_calls_async, single_client_tasks_async, single_client_get_calls, single_client_put_gigabytes
(GB/s, 64 MiB Float32Array), and the baselines measured in the same run, interleaved with the
figure they bound: raw_zmq_roundtrip_sync / raw_zmq_roundtrip_pipelined (two processes, same
transport), memcpy_fresh_64mib_gigabytes (a copy into freshly allocated memory, what put did before
it recycled buffers) and memcpy_warm_64mib_gigabytes (a copy into reused memory, put's ceiling);
single_client_put_gigabytes_gc_drop is put with refs left to the GC instead of freed.
1_1_actor_calls_sync_curve and 1_1_actor_calls_async_curve are the same calls in a cluster with
CURVE keys (authenticated and encrypted), measured right after, in alternation with plaintext
ones (ratio_*_curve_vs_plain).
The last line is one JSON object.`;

async function timeLoop(seconds: number, step: () => Promise<number>): Promise<number> {
  // warm-up
  const w0 = performance.now();
  while (performance.now() - w0 < 200) await step();
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) n += await step();
  return n / ((performance.now() - t0) / 1000);
}

/** Alternates slices of the measurements so all see the same machine load; returns each one's rate. */
async function interleavedN(
  seconds: number,
  fs: Array<(s: number) => Promise<[number, number]>>,
): Promise<number[]> {
  const rounds = 4;
  const n = fs.map(() => 0);
  const t = fs.map(() => 0);
  for (let i = 0; i < rounds; i++) {
    for (const [j, f] of fs.entries()) {
      const [nj, tj] = await f(seconds / rounds / fs.length);
      n[j]! += nj;
      t[j]! += tj;
    }
  }
  return n.map((x, j) => x / t[j]!);
}

async function counted(seconds: number, step: () => Promise<number>): Promise<[number, number]> {
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) n += await step();
  return [n, (performance.now() - t0) / 1000];
}

let keep: Float32Array | null = null;

type NoopActor = { noop(): PromiseLike<unknown> };

/** One actor's sync and async call rates in an embedded cluster (with `keys`: CURVE on every socket). */
async function callRates(
  keys: ReturnType<typeof generateClusterKeys> | undefined,
  seconds: number,
): Promise<[number, number]> {
  await init(keys ? { keys } : {});
  try {
    const a = createActor<BenchActor>(WORKLOAD, "BenchActor", []);
    await a.ready();
    await timeLoop(0.2, async () => {
      await a.noop();
      return 1;
    });
    const [n1, t1] = await counted(seconds, async () => {
      await a.noop();
      return 1;
    });
    const [n2, t2] = await counted(seconds, async () => {
      const refs = [];
      for (let i = 0; i < 1000; i++) refs.push(a.noop());
      await get(refs);
      return 1000;
    });
    return [n1 / t1, n2 / t2];
  } finally {
    await shutdown();
  }
}

/**
 * The cost of CURVE: the same calls with and without keys, a fresh cluster each, alternating so both
 * see the same machine load.
 */
async function benchCurve(seconds: number, log: (s: string) => void): Promise<Record<string, number>> {
  log("1_1_actor_calls_sync/async with CURVE vs plaintext (alternating clusters) ...");
  const keys = generateClusterKeys();
  const sum = { plainSync: 0, plainAsync: 0, curveSync: 0, curveAsync: 0 };
  const rounds = 3;
  for (let i = 0; i < rounds; i++) {
    const [ps, pa] = await callRates(undefined, seconds / 2);
    const [cs, ca] = await callRates(keys, seconds / 2);
    sum.plainSync += ps / rounds;
    sum.plainAsync += pa / rounds;
    sum.curveSync += cs / rounds;
    sum.curveAsync += ca / rounds;
  }
  return {
    "1_1_actor_calls_sync_curve": sum.curveSync,
    "1_1_actor_calls_async_curve": sum.curveAsync,
    ratio_sync_curve_vs_plain: sum.curveSync / sum.plainSync,
    ratio_async_curve_vs_plain: sum.curveAsync / sum.plainAsync,
  };
}

export async function benchActors(
  seconds: number,
  log: (s: string) => void,
): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const ipc = `ipc://${path.join(os.tmpdir(), `torl-bench-${process.pid}.sock`)}`;
  const raw = await RawEcho.start(ipc);
  await init();
  try {
    // start every worker first (actors and the task pool), so no process boots during a measurement
    log("starting workers ...");
    const a = createActor<BenchActor>(WORKLOAD, "BenchActor", []);
    const th = createActor<BenchActor>(WORKLOAD, "BenchActor", [], { thread: true });
    const c = createActor<BenchActor>(WORKLOAD, "BenchActor", [], { maxConcurrency: 16 });
    const servers = [
      createActor<BenchActor>(WORKLOAD, "BenchActor", []),
      createActor<BenchActor>(WORKLOAD, "BenchActor", []),
    ];
    const clients = [
      createActor<BenchClient>(WORKLOAD, "BenchClient", [servers]),
      createActor<BenchClient>(WORKLOAD, "BenchClient", [servers]),
    ];
    await get([a, th, c, ...servers, ...clients].map((h) => h.ready()));
    await timeLoop(Math.max(3, seconds), async () => {
      await get(Array.from({ length: 200 }, () => submitTask(WORKLOAD, "noopTask", [])));
      return 200;
    });
    await new Promise((r) => setTimeout(r, 1000));
    const syncCall = (h: NoopActor) => async () => {
      await h.noop();
      return 1;
    };
    const asyncCalls = (h: NoopActor) => async () => {
      const refs = [];
      for (let i = 0; i < 1000; i++) refs.push(h.noop());
      await get(refs);
      return 1000;
    };
    // both paths warmed, in this process and in the thread actor's (its code is compiled there anew)
    for (const h of [a, th]) {
      await timeLoop(0.2, syncCall(h));
      await timeLoop(0.5, asyncCalls(h));
    }
    log("1_1_actor_calls_sync vs 1_1_thread_actor_calls_sync vs raw_zmq_roundtrip_sync (interleaved) ...");
    const syncRates = await interleavedN(seconds * 3, [
      (s) => counted(s, syncCall(a)),
      (s) => counted(s, syncCall(th)),
      (s) => raw.sync(s),
    ]);
    [out["1_1_actor_calls_sync"], out["1_1_thread_actor_calls_sync"], out.raw_zmq_roundtrip_sync] =
      syncRates as [number, number, number];
    log(
      "1_1_actor_calls_async vs 1_1_thread_actor_calls_async vs raw_zmq_roundtrip_pipelined (interleaved) ...",
    );
    const asyncRates = await interleavedN(seconds * 3, [
      (s) => counted(s, asyncCalls(a)),
      (s) => counted(s, asyncCalls(th)),
      (s) => raw.pipelined(s),
    ]);
    [out["1_1_actor_calls_async"], out["1_1_thread_actor_calls_async"], out.raw_zmq_roundtrip_pipelined] =
      asyncRates as [number, number, number];
    log("1_1_actor_calls_concurrent ...");
    out["1_1_actor_calls_concurrent"] = await timeLoop(seconds, async () => {
      const refs = [];
      for (let i = 0; i < 1000; i++) refs.push(c.asyncNoop());
      await get(refs);
      return 1000;
    });
    log("n_n_actor_calls_async (2 client actors x 2 server actors) ...");
    await get(clients.map((cl) => cl.run(2000, 500)));
    out.n_n_actor_calls_async = await timeLoop(seconds, async () => {
      const counts = await get(clients.map((cl) => cl.run(5000, 500)));
      return (counts as number[]).reduce((x, y) => x + y, 0);
    });
    log("single_client_tasks_async ...");
    out.single_client_tasks_async = await timeLoop(seconds, async () => {
      const refs = [];
      for (let i = 0; i < 1000; i++) refs.push(submitTask(WORKLOAD, "noopTask", []));
      await get(refs);
      return 1000;
    });
    log("single_client_get_calls ...");
    const small = put({ x: 1 });
    out.single_client_get_calls = await timeLoop(seconds, async () => {
      for (let i = 0; i < 100; i++) await get(small);
      return 100;
    });
    log("single_client_put_gigabytes (64 MiB Float32Array) vs a plain copy into fresh memory ...");
    // Each put is a full snapshot copy. As in Ray's figure, the ref is dropped right after the put;
    // Python frees it at once by refcount, so here the bench frees it explicitly (`free`), which lets
    // the store recycle the buffer. `single_client_put_gigabytes_gc_drop` instead just drops the
    // ref and leaves it to the GC's finalizers (run between iterations), which come much later.
    const big = new Float32Array(16 * 1024 * 1024).fill(1.5);
    const warm = new Float32Array(big.length).fill(0);
    free(put(big)); // warm-up, like timeLoop's: the first put allocates (and faults in) the buffer
    const [puts, copies, warmCopies] = await interleavedN(seconds * 2, [
      (s) =>
        counted(s, async () => {
          free(put(big));
          return 1;
        }),
      (s) =>
        counted(s, async () => {
          keep = big.slice();
          return keep.length > 0 ? 1 : 0;
        }),
      (s) =>
        counted(s, async () => {
          warm.set(big);
          return 1;
        }),
    ]);
    // not interleaved: its puts hold pooled buffers until the GC runs, which would starve the others
    const [gcN, gcT] = await counted(seconds, async () => {
      put(big);
      await new Promise((r) => setImmediate(r));
      return 1;
    });
    const gcPuts = gcN / gcT;
    out.single_client_put_gigabytes = puts! * (big.byteLength / 1e9);
    out.memcpy_fresh_64mib_gigabytes = copies! * (big.byteLength / 1e9);
    out.memcpy_warm_64mib_gigabytes = warmCopies! * (big.byteLength / 1e9);
    out.single_client_put_gigabytes_gc_drop = gcPuts * (big.byteLength / 1e9);
  } finally {
    raw.close();
    await shutdown();
  }
  const curve = await benchCurve(seconds, log);
  Object.assign(out, curve);
  out.ratio_sync_vs_raw_sync = out["1_1_actor_calls_sync"]! / out.raw_zmq_roundtrip_sync!;
  out.ratio_async_vs_raw_pipelined = out["1_1_actor_calls_async"]! / out.raw_zmq_roundtrip_pipelined!;
  out.ratio_thread_vs_process_sync = out["1_1_thread_actor_calls_sync"]! / out["1_1_actor_calls_sync"]!;
  out.ratio_thread_vs_process_async = out["1_1_thread_actor_calls_async"]! / out["1_1_actor_calls_async"]!;
  out.ratio_put_vs_memcpy = out.single_client_put_gigabytes! / out.memcpy_fresh_64mib_gigabytes!;
  out.ratio_put_vs_memcpy_warm = out.single_client_put_gigabytes! / out.memcpy_warm_64mib_gigabytes!;
  keep = null;
  return out;
}

export const benchActorsCommand = defineBench({
  summary: "actor runtime microbenchmark (Ray's figures) against raw ZeroMQ",
  usage,
  flags: { seconds: { type: "number", min: 0.1 } },
  async measure(f) {
    const figures = await benchActors(f.seconds ?? 2, (s) => console.error(s));
    const round = (v: number) => (v >= 100 ? Math.round(v) : Math.round(v * 1000) / 1000);
    return Object.fromEntries(Object.entries(figures).map(([k, v]) => [k, round(v)]));
  },
  show(figures) {
    const rows = Object.entries(figures).map(([k, v]) => `  ${k.padEnd(32)} ${String(v).padStart(12)}`);
    console.log(["actor benchmark (ops/s; put in GB/s)", ...rows].join("\n"));
  },
});
