import { existsSync, readdirSync } from "node:fs";
/**
 * Functions run inside member processes by the collective tests and the benchmark (through
 * ProcessMember or invokeInActor). Data is generated from (rank, index) so the test can compute
 * the expected result on its own.
 */
import {
  actor,
  type CollectiveArray,
  collective,
  getRuntimeContext,
  type PublishedArrays,
  type ReduceOp,
  registerReduceKernel,
} from "@torl-ts/actors";

export type DtypeName =
  | "Float32Array"
  | "Float64Array"
  | "Int32Array"
  | "Int16Array"
  | "Uint8Array"
  | "Uint32Array";

const CTORS = { Float32Array, Float64Array, Int32Array, Int16Array, Uint8Array, Uint32Array } as const;

/** Deterministic values: small integers for integer types, fractional values for floats. */
export function valueAt(dtype: DtypeName, rank: number, i: number): number {
  if (dtype === "Float32Array" || dtype === "Float64Array")
    return Math.sin(i * 0.37 + rank * 1.3) * 10 + rank;
  if (dtype === "Uint8Array") return (i * 7 + rank * 13) % 61;
  if (dtype === "Uint32Array") return ((i * 2654435761 + rank * 97) >>> 0) % 1_000_000_007;
  return ((i * 7 + rank * 13) % 201) - 100;
}

export function makeData(dtype: DtypeName, n: number, rank: number): CollectiveArray {
  const a = new CTORS[dtype](n);
  for (let i = 0; i < n; i++) a[i] = valueAt(dtype, rank, i);
  return a;
}

export async function doAllReduce(group: string, dtype: DtypeName, n: number, op: ReduceOp) {
  const a = makeData(dtype, n, collective.getRank(group));
  const out = await collective.allReduce(a, op, group);
  return { sameObject: out === a, result: a };
}

export async function doBroadcast(group: string, dtype: DtypeName, n: number, src: number) {
  const rank = collective.getRank(group);
  const a = rank === src ? makeData(dtype, n, rank) : new CTORS[dtype](n);
  await collective.broadcast(a, src, group);
  return a;
}

export async function doAllGather(group: string, dtype: DtypeName, lengths: number[], intoOut: boolean) {
  const rank = collective.getRank(group);
  const mine = makeData(dtype, lengths[rank]!, rank);
  const total = lengths.reduce((s, x) => s + x, 0);
  const out = intoOut ? new CTORS[dtype](total) : undefined;
  const res = await collective.allGather(mine, group, out as never);
  if (intoOut && res !== out) throw new Error("allGather with out returned another array");
  // The input must be left untouched.
  const again = makeData(dtype, lengths[rank]!, rank);
  if (!mine.every((v, i) => v === again[i])) throw new Error("allGather modified its input");
  return res;
}

export async function doReduceScatter(group: string, dtype: DtypeName, n: number, op: ReduceOp) {
  const rank = collective.getRank(group);
  const a = makeData(dtype, n, rank);
  const shard = await collective.reduceScatter(a, op, group);
  const again = makeData(dtype, n, rank);
  if (!a.every((v, i) => v === again[i])) throw new Error("reduceScatter modified its input");
  return { shard, range: collective.shardRange(n, group) };
}

/**
 * reduceScatter of the same data into a new array and in place (out: the input's own part), then once
 * (rank 0) with an out that overlaps the input elsewhere. Returns both results (the in-place one as the
 * input's part holds it), whether the rest of the input was left alone, and the overlap's error name.
 */
export async function doInPlaceReduceScatter(group: string, dtype: DtypeName, n: number, op: ReduceOp) {
  const rank = collective.getRank(group);
  const b = collective.shardRange(n, group);
  const shard = await collective.reduceScatter(makeData(dtype, n, rank), op, group);
  const a = makeData(dtype, n, rank);
  const mine = a.subarray(b.start, b.end);
  const res = await collective.reduceScatter(a, op, group, mine);
  const before = makeData(dtype, n, rank);
  let othersChanged = 0;
  for (let i = 0; i < n; i++) if ((i < b.start || i >= b.end) && a[i] !== before[i]) othersChanged++;
  let overlap = "not tried";
  // rank 0 alone: refused before anything is sent, so the others need not take part
  if (rank === 0)
    try {
      await collective.reduceScatter(a, op, group, a.subarray(b.start + 1, b.end + 1));
      overlap = "resolved";
    } catch (e) {
      overlap = (e as Error).name;
    }
  // the group still works
  await collective.reduceScatter(makeData(dtype, n, rank), op, group);
  return { shard, inPlace: mine, sameObject: res === mine, othersChanged, overlap };
}

/**
 * reduceScatter and allReduce of float32 with a registered sum kernel that counts its calls and the
 * values it added (then put back): what the ring's own loop gives must come out unchanged.
 */
export async function doRegisteredKernel(group: string, n: number) {
  const rank = collective.getRank(group);
  let calls = 0;
  let values = 0;
  const restore = registerReduceKernel("sum", Float32Array, (acc, src) => {
    calls++;
    values += acc.length;
    for (let i = 0; i < acc.length; i++) acc[i]! += src[i]!;
  });
  try {
    const shard = await collective.reduceScatter(makeData("Float32Array", n, rank), "sum", group);
    const all = makeData("Float32Array", n, rank);
    await collective.allReduce(all, "sum", group);
    return { calls, values, shard, all };
  } finally {
    restore();
  }
}

/** reduceScatter then allGather into a preallocated array: the FSDP pattern; equals allReduce. */
export async function doReduceScatterAllGather(group: string, n: number, rounds: number) {
  const rank = collective.getRank(group);
  const full = new Float64Array(n);
  let shard: Float64Array | undefined;
  for (let r = 0; r < rounds; r++) {
    const grads = makeData("Float64Array", n, rank + r) as Float64Array;
    shard = await collective.reduceScatter(grads, "sum", group, shard);
    await collective.allGather(shard, group, full);
  }
  return full;
}

/**
 * allGathers with `inputUnchanged`, the inputs kept as the option asks: two arrays in turn, each
 * overwritten with garbage only once a later allGather has returned. Returns the number of wrong
 * elements seen; with `badOption`, passes a non-boolean option instead and returns the error's name.
 */
export async function doInputUnchangedLoop(group: string, n: number, rounds: number, badOption = false) {
  const rank = collective.getRank(group);
  const W = collective.getWorldSize(group);
  const b = collective.shardRange(n, group);
  const inputs = [0, 1].map(() => new Float64Array(b.end - b.start));
  const full = new Float64Array(n);
  if (badOption) {
    try {
      await collective.allGather(inputs[0]!, group, full, { inputUnchanged: "yes" as never });
      return "resolved";
    } catch (e) {
      return (e as Error).name;
    }
  }
  let wrong = 0;
  for (let k = 1; k <= rounds; k++) {
    const input = inputs[k % 2]!;
    input.fill(k + rank * 0.5);
    await collective.allGather(input, group, full, { inputUnchanged: true });
    // the input of the call before this one: a later allGather (this one) has returned
    inputs[(k + 1) % 2]!.fill(Number.NaN);
    for (let r = 0, i = 0; r < W; r++) {
      const end = i + (r === rank ? b.end - b.start : shardLen(n, W, r));
      for (; i < end; i++) if (full[i] !== k + r * 0.5) wrong++;
    }
  }
  return wrong;
}

/**
 * allGathers in place (each rank's input is its own part of `out`), `rounds` times into one array, then
 * once (rank 0) with an input that overlaps `out` elsewhere. Returns the number of wrong elements and the
 * overlap's error name.
 */
export async function doInPlaceGather(group: string, n: number, rounds: number) {
  const rank = collective.getRank(group);
  const W = collective.getWorldSize(group);
  const b = collective.shardRange(n, group);
  const full = new Float32Array(n).fill(Number.NaN);
  let wrong = 0;
  for (let k = 1; k <= rounds; k++) {
    const mine = full.subarray(b.start, b.end).fill(k + rank * 0.5);
    const res = await collective.allGather(mine, group, full);
    if (res !== full) wrong++;
    for (let r = 0, i = 0; r < W; r++) {
      const end = i + shardLen(n, W, r);
      for (; i < end; i++) if (full[i] !== k + r * 0.5) wrong++;
    }
  }
  let overlap = "not tried";
  // rank 0 alone: refused before anything is sent, so the others need not take part
  if (rank === 0)
    try {
      // one element off its part: the parts written would overwrite it
      await collective.allGather(full.subarray(b.start + 1, b.end + 1), group, full);
      overlap = "resolved";
    } catch (e) {
      overlap = (e as Error).name;
    }
  // the group still works
  await collective.allGather(full.slice(b.start, b.end), group, full);
  return { wrong, overlap };
}

/**
 * Many rounds of reduceScatter + allGather (+ a broadcast every third round) whose inputs are
 * overwritten with garbage as soon as each call returns: results must not see the garbage
 * (checks the staging of sent data). Returns the number of wrong elements seen.
 */
export async function doMutatingLoop(group: string, n: number, rounds: number) {
  const rank = collective.getRank(group);
  const W = collective.getWorldSize(group);
  const full = new Float64Array(n);
  const shard = new Float64Array(collective.shardRange(n, group).end - collective.shardRange(n, group).start);
  let wrong = 0;
  for (let k = 1; k <= rounds; k++) {
    full.fill((rank + 1) * k);
    await collective.reduceScatter(full, "sum", group, shard);
    full.fill(Number.NaN);
    for (const v of shard) if (v !== (k * W * (W + 1)) / 2) wrong++;
    shard.fill(k + rank * 0.5);
    await collective.allGather(shard, group, full);
    shard.fill(Number.NaN);
    const b = collective.shardRange(n, group);
    for (let r = 0, i = 0; r < W; r++) {
      const end = i + (r === rank ? b.end - b.start : shardLen(n, W, r));
      for (; i < end; i++) if (full[i] !== k + r * 0.5) wrong++;
    }
    if (k % 3 === 0) {
      if (rank === k % W) full.fill(-k);
      await collective.broadcast(full, k % W, group);
      if (rank === k % W) full.fill(Number.NaN);
      else for (const v of full) if (v !== -k) wrong++;
    }
  }
  return wrong;
}

function shardLen(n: number, W: number, r: number): number {
  return Math.floor(n / W) + (r < n % W ? 1 : 0);
}

export async function doBarrierSequence(group: string, times: number) {
  for (let i = 0; i < times; i++) await collective.barrier(group);
  return collective.getWorldSize(group);
}

/** Several collectives issued without awaiting in between: they must run in call order. */
export async function doPipelined(group: string, n: number) {
  const rank = collective.getRank(group);
  const a = makeData("Int32Array", n, rank);
  const b = makeData("Float64Array", n, rank);
  const [ra, rb, rc] = await Promise.all([
    collective.allReduce(a, "max", group),
    collective.allReduce(b, "sum", group),
    collective.allGather(new Int32Array([rank]), group),
  ]);
  return { ra, rb, rc };
}

/** Calls `collective[op](...args)`, with the group name where args hold "$group" (else last). */
export async function doCall(op: string, group: string, ...args: unknown[]) {
  const fn = (collective as unknown as Record<string, (...a: unknown[]) => unknown>)[op]!;
  const full = args.includes("$group") ? args.map((a) => (a === "$group" ? group : a)) : [...args, group];
  return await fn(...full);
}

/** Mismatched calls: even ranks allReduce, odd ranks allGather. Returns the error's name. */
export async function doMismatch(group: string) {
  const rank = collective.getRank(group);
  try {
    if (rank % 2 === 0) await collective.allReduce(new Float32Array(8), "sum", group);
    else await collective.allGather(new Float32Array(8), group);
    return "no error";
  } catch (err) {
    return (err as Error).name;
  }
}

/** Whether the group's allGather goes through shared memory here, and the /dev/shm files this process left named. */
export function sharedState(group: string) {
  const leftNamed = existsSync("/dev/shm")
    ? readdirSync("/dev/shm").filter((f) => f.startsWith(`torl-collective-${process.pid}-`)).length
    : 0;
  return { shared: collective.usesSharedMemory(group), leftNamed };
}

/**
 * Makes this member's next writes to its shared-memory files fail (as a full /dev/shm would), then
 * runs an allGather; returns the error's name and message (rank `failing` only breaks; the others call
 * allGather as usual).
 */
export async function doSharedWriteFailure(group: string, failing: number) {
  const rank = collective.getRank(group);
  if (rank === failing) {
    const registry = (globalThis as Record<symbol, unknown>)[Symbol.for("torl-ts.collective.groups")] as Map<
      string,
      { shared: { write: () => void } }
    >;
    registry.get(group)!.shared.write = () => {
      throw new Error("ENOSPC: no space left on device, write");
    };
  }
  try {
    await collective.allGather(new Float32Array(16).fill(rank), group);
    return { name: "resolved", message: "" };
  } catch (e) {
    return { name: (e as Error).name, message: (e as Error).message };
  }
}

/**
 * Every rank publishes `n + rank` float32 values (rank 1000 + i), then overwrites its own array: each
 * rank reads every rank's array whole and in part, its own included, and tries reads that must be
 * refused. With `failing`, that rank's file cannot be made (as with /dev/shm full). Then an allGather
 * checks that the group still works. Returns the wrong values seen and each outcome's error name.
 */
export async function doPublish(group: string, n: number, failing = -1) {
  const rank = collective.getRank(group);
  const W = collective.getWorldSize(group);
  if (rank === failing) {
    const registry = (globalThis as Record<symbol, unknown>)[Symbol.for("torl-ts.collective.groups")] as Map<
      string,
      { createPublishedFile: () => number }
    >;
    registry.get(group)!.createPublishedFile = () => {
      throw new Error("ENOSPC: no space left on device, write");
    };
  }
  const mine = Float32Array.from({ length: n + rank }, (_, i) => rank * 1000 + i);
  let wrong = 0;
  const refused: string[] = [];
  const nameOf = (f: () => unknown) => {
    try {
      f();
      return "resolved";
    } catch (e) {
      return (e as Error).name;
    }
  };
  let published: PublishedArrays<Float32Array> | undefined;
  try {
    published = await collective.publish(mine, group);
  } catch (e) {
    refused.push(`${(e as Error).name}: ${(e as Error).message}`);
  }
  if (published) {
    mine.fill(Number.NaN);
    for (let r = 0; r < W; r++) {
      if (published.lengths[r] !== n + r) wrong++;
      const whole = published.read(r, 0, new Float32Array(n + r));
      for (let i = 0; i < n + r; i++) if (whole[i] !== r * 1000 + i) wrong++;
      const part = published.read(r, 3, new Float32Array(5));
      for (let i = 0; i < 5; i++) if (part[i] !== r * 1000 + 3 + i) wrong++;
    }
    const p = published;
    refused.push(nameOf(() => p.read(0, n - 2, new Float32Array(3))));
    refused.push(nameOf(() => p.read(0, 0, new Float64Array(1) as never)));
    refused.push(nameOf(() => p.read(W, 0, new Float32Array(1))));
    p.close();
    refused.push(nameOf(() => p.read(0, 0, new Float32Array(1))));
  }
  const gathered = await collective.allGather(new Float32Array([rank]), group);
  for (let r = 0; r < W; r++) if (gathered[r] !== r) wrong++;
  return { wrong, refused };
}

/** Benchmark body: `iters` allReduces of a Float32Array of `n` elements; returns seconds. */
export async function benchAllReduce(group: string, n: number, iters: number, op: ReduceOp = "sum") {
  const a = new Float32Array(n).fill(1);
  await collective.barrier(group);
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) await collective.allReduce(a, op, group);
  await collective.barrier(group);
  return (performance.now() - t0) / 1000;
}

export async function benchCollective(group: string, kind: string, n: number, iters: number) {
  const W = collective.getWorldSize(group);
  const a = new Float32Array(n).fill(1);
  const shard = new Float32Array(collective.shardRange(n, group).end - collective.shardRange(n, group).start);
  await collective.barrier(group);
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) {
    if (kind === "allReduce") await collective.allReduce(a, "sum", group);
    else if (kind === "broadcast") await collective.broadcast(a, 0, group);
    else if (kind === "reduceScatter") await collective.reduceScatter(a, "sum", group, shard);
    else if (kind === "allGather") await collective.allGather(shard, group, a);
    else if (kind === "barrier") await collective.barrier(group);
  }
  await collective.barrier(group);
  return { seconds: (performance.now() - t0) / 1000, worldSize: W };
}

/** Actor wrapping the functions above, for the tests over real actors. */
export class CollectiveWorker {
  allReduce(group: string, dtype: DtypeName, n: number, op: ReduceOp) {
    return doAllReduce(group, dtype, n, op).then((r) => r.result);
  }
  broadcast(group: string, dtype: DtypeName, n: number, src: number) {
    return doBroadcast(group, dtype, n, src);
  }
  allGather(group: string, dtype: DtypeName, lengths: number[], intoOut: boolean) {
    return doAllGather(group, dtype, lengths, intoOut);
  }
  reduceScatter(group: string, dtype: DtypeName, n: number, op: ReduceOp) {
    return doReduceScatter(group, dtype, n, op);
  }
  fsdp(group: string, n: number, rounds: number) {
    return doReduceScatterAllGather(group, n, rounds);
  }
  barrier(group: string, times: number) {
    return doBarrierSequence(group, times);
  }
  rank(group: string) {
    return collective.getRank(group);
  }
  isMember(group: string) {
    return collective.isInitialized(group);
  }
  describe(group: string) {
    return { ...collective.describe(group), nodeId: getRuntimeContext().nodeId };
  }
  bench(group: string, kind: string, n: number, iters: number) {
    return benchCollective(group, kind, n, iters);
  }
}

export const CollectiveWorkerActor = actor(CollectiveWorker, { module: import.meta.url });

const enteredBarrier = new Set<string>();

/** Enters a barrier and reports how it ended: "ok", or the error's name and message. */
export async function barrierOutcome(group: string): Promise<string> {
  enteredBarrier.add(group);
  try {
    await collective.barrier(group);
    return "ok";
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
}

/** Whether this process has entered `barrierOutcome` for the group. */
export function hasEnteredBarrier(group: string): boolean {
  return enteredBarrier.has(group);
}

/** One collective call described as data, so a test can give each rank a different one. */
export interface CallSpec {
  op: "allReduce" | "broadcast" | "allGather" | "reduceScatter" | "barrier";
  dtype?: DtypeName;
  n?: number;
  src?: number;
}

/** Makes the call `spec` describes; returns "ok" or the error's name and message. */
export async function doSpec(group: string, spec: CallSpec) {
  const a = makeData(spec.dtype ?? "Float32Array", spec.n ?? 8, collective.getRank(group));
  try {
    if (spec.op === "allReduce") await collective.allReduce(a, "sum", group);
    else if (spec.op === "broadcast") await collective.broadcast(a, spec.src ?? 0, group);
    else if (spec.op === "allGather") await collective.allGather(a, group);
    else if (spec.op === "reduceScatter") await collective.reduceScatter(a, "sum", group);
    else await collective.barrier(group);
    return "ok";
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
}
