import test from "ava";
import { ActorDirectory } from "../src/cluster/actor-directory.js";
import { NodeTable } from "../src/cluster/node-table.js";
import { tryAllocate } from "../src/cluster/resources.js";
import { ActorNameTakenError, ActorNotFoundError, ResourceRequestError } from "../src/errors.js";
import type { ActorSpec } from "../src/runtime/protocol.js";
import { addNode, Recorder, spec } from "./head-parts.fixture.js";

/** A directory on node "n1" (4 CPUs) whose scheduler is a recorder: it never places anything itself. */
function directory(infeasible: (s: ActorSpec) => string | null = () => null) {
  const out = new Recorder();
  const nodes = new NodeTable(Number.POSITIVE_INFINITY);
  addNode(nodes, "n1", { CPU: 4 });
  const calls = { enqueued: [] as string[], schedules: 0, workersGone: [] as string[] };
  const actors = new ActorDirectory(nodes, out, {
    infeasible,
    enqueue: (id) => calls.enqueued.push(id),
    schedule: () => calls.schedules++,
    workerGone: (id) => calls.workersGone.push(id),
  });
  /** What the scheduler does once it picks n1: the actor holds `CPU` there. */
  const placeOnN1 = (id: string) => {
    const pool = nodes.get("n1")!.pool;
    const a = actors.get(id)!;
    actors.placed(a, "n1", pool, tryAllocate(pool, a.spec.resources)!);
  };
  const exit = (id: string) =>
    actors.workerExit({
      t: "workerExit",
      actorId: id,
      incarnation: actors.get(id)!.incarnation,
      code: 1,
      signal: null,
      pid: 9,
    });
  return { out, nodes, actors, calls, placeOnN1, exit };
}

test("an actor restarts while it has restarts left (maxRestarts), then is DEAD with the cause", (t) => {
  const { out, nodes, actors, calls, placeOnN1, exit } = directory();
  t.deepEqual(actors.create(spec("A", { maxRestarts: 2 }), "k-driver"), { actorId: "A" });
  t.like(actors.get("A"), { state: "PENDING", incarnation: 0, restartsLeft: 2 });
  t.deepEqual(calls.enqueued, ["A"]);
  placeOnN1("A");
  t.is(nodes.get("n1")!.pool.avail.CPU, 3);
  actors.ready({ t: "actorReady", actorId: "A", incarnation: 0, endpoint: { tcp: "tcp://w:1" }, pid: 9 });
  t.like(out.take("actor")[0]!, { to: "k-driver", m: { state: "ALIVE", incarnation: 0, nodeId: "n1" } });

  exit("A");
  t.like(actors.get("A"), { state: "RESTARTING", incarnation: 1, restartsLeft: 1, endpoint: undefined });
  t.is(nodes.get("n1")!.pool.avail.CPU, 4, "what it held is freed");
  t.deepEqual(calls.enqueued, ["A", "A"], "queued again for placement");
  const restarting = out.take("actor")[0]!.m;
  t.like(restarting, { state: "RESTARTING", incarnation: 1, cause: { kind: "exited" } });
  t.regex(restarting.cause!.message, /exited unexpectedly with code 1; restarting \(1 restarts left\)$/);

  placeOnN1("A");
  exit("A");
  t.like(actors.get("A"), { state: "RESTARTING", incarnation: 2, restartsLeft: 0 });
  t.regex(out.take("actor")[0]!.m.cause!.message, /\(0 restarts left\)$/);

  placeOnN1("A");
  exit("A");
  t.like(actors.get("A"), { state: "DEAD", incarnation: 3 });
  const dead = out.take("actor")[0]!.m;
  t.like(dead, { state: "DEAD", cause: { kind: "exited", exitCode: 1, nodeId: "n1" } });
  t.notRegex(dead.cause!.message, /restarting/);
  t.deepEqual(calls.enqueued, ["A", "A", "A"], "a dead actor is not queued");
  t.is(nodes.get("n1")!.pool.avail.CPU, 4);
  t.deepEqual(
    calls.workersGone,
    ["A", "A", "A", "A"],
    "each worker's end is told (the last twice: gone, then dead)",
  );

  actors.workerExit({ t: "workerExit", actorId: "A", incarnation: 0, code: 1, signal: null, pid: 9 });
  t.deepEqual(out.sent, [], "reports of an older incarnation are ignored");
});

test("maxRestarts < 0 restarts without limit", (t) => {
  const { out, actors, placeOnN1, exit } = directory();
  actors.create(spec("A", { maxRestarts: -1 }), "k");
  for (let i = 1; i <= 5; i++) {
    placeOnN1("A");
    exit("A");
    t.like(actors.get("A"), { state: "RESTARTING", incarnation: i });
  }
  t.regex(out.take("actor").at(-1)!.m.cause!.message, /\(unlimited restarts left\)$/);
});

test("kill() stops the worker on its node and the actor does not restart; one placed nowhere is DEAD at once", (t) => {
  const { out, actors, placeOnN1, exit } = directory();
  actors.create(spec("A", { maxRestarts: 3 }), "k");
  placeOnN1("A");
  actors.kill("A", true);
  t.deepEqual(out.take("killWorker"), [{ to: "n1", m: { t: "killWorker", actorId: "A", incarnation: 0 } }]);
  exit("A");
  t.like(actors.get("A"), { state: "DEAD", cause: { kind: "killed", message: "it was killed by kill()" } });

  actors.create(spec("B", { maxRestarts: 3 }), "k");
  actors.kill("B", true);
  t.like(actors.get("B"), {
    state: "DEAD",
    cause: { kind: "killed", message: "it was killed by kill() before it started" },
  });
  actors.kill("B", true);
  actors.kill("no-such-actor", true);
  t.deepEqual(out.take("killWorker"), [], "killing the dead or the unknown does nothing");

  actors.create(spec("C", { maxRestarts: 1 }), "k");
  placeOnN1("C");
  actors.kill("C", false);
  exit("C");
  t.like(actors.get("C"), { state: "RESTARTING", incarnation: 1 }, "kill without noRestart lets it restart");
});

test("a constructor that throws makes the actor DEAD (no restart) and stops its worker", (t) => {
  const { out, nodes, actors, calls, placeOnN1 } = directory();
  actors.create(spec("A", { maxRestarts: 5 }), "k");
  placeOnN1("A");
  const error = { name: "Error", message: "boom", stack: "at A" };
  actors.failed({ t: "actorFailed", actorId: "A", incarnation: 0, error });
  t.deepEqual(out.take("killWorker"), [{ to: "n1", m: { t: "killWorker", actorId: "A", incarnation: 0 } }]);
  t.like(actors.get("A"), {
    state: "DEAD",
    cause: {
      kind: "creation_failed",
      message: "its constructor threw Error: boom\nat A",
      creationError: error,
    },
  });
  t.is(nodes.get("n1")!.pool.avail.CPU, 4);
  t.is(calls.schedules, 2, "after creation, and after freeing its resources");
});

test("names: a live actor's name is taken; a dead one's is free again; an unknown name is not found", (t) => {
  const { actors, placeOnN1, exit } = directory();
  actors.create(spec("A", { name: "svc" }), "k");
  t.deepEqual(actors.byName("svc"), { actorId: "A", name: "svc" });
  t.throws(() => actors.create(spec("B", { name: "svc" }), "k"), {
    instanceOf: ActorNameTakenError,
    message: "an actor named 'svc' already exists",
  });
  placeOnN1("A");
  exit("A");
  t.throws(() => actors.byName("svc"), {
    instanceOf: ActorNotFoundError,
    message: "no live actor named 'svc'",
  });
  actors.create(spec("B", { name: "svc" }), "k");
  t.is(actors.byName("svc").actorId, "B");
});

test("creation: the same request twice creates one actor; one that can never be placed is DEAD at once; bad resources throw", (t) => {
  const { out, actors, calls } = directory((s) => (s.resources.CPU! > 4 ? "too big for any node" : null));
  actors.create(spec("A"), "k1");
  actors.create(spec("A"), "k2");
  t.deepEqual(calls.enqueued, ["A"]);
  t.deepEqual([...actors.get("A")!.subscribers], ["k1"]);

  actors.create(spec("Big", { resources: { CPU: 8 } }), "k");
  t.like(actors.get("Big"), {
    state: "DEAD",
    cause: { kind: "infeasible", message: "too big for any node" },
  });
  t.deepEqual(calls.enqueued, ["A"]);
  t.like(out.take("actor")[0]!, { to: "k", m: { actorId: "Big", state: "DEAD" } });

  t.throws(() => actors.create(spec("Bad", { resources: { CPU: -1 } }), "k"), {
    instanceOf: ResourceRequestError,
  });
  t.is(actors.get("Bad"), undefined);
});

test("a subscriber is sent the news so far, then each change; an unknown actor reads as DEAD", (t) => {
  const { out, actors, placeOnN1 } = directory();
  actors.create(spec("A"), "k1");
  placeOnN1("A");
  actors.subscribe("A", "k2");
  t.deepEqual(out.take("actor"), [
    {
      to: "k2",
      m: {
        t: "actor",
        actorId: "A",
        name: undefined,
        state: "PENDING",
        incarnation: 0,
        endpoint: undefined,
        nodeId: "n1",
        cause: undefined,
      },
    },
  ]);
  actors.ready({ t: "actorReady", actorId: "A", incarnation: 0, endpoint: { tcp: "tcp://w:1" }, pid: 9 });
  t.deepEqual(
    out.take("actor").map((s) => [s.to, s.m.state]),
    [
      ["k1", "ALIVE"],
      ["k2", "ALIVE"],
    ],
  );
  actors.subscribe("nope", "k3");
  t.like(out.take("actor")[0]!, {
    to: "k3",
    m: { actorId: "nope", state: "DEAD", cause: { kind: "unknown" } },
  });
});

test("an owner that is gone takes its actors with it, detached ones excepted", (t) => {
  const { actors, placeOnN1, exit } = directory();
  actors.create(spec("A", { ownerClientId: "c1", maxRestarts: 3 }), "k");
  actors.create(spec("D", { ownerClientId: "c1", detached: true }), "k");
  actors.create(spec("X", { ownerClientId: "c2" }), "k");
  placeOnN1("A");
  actors.killOwnedBy("c1", {
    kind: "owner_died",
    message: "its owner (pid 1) is gone: it called shutdown()",
  });
  exit("A");
  t.like(actors.get("A"), {
    state: "DEAD",
    cause: { kind: "owner_died", message: "its owner (pid 1) is gone: it called shutdown()" },
  });
  t.is(actors.get("D")!.state, "PENDING");
  t.is(actors.get("X")!.state, "PENDING");
});

test("a dead node's actors restart if they may, else die with node_died; its placement group's actors die with it", (t) => {
  const { nodes, actors, calls, placeOnN1 } = directory();
  actors.create(spec("R", { maxRestarts: 1 }), "k");
  actors.create(spec("D"), "k");
  actors.create(spec("G", { placementGroup: "pg1" }), "k");
  actors.create(spec("Elsewhere"), "k");
  for (const id of ["R", "D"]) placeOnN1(id);
  actors.nodeDied(nodes.get("n1")!);
  t.like(actors.get("R"), { state: "RESTARTING", cause: { kind: "node_died", nodeId: "n1" } });
  t.like(actors.get("D"), { state: "DEAD", cause: { kind: "node_died", nodeId: "n1" } });
  t.regex(actors.get("D")!.cause!.message, /its node n1 \(ip-of-n1\) stopped sending heartbeats/);
  t.is(actors.get("Elsewhere")!.state, "PENDING", "placed nowhere: not on that node");
  t.deepEqual(calls.enqueued, ["R", "D", "G", "Elsewhere", "R"]);

  actors.killInGroup("pg1");
  t.like(actors.get("G"), { state: "DEAD", killed: true });
  t.is(actors.get("Elsewhere")!.state, "PENDING");
});
