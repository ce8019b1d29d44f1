/**
 * The driver of the partition tests, run inside its own network namespace. argv: scenario, head
 * address, key file, work folder. It asks the test (which owns the links) to cut and heal them by
 * printing `@@ {"op": ...}` and reading one line back; it ends by printing `@@ {"result": ...}`.
 */
import path from "node:path";
import { createInterface } from "node:readline";
import { ActorDiedError, clusterStatus, get, init, put, shutdown } from "@torl-ts/actors";
import { LedgerActor } from "./ledger.js";

const [scenario, address, keys, work] = process.argv.slice(2) as [string, string, string, string];
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function ask(op: string, member?: string): Promise<void> {
  process.stdout.write(`@@ ${JSON.stringify({ op, member })}\n`);
  const r = await lines.next();
  if (r.done) throw new Error(`the test closed the control channel while '${op}' was pending`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function nodeIdAt(ip: string): Promise<string> {
  const s = await clusterStatus();
  const n = s.nodes.find((x: { ip: string }) => x.ip === ip);
  if (!n) throw new Error(`no node at ${ip} in ${JSON.stringify(s.nodes)}`);
  return n.nodeId;
}

async function until<T>(what: string, limitMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const t0 = Date.now();
  while (Date.now() - t0 < limitMs) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    await sleep(50);
  }
  throw new Error(`${what}: not within ${limitMs} ms`);
}

/** Calls `record(id)` one after another until stopped; notes each call's outcome. */
function pump(h: any, ids: { next: number }, outcomes: Record<number, string>, stop: { now: boolean }) {
  return (async () => {
    while (!stop.now) {
      const id = ++ids.next;
      try {
        await h.record(id);
        outcomes[id] = "ok";
      } catch (e) {
        outcomes[id] = (e as Error).name;
        await sleep(50);
      }
    }
  })();
}

async function nodeCut(): Promise<unknown> {
  const n1 = await nodeIdAt("198.18.0.11");
  const n2 = await nodeIdAt("198.18.0.12");
  const restartable = LedgerActor.options({ numCpus: 1, maxRestarts: 2 }).remote(path.join(work, "r.log"));
  const once = LedgerActor.options({ numCpus: 1 }).remote(path.join(work, "s.log"));
  const [rw, sw] = await get([restartable.where(), once.where()]);
  if (rw.nodeId !== n1 || sw.nodeId !== n1)
    throw new Error(`expected both actors on n1 (${n1}), got ${rw.nodeId} and ${sw.nodeId}`);
  const ids = { next: 0 };
  const outcomes: Record<number, string> = {};
  const stop = { now: false };
  const pumps = [pump(restartable, ids, outcomes, stop), pump(once, ids, outcomes, stop)];
  await sleep(500);
  const inflight = once.slow(120_000);
  await sleep(100);

  const cutAt = Date.now();
  await ask("cut", "n1");
  const detectedMs = await until("n1 declared dead", 30_000, async () => {
    const s = await clusterStatus();
    return s.nodes.find((n: { nodeId: string }) => n.nodeId === n1)?.alive === false
      ? Date.now() - cutAt
      : undefined;
  });
  let inflightError: { name: string; kind?: string; message: string; ms: number } | null = null;
  try {
    await get(inflight, { timeoutMs: 30_000 });
  } catch (e) {
    inflightError = {
      name: (e as Error).name,
      kind: e instanceof ActorDiedError ? e.cause.kind : undefined,
      message: (e as Error).message,
      ms: Date.now() - cutAt,
    };
  }
  const moved = await until("restartable actor back on n2", 30_000, async () => {
    const w = await get(restartable.where(), { timeoutMs: 2000 });
    return w.nodeId === n2 ? w : undefined;
  });
  const recoveredMs = Date.now() - cutAt;
  const fencedMs = await until("stale workers on n1 gone", 30_000, async () =>
    !alive(rw.pid) && !alive(sw.pid) ? Date.now() - cutAt : undefined,
  );

  const healAt = Date.now();
  await ask("heal", "n1");
  // a few heartbeats' time for n1 to hear from the head again and be refused
  await sleep(3000);
  const after = await clusterStatus();
  const n1After = after.nodes.find((n: { nodeId: string }) => n.nodeId === n1);
  const stillOnN2 = await get(restartable.where());
  stop.now = true;
  await Promise.all(pumps);
  return {
    detectedMs,
    inflightError,
    recoveredMs,
    fencedMs,
    movedTo: moved.nodeId === n2 ? "n2" : moved.nodeId,
    n1AliveAfterHeal: n1After?.alive,
    restartableAfterHeal: stillOnN2.nodeId === n2 ? "n2" : stillOnN2.nodeId,
    sinceHealMs: Date.now() - healAt,
    outcomes,
  };
}

async function headCut(): Promise<unknown> {
  const n2 = await nodeIdAt("198.18.0.12");
  const h = LedgerActor.options({ numCpus: 1 }).remote(path.join(work, "h.log"));
  const w = await get(h.where());
  if (w.nodeId !== n2) throw new Error(`expected the actor on n2, got ${w.nodeId}`);
  const ref = put(new Float32Array(1 << 16).fill(2));
  let calls = 0;
  let callErrors = 0;
  const stop = { now: false };
  const loop = (async () => {
    while (!stop.now) {
      try {
        await h.sum(ref);
        calls++;
      } catch {
        callErrors++;
        await sleep(50);
      }
    }
  })();
  await sleep(300);
  const cutMs = Number(process.env.HEAD_CUT_MS ?? 1000);
  await ask("cut", "head");
  const before = calls;
  // the control plane waits: a new actor asked for during the cut is created after the heal
  const late = LedgerActor.options({ numCpus: 0 }).remote(path.join(work, "late.log"));
  const lateReady = get(late.where());
  await sleep(cutMs);
  const duringCut = calls - before;
  await ask("heal", "head");
  const healAt = Date.now();
  const lateWhere = await get(lateReady, { timeoutMs: 30_000 });
  const controlBackMs = Date.now() - healAt;
  await sleep(1500);
  stop.now = true;
  await loop;
  const s = await clusterStatus();
  return {
    cutMs,
    callsDuringCut: duringCut,
    callErrors,
    lateActorNode: lateWhere.nodeId,
    controlBackMs,
    nodesAlive: s.nodes.filter((n: { alive: boolean }) => n.alive).length,
    nodes: s.nodes.length,
  };
}

/** The head cut off for longer than the node timeout: what survives. */
async function headCutLong(): Promise<unknown> {
  const n2 = await nodeIdAt("198.18.0.12");
  const h = LedgerActor.options({ numCpus: 1 }).remote(path.join(work, "long.log"));
  const w = await get(h.where());
  if (w.nodeId !== n2) throw new Error(`expected the actor on n2, got ${w.nodeId}`);
  const cutMs = Number(process.env.HEAD_CUT_MS ?? 5000);
  const inflight = h.slow(120_000);
  await sleep(200);
  await ask("cut", "head");
  const cutAt = Date.now();
  const fencedMs = await until("n2 fenced its worker", 30_000, async () =>
    !alive(w.pid) ? Date.now() - cutAt : undefined,
  );
  await sleep(Math.max(0, cutMs - (Date.now() - cutAt)));
  // still unsettled: nothing but the head can say the worker is gone for good
  const settledDuringCut = await Promise.race([
    get(inflight).then(
      () => true,
      () => true,
    ),
    sleep(10).then(() => false),
  ]);
  await ask("heal", "head");
  const healAt = Date.now();
  let error: { name: string; kind?: string } | null = null;
  try {
    await get(inflight, { timeoutMs: 30_000 });
  } catch (e) {
    error = { name: (e as Error).name, kind: e instanceof ActorDiedError ? e.cause.kind : undefined };
  }
  const settledAfterHealMs = Date.now() - healAt;
  await sleep(2000);
  const s = await clusterStatus();
  return {
    cutMs,
    fencedMs,
    settledDuringCut,
    error,
    settledAfterHealMs,
    n2AliveAfterHeal: s.nodes.find((n: { nodeId: string }) => n.nodeId === n2)?.alive,
  };
}

/** Calls and object fetches through a slow link that resets connections now and then. */
async function slowLink(): Promise<unknown> {
  // on a node agent's machine (the head's own node offers no CPU): every byte between it and this
  // driver goes through the proxy
  const a = LedgerActor.options({ numCpus: 1 }).remote(path.join(work, "slow.log"));
  await get(a.where(), { timeoutMs: 30_000 });
  const seconds = Number(process.env.SLOW_SECONDS ?? 6);
  const t0 = Date.now();
  let syncCalls = 0;
  let batches = 0;
  let fetches = 0;
  let fetchedBytes = 0;
  const wrong: string[] = [];
  while (Date.now() - t0 < seconds * 1000) {
    // a call and its answer
    const id = 1_000_000 + syncCalls;
    const got = await get(a.record(id), { timeoutMs: 30_000 });
    if (got !== id) wrong.push(`record(${id}) returned ${got}`);
    syncCalls++;
    // 50 calls in flight at once
    const refs = Array.from({ length: 50 }, (_, i) => a.sum(new Float32Array([i, 1])));
    const sums = await get(refs, { timeoutMs: 30_000 });
    for (const [i, s] of sums.entries()) if (s !== i + 1) wrong.push(`sum #${i} = ${s}`);
    batches++;
    // an object the actor owns (1 MiB), fetched by this driver from the actor's process
    const [ref] = await get(a.makeRef(1 << 18, batches), { timeoutMs: 30_000 });
    const arr = (await get(ref, { timeoutMs: 30_000 })) as Float32Array;
    if (arr.length !== 1 << 18 || arr[0] !== batches || arr[arr.length - 1] !== batches)
      wrong.push(`fetched object ${batches} is wrong`);
    fetches++;
    fetchedBytes += arr.byteLength;
  }
  const elapsedS = (Date.now() - t0) / 1000;
  return {
    elapsedS,
    syncCalls,
    callsPerS: (syncCalls + batches * 50) / elapsedS,
    fetches,
    fetchMBps: fetchedBytes / 1e6 / elapsedS,
    wrong,
  };
}

async function main(): Promise<void> {
  await init({ address, keys });
  try {
    const result =
      scenario === "node-cut"
        ? await nodeCut()
        : scenario === "head-cut"
          ? await headCut()
          : scenario === "head-cut-long"
            ? await headCutLong()
            : await slowLink();
    process.stdout.write(`@@ ${JSON.stringify({ result })}\n`);
  } catch (e) {
    process.stdout.write(`@@ ${JSON.stringify({ error: (e as Error).stack })}\n`);
  } finally {
    await shutdown();
    process.exit(0);
  }
}

void main();
