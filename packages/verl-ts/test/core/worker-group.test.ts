import { ActorDiedError, getCollectiveGroup, init, RemoteError, shutdown } from "@torl-ts/actors";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { DataProto } from "../../src/protocol/index.js";
import {
  type BoundGroup,
  DispatchError,
  ResourcePool,
  WorkerGroup,
  WorkerStartTimeoutError,
  workerRole,
} from "../../src/single-controller/index.js";
import { ActorRolloutRefWorker, type ShardInfo } from "../../src/workers/index.js";
import {
  BrokenRole,
  DoublerWorker,
  ShouterWorker,
  ToyActorRole,
  ToyRolloutRole,
} from "../fixtures/core/workers.js";
import { tinyModelDir } from "../workers/helpers.js";

const FIXTURES = { module: new URL("../fixtures/core/workers.ts", import.meta.url).href };

let doublers: BoundGroup<typeof DoublerWorker>;
let gpuPool: ResourcePool;

test.before(async () => {
  // GPUs are declared so that bundle scheduling and CUDA_VISIBLE_DEVICES are testable without GPUs.
  await init({ numCpus: 8, numGpus: 4 });
  gpuPool = new ResourcePool({ processOnNodes: [2], useGpu: true });
  doublers = await WorkerGroup.create(gpuPool, workerRole(DoublerWorker, FIXTURES, 3), {
    name: "doublers",
    collective: true,
  });
});

test.after.always(async () => {
  await shutdown();
});

function batch(n: number): DataProto {
  return DataProto.fromDict(
    { x: { data: Float32Array.from({ length: n * 2 }, (_, i) => i), shape: [n, 2] } },
    { uid: Array.from({ length: n }, (_, i) => `u${i}`) },
  );
}

test("each rank knows its rank, world size, group and its own GPU; one process per bundle", async (t) => {
  const infos = await doublers.describe("hi");
  t.is(infos.length, 2);
  t.deepEqual(
    infos.map((i) => [i.tag, i.rank, i.worldSize, i.localRank, i.nodeRank, i.group]),
    [
      ["hi", 0, 2, 0, 0, "doublers"],
      ["hi", 1, 2, 1, 0, "doublers"],
    ],
  );
  t.not(infos[0]!.pid, infos[1]!.pid);
  t.not(infos[0]!.pid, process.pid);
  const gpus = infos.map((i) => i.cuda);
  t.true(
    gpus.every((g: string | null) => typeof g === "string" && /^\d+$/.test(g)),
    `one GPU each: ${gpus}`,
  );
  t.not(gpus[0], gpus[1]);
});

test("model workers on declared GPUs: each process sees its own GPU and reports the backend it computes on", async (t) => {
  const config = loadTrainerConfig({
    values: { actor_rollout_ref: { model: { path: tinyModelDir() } }, trainer: { n_gpus_per_node: 2 } },
  });
  const pool = new ResourcePool({ processOnNodes: [2], useGpu: true, namePrefix: "gpu-actors" });
  const wg = (await WorkerGroup.create(
    pool,
    workerRole(
      ActorRolloutRefWorker,
      { module: new URL("../../src/workers/actor-rollout-ref.ts", import.meta.url).href },
      { config },
    ),
    { name: "gpu-actors", collective: true, env: { TORL_BACKEND: "cpu" } },
  )) as BoundGroup<typeof ActorRolloutRefWorker>;
  try {
    const infos = (await wg.initModel()) as ShardInfo[];
    const facts = await wg.workerInfo();
    t.deepEqual(
      infos.map((i) => [i.rank, i.backend]),
      [
        [0, "cpu"],
        [1, "cpu"],
      ],
      "each worker computes on the backend its environment asks for",
    );
    t.deepEqual(
      infos.map((i) => i.pid),
      facts.map((f) => f.pid),
      "the ranks are the processes the facts describe",
    );
    const gpus = facts.map((f) => f.cudaVisibleDevices);
    t.true(
      gpus.every((g) => typeof g === "string" && /^\d+$/.test(g)),
      `one GPU each: ${gpus}`,
    );
    t.not(gpus[0], gpus[1]);
  } finally {
    await wg.shutdown();
    await pool.release();
  }
});

test("DP_COMPUTE_PROTO pads to the world size, chunks, concatenates back and strips the padding", async (t) => {
  const out: DataProto = await doublers.double(batch(5));
  t.true(out instanceof DataProto);
  t.is(out.length, 5);
  t.deepEqual(Array.from(out.tensor("y").data), [0, 3, 6, 9, 12, 15, 18, 21, 24, 27]);
  t.deepEqual(out.tensor("y").shape, [5, 2]);
  t.deepEqual(out.column("uid"), ["u0", "u1", "u2", "u3", "u4"]);
  // 5 rows padded to 6: rows 0-2 on rank 0, rows 3-4 (+ the pad row) on rank 1
  t.deepEqual(out.column("rank"), [0, 0, 0, 1, 1]);
  t.is(out.metaInfo.fromRank, 0);
  const even: DataProto = await doublers.double(batch(4));
  t.deepEqual(even.column("rank"), [0, 0, 1, 1]);
});

test("DataProto tensors reach the workers as typed arrays of the chunk's size", async (t) => {
  const n = 4096;
  const big = DataProto.fromDict({
    x: { data: new Float32Array(n * 64), shape: [n, 64] },
    ids: { data: new Int32Array(n * 8), shape: [n, 8] },
  });
  t.deepEqual(await doublers.tensorKinds(big), [
    [`x:Float32Array:${(n / 2) * 64}`, `ids:Int32Array:${(n / 2) * 8}`],
    [`x:Float32Array:${(n / 2) * 64}`, `ids:Int32Array:${(n / 2) * 8}`],
  ]);
});

test("DP_COMPUTE_METRIC splits a DataProto and returns the per-rank outputs", async (t) => {
  t.deepEqual(await doublers.rowCount(batch(7)), [4, 4]);
});

test("ALL_TO_ALL gives rank r the r-th entry of each argument and checks the list length", async (t) => {
  t.deepEqual(await doublers.addRank([10, 20]), [10, 21]);
  await t.throwsAsync(doublers.addRank([1, 2, 3]), {
    instanceOf: DispatchError,
    message: /argument 0 must be a list with one entry per rank \(2\), got a list of 3/,
  });
});

test("RANK_ZERO dispatch and the RANK_ZERO execute mode run on rank 0 only", async (t) => {
  t.is(await doublers.onlyRankZero("v"), "v@0");
  t.is(await doublers.saveCheckpoint("/tmp/ck"), "rank 0 saved /tmp/ck");
});

test("the ranks form a collective group: allReduce inside the workers sums across ranks", async (t) => {
  t.deepEqual(await doublers.allReduceRank(), [
    [3, 20],
    [3, 20],
  ]);
});

test("a remote error comes back as RemoteError naming the error; unregistered methods are not bound", async (t) => {
  const e = await t.throwsAsync(doublers.fail("boom"), { instanceOf: RemoteError });
  t.regex(e!.message, /^doublers rank \d default\.fail: .*boom on rank \d/);
  t.is((e as any).workerMethod, "fail");
  t.false("notRegistered" in doublers);
  t.deepEqual(await doublers.executeAll("notRegistered"), ["hidden", "hidden"]);
  await t.throwsAsync(doublers.call("nope"), {
    message: /"nope" is not a registered method of group doublers/,
  });
});

test("methods registered by mode name and with a custom dispatch mode; a CPU-only pool", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [3], useGpu: false });
  const wg = await WorkerGroup.create(pool, workerRole(ShouterWorker, FIXTURES));
  try {
    t.is(wg.worldSize, 3);
    t.is(await wg.shout("one two three"), "ONE TWO THREE");
    const infos = await wg.workerInfo();
    t.true(infos.every((i) => i.cudaVisibleDevices === undefined || i.cudaVisibleDevices === ""));
  } finally {
    await wg.shutdown();
    await pool.release();
  }
});

test("colocated roles share one process per bundle; spawnRoles gives a group per role", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [2], useGpu: true });
  const wg = await WorkerGroup.createColocated(pool, {
    actor: workerRole(ToyActorRole, FIXTURES),
    rollout: workerRole(ToyRolloutRole, FIXTURES, 0.5),
  });
  try {
    const { actor, rollout } = wg.spawnRoles();
    const actorPids = await actor.setWeight(10);
    const rolloutPids = await rollout.pid();
    t.deepEqual(actorPids, rolloutPids, "both roles live in the same processes");
    const prompts = DataProto.fromDict({ input_ids: { data: new Int32Array(4), shape: [4, 1] } });
    const out: DataProto = await rollout.generateSequences(prompts);
    // the rollout reads the weight the actor role set in its own process: 10 + rank + 0.5
    t.deepEqual(Array.from(out.tensor("responses").data), [10.5, 10.5, 11.5, 11.5]);
    t.true(wg.methodNames().includes("rollout_generateSequences"), "the colocated group binds role_method");
    const viaPrefix = await wg.call("rollout_generateSequences", prompts);
    t.true(viaPrefix instanceof DataProto && viaPrefix.length === 4);
  } finally {
    await wg.shutdown();
    await pool.release();
  }
});

test("a worker that dies mid-call fails the call with ActorDiedError naming the group, rank and method", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [2], useGpu: false });
  const wg = await WorkerGroup.create(pool, workerRole(DoublerWorker, FIXTURES, 1), { name: "mortal" });
  try {
    const e = await t.throwsAsync(wg.exitOn(1), { instanceOf: ActorDiedError });
    t.is((e as any).workerRank, 1);
    t.regex(e!.message, /^mortal rank 1 default\.exitOn: /);
  } finally {
    await wg.shutdown();
    await pool.release();
  }
});

test("a role whose constructor throws fails the group's creation with the remote error", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [1], useGpu: false });
  const e = await t.throwsAsync(WorkerGroup.create(pool, workerRole(BrokenRole, FIXTURES)));
  t.regex(e!.message, /cannot start this role/);
  await pool.release();
});

test("shutdown removes the group's collective group: the same name can be created again", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [2], useGpu: false });
  const make = () =>
    WorkerGroup.create(pool, workerRole(DoublerWorker, FIXTURES, 1), { name: "again", collective: true });
  const first = await make();
  t.truthy(getCollectiveGroup("again-collective"));
  await first.shutdown();
  t.is(getCollectiveGroup("again-collective"), undefined);
  const second = await make();
  try {
    t.is((await second.describe("x")).length, 2);
  } finally {
    await second.shutdown();
    await pool.release();
  }
});

test("workers that do not start in time (trainer.ray_wait_register_center_timeout) fail with a typed error", async (t) => {
  const pool = new ResourcePool({ processOnNodes: [1], useGpu: false });
  try {
    // a worker process cannot start and register in a millisecond
    const e = await t.throwsAsync(
      WorkerGroup.create(pool, workerRole(ShouterWorker, FIXTURES), { name: "slow", readyTimeoutMs: 1 }),
      { instanceOf: WorkerStartTimeoutError },
    );
    t.regex(
      e!.message,
      /the slow workers did not all start within 0\.001 s: .*trainer\.ray_wait_register_center_timeout/,
    );
    // with time to start, the same group comes up
    const wg = await WorkerGroup.create(pool, workerRole(ShouterWorker, FIXTURES), {
      readyTimeoutMs: 300_000,
    });
    t.is(await wg.shout("up"), "UP");
    await wg.shutdown();
  } finally {
    await pool.release();
  }
});

test("a worker keeps the memory it frees for its next buffers, unless the group's env sets malloc's own", async (t) => {
  // 64 MiB is past glibc's largest default mmap threshold (32 MiB): by default each such buffer is
  // new memory from the kernel, faulted in page by page when written
  const kept = await doublers.refaults(64);
  t.true(
    kept.every((perMib: number) => perMib < 16),
    `faults per MiB written into a reused buffer: ${kept}`,
  );
  const pool = new ResourcePool({ processOnNodes: [1], useGpu: false });
  try {
    const wg = await WorkerGroup.create(pool, workerRole(DoublerWorker, FIXTURES, 1), {
      env: { MALLOC_MMAP_THRESHOLD_: String(2 ** 20) },
    });
    const returned = (await wg.refaults(64))[0]!;
    t.true(returned > 128, `faults per MiB with a 1 MiB threshold: ${returned}`);
    await wg.shutdown();
  } finally {
    await pool.release();
  }
});
