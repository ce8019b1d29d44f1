// Collective groups over real actors: the rendezvous runs through invokeInActor, the data flows
// between the actor processes over their own ZeroMQ ring.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type ActorHandle,
  type CollectiveMember,
  createCollectiveGroup,
  createCollectiveGroupOn,
  destroyCollectiveGroup,
  init,
  invokeInActor,
  kill,
  type ReduceOp,
  shardRange,
  shutdown,
} from "@torl-ts/actors";
import { type ChromeTrace, TimelineWriter } from "@torl-ts/core";
import test from "ava";
import {
  type CollectiveWorker,
  CollectiveWorkerActor,
  type DtypeName,
  valueAt,
} from "./collective.fixture.js";

let workers: ActorHandle<CollectiveWorker>[] = [];

test.before(async () => {
  await init({ numCpus: 4 });
  workers = [0, 1, 2, 3].map(() => CollectiveWorkerActor.remote());
  await Promise.all(workers.map((w) => w.ready()));
});

test.after.always(async () => {
  await shutdown();
});

function expectedSum(dtype: DtypeName, n: number, W: number, op: ReduceOp): number[] {
  const C = dtype === "Float32Array" ? Float32Array : dtype === "Float64Array" ? Float64Array : Int32Array;
  return Array.from({ length: n }, (_, i) => {
    const vals = Array.from({ length: W }, (_, r) => new C([valueAt(dtype, r, i)])[0]!);
    if (op === "max") return Math.max(...vals);
    const s = vals.reduce((a, b) => a + b, 0);
    return op === "mean" ? (C === Int32Array ? Math.trunc(s / W) : s / W) : s;
  });
}

function close(a: ArrayLike<number>, b: number[], tol: number): boolean {
  return a.length === b.length && b.every((v, i) => Math.abs(a[i]! - v) <= tol * Math.max(1, Math.abs(v)));
}

test.serial(
  "the timeline holds each rank's collective, with its group and bytes, inside the method that made it",
  async (t) => {
    const members = workers.slice(0, 2);
    const name = "traced";
    await createCollectiveGroup(members, { name });
    const dir = mkdtempSync(join(tmpdir(), "torl-collective-trace-"));
    try {
      const writer = await TimelineWriter.open(join(dir, "trace.json"));
      await Promise.all(members.map((m) => m.allReduce(name, "Float32Array", 1000, "sum")));
      await writer.close();
      const trace = JSON.parse(readFileSync(join(dir, "trace.json"), "utf8")) as ChromeTrace;
      const x = trace.traceEvents.filter((e) => e.ph === "X");
      const ops = x.filter((e) => e.cat === "collective" && e.name === "allReduce");
      t.is(ops.length, 2);
      t.is(new Set(ops.map((e) => e.pid)).size, 2, "one on each rank's row");
      for (const op of ops) {
        t.like(op.args, { group: name, bytes: 4000, length: 1000 });
        const method = x.find(
          (e) => e.cat === "actor_call" && e.name === "CollectiveWorker.allReduce" && e.pid === op.pid,
        );
        t.truthy(method, "the method that made it, on the same row");
        t.is(method!.tid, op.tid, "on its lane");
        t.true(op.ts! >= method!.ts! && op.ts! + op.dur! <= method!.ts! + method!.dur!, "nested in it");
      }
    } finally {
      await destroyCollectiveGroup(name);
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

for (const W of [1, 2, 3, 4]) {
  test.serial(`actors: allReduce, reduceScatter, allGather and broadcast at world size ${W}`, async (t) => {
    const members = workers.slice(0, W);
    const name = `actors-w${W}`;
    const group = await createCollectiveGroup(members, { name, sliceBytes: 4096 });
    t.is(group.worldSize, W);
    try {
      t.deepEqual(await Promise.all(members.map((m) => m.rank(name))), [...Array(W).keys()]);
      const n = 10_007; // not divisible by 2, 3 or 4
      for (const [dtype, op, tol] of [
        ["Float32Array", "sum", 1e-5],
        ["Float64Array", "mean", 1e-12],
        ["Int32Array", "sum", 0],
        ["Int32Array", "max", 0],
      ] as [DtypeName, ReduceOp, number][]) {
        const want = expectedSum(dtype, n, W, op);
        const res = await Promise.all(members.map((m) => m.allReduce(name, dtype, n, op)));
        for (let r = 0; r < W; r++) {
          t.true(close(res[r]!, want, tol), `allReduce ${dtype} ${op} rank ${r}`);
          t.deepEqual(Array.from(res[r]!), Array.from(res[0]!), "ranks agree bit for bit");
        }
        const rs = await Promise.all(members.map((m) => m.reduceScatter(name, dtype, n, op)));
        for (let r = 0; r < W; r++) {
          const { start, end } = shardRange(n, W, r);
          t.deepEqual(rs[r]!.range, { start, end });
          t.true(close(rs[r]!.shard, want.slice(start, end), tol), `reduceScatter ${dtype} ${op} rank ${r}`);
        }
      }
      const lengths = [3, 0, 1000, 7].slice(0, W);
      const gathered = await Promise.all(
        members.map((m) => m.allGather(name, "Float32Array", lengths, false)),
      );
      const wantG = lengths.flatMap((len, r) =>
        Array.from(new Float32Array(Array.from({ length: len }, (_, i) => valueAt("Float32Array", r, i)))),
      );
      for (let r = 0; r < W; r++) t.deepEqual(Array.from(gathered[r]!), wantG, `allGather rank ${r}`);
      const src = W - 1;
      const b = await Promise.all(members.map((m) => m.broadcast(name, "Int32Array", 999, src)));
      const wantB = Array.from({ length: 999 }, (_, i) => valueAt("Int32Array", src, i));
      for (let r = 0; r < W; r++) t.deepEqual(Array.from(b[r]!), wantB, `broadcast rank ${r}`);
      // FSDP pattern: reduce-scatter then all-gather into a reused buffer.
      const full = await Promise.all(members.map((m) => m.fsdp(name, 3001, 2)));
      const wantF = Array.from({ length: 3001 }, (_, i) => {
        let s = 0;
        for (let r = 0; r < W; r++) s += valueAt("Float64Array", r + 1, i);
        return s;
      });
      for (let r = 0; r < W; r++) t.true(close(full[r]!, wantF, 1e-12), `fsdp rank ${r}`);
    } finally {
      await group.destroy();
    }
    t.deepEqual(await Promise.all(members.map((m) => m.isMember(name))), Array(W).fill(false));
  });
}

test.serial("actors: two groups over overlapping actors work side by side", async (t) => {
  const g1 = await createCollectiveGroup([workers[0]!, workers[1]!, workers[2]!], { name: "left" });
  t.is(g1.worldSize, 3);
  const g2 = await createCollectiveGroup([workers[3]!, workers[2]!], { name: "right", transport: "tcp" });
  try {
    t.is(await workers[2]!.rank("left"), 2);
    t.is(await workers[2]!.rank("right"), 1);
    const [a, b] = await Promise.all([
      Promise.all([0, 1, 2].map((i) => workers[i]!.barrier("left", 3))),
      Promise.all([3, 2].map((i) => workers[i]!.barrier("right", 3))),
    ]);
    t.deepEqual(a, [3, 3, 3]);
    t.deepEqual(b, [2, 2]);
  } finally {
    t.true(await destroyCollectiveGroup("left"));
    await g2.destroy();
  }
});

test.serial(
  "actors: a member that dies between join and connect fails the group at once; the others stop waiting in hello",
  async (t) => {
    const doomed = CollectiveWorkerActor.remote();
    await doomed.ready();
    // Killed exactly between the two steps: the survivor has already sent its hello and waits for
    // the dead rank's, which will never come. Without the creator's cancel it waits out timeoutMs.
    const dying: CollectiveMember = {
      invoke: async (url, fn, args) => {
        if (fn === "connectCollectiveGroup") {
          kill(doomed);
          // kill() lands a moment later: wait until a call fails, so the connect surely does too
          const answers = () =>
            doomed.ready().then(
              () => true,
              () => false,
            );
          for (let i = 0; i < 400 && (await answers()); i++) await new Promise((r) => setTimeout(r, 25));
        }
        return invokeInActor(doomed, url, fn, args);
      },
    };
    const survivor: CollectiveMember = {
      invoke: (url, fn, args) => invokeInActor(workers[0]!, url, fn, args),
    };
    const err = await t.throwsAsync(
      createCollectiveGroupOn([survivor, dying], { name: "half-formed", timeoutMs: 120_000 }),
    );
    t.regex(err!.message, /rank 1 could not connect collective group "half-formed": ActorDiedError/);
    t.false(await workers[0]!.isMember("half-formed"));
  },
);

test.serial("actors: a group with a dead member fails to form with a clear error", async (t) => {
  const doomed = CollectiveWorkerActor.remote();
  await doomed.ready();
  kill(doomed);
  const err = await t.throwsAsync(createCollectiveGroup([workers[0]!, doomed], { name: "doomed" }));
  // kill() takes effect a moment later, so the member fails in the join or in the connect step.
  t.regex(err!.message, /rank 1 could not (join|connect) collective group "doomed": ActorDiedError/);
  // The survivor was cleaned up: the name can be used again.
  t.false(await workers[0]!.isMember("doomed"));
  const g = await createCollectiveGroup([workers[0]!, workers[1]!], { name: "doomed" });
  t.deepEqual(
    await Promise.all([workers[0]!.barrier("doomed", 1), workers[1]!.barrier("doomed", 1)]),
    [2, 2],
  );
  await g.destroy();
});
