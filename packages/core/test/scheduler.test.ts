import test from "ava";
import { addNode, spec, wiredParts } from "./head-parts.fixture.js";

test("an actor goes to the live node with the most free CPU, and that node is told to start its worker", (t) => {
  const { out, nodes, actors } = wiredParts();
  addNode(nodes, "a", { CPU: 2 });
  addNode(nodes, "b", { CPU: 4 });
  actors.create(spec("A", { resources: { CPU: 1 } }), "k");
  t.deepEqual(out.take("startWorker"), [
    {
      to: "b",
      m: {
        t: "startWorker",
        spec: actors.get("A")!.spec,
        incarnation: 0,
        gpuIds: [],
        resources: { CPU: 1 },
        bundleIndex: undefined,
      },
    },
  ]);
  t.like(actors.get("A"), { nodeId: "b", state: "PENDING" });
  t.is(nodes.get("b")!.pool.avail.CPU, 3);
  // b has 3 free, a 2: b again; then both have 2, registration order breaks the tie
  actors.create(spec("B"), "k");
  actors.create(spec("C"), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => s.to),
    ["b", "a"],
  );
});

test("what does not fit now waits, in arrival order, and is placed when resources are freed", (t) => {
  const { out, nodes, actors, scheduler } = wiredParts();
  addNode(nodes, "a", { CPU: 2 });
  actors.create(spec("X", { resources: { CPU: 2 } }), "k");
  actors.create(spec("Y", { resources: { CPU: 2 } }), "k");
  actors.create(spec("Z", { resources: { CPU: 1 } }), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => s.m.spec.actorId),
    ["X"],
  );
  t.deepEqual(scheduler.waiting(), ["Y", "Z"]);
  t.like(actors.get("Y"), { state: "PENDING", nodeId: undefined });
  // X's worker exits: its 2 CPUs go to Y, which came first, and Z still waits
  actors.workerExit({ t: "workerExit", actorId: "X", incarnation: 0, code: 0, signal: null, pid: 1 });
  t.deepEqual(
    out.take("startWorker").map((s) => s.m.spec.actorId),
    ["Y"],
  );
  t.deepEqual(scheduler.waiting(), ["Z"]);
  // a node that joins takes what waits
  addNode(nodes, "b", { CPU: 1 });
  scheduler.schedule();
  t.deepEqual(
    out.take("startWorker").map((s) => [s.to, s.m.spec.actorId, s.m.resources]),
    [["b", "Z", { CPU: 1 }]],
  );
  t.deepEqual(scheduler.waiting(), []);
});

test("what no node can ever provide is refused at creation, naming the request and the nodes", (t) => {
  const { out, nodes, actors, scheduler } = wiredParts();
  actors.create(spec("Early"), "k");
  t.like(actors.get("Early"), { state: "DEAD", cause: { kind: "infeasible" } });
  t.regex(actors.get("Early")!.cause!.message, /\(no nodes\)$/);
  addNode(nodes, "a", { CPU: 2 }, [0]);
  actors.create(spec("Big", { name: "big", resources: { CPU: 1, GPU: 2 } }), "k");
  t.is(
    actors.get("Big")!.cause!.message,
    "A 'big' (Big) requests {CPU: 1, GPU: 2}, which no node in the cluster can ever provide (a: {CPU: 2, GPU: 1})",
  );
  t.deepEqual(out.take("startWorker"), []);
  t.deepEqual(scheduler.waiting(), []);
});

test("GPU requests get GPU ids: whole GPUs are exclusive, fractions share the fullest GPU that has room", (t) => {
  const { out, nodes, actors } = wiredParts();
  addNode(nodes, "a", { CPU: 8 }, [0, 1, 2]);
  actors.create(spec("Whole", { resources: { GPU: 2 } }), "k");
  actors.create(spec("Half1", { resources: { GPU: 0.5 } }), "k");
  actors.create(spec("Half2", { resources: { GPU: 0.5 } }), "k");
  actors.create(spec("One", { resources: { GPU: 1 } }), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => [s.m.spec.actorId, s.m.gpuIds]),
    [
      ["Whole", [0, 1]],
      ["Half1", [2]],
      ["Half2", [2]],
    ],
  );
  t.is(actors.get("One")!.nodeId, undefined, "no whole GPU is free: it waits");
});

test("node affinity: hard goes only to its node and fails when that node cannot hold it; soft falls back", (t) => {
  const { out, nodes, actors } = wiredParts(1000);
  addNode(nodes, "a", { CPU: 1 }, [], 0);
  addNode(nodes, "b", { CPU: 4 }, [], 0);
  actors.create(spec("Hard", { nodeAffinity: { nodeId: "a", soft: false } }), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => s.to),
    ["a"],
    "not b, which has more free CPU",
  );
  actors.create(spec("Unknown", { nodeAffinity: { nodeId: "zz", soft: false } }), "k");
  t.is(
    actors.get("Unknown")!.cause!.message,
    "A (Unknown) has hard affinity to node zz, which is not in the cluster",
  );
  actors.create(spec("TooBig", { resources: { CPU: 2 }, nodeAffinity: { nodeId: "a", soft: false } }), "k");
  t.regex(actors.get("TooBig")!.cause!.message, /which can never provide \{CPU: 2\} \(it has \{CPU: 1\}\)$/);
  actors.create(spec("Soft", { resources: { CPU: 2 }, nodeAffinity: { nodeId: "a", soft: true } }), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => s.to),
    ["b"],
  );

  // a dies: a hard-affine actor restarting there has nowhere to go
  actors.create(spec("Restarts", { maxRestarts: 1, nodeAffinity: { nodeId: "b", soft: false } }), "k");
  nodes.heartbeat("b", 900);
  nodes.expire((n) => actors.nodeDied(n), 1500);
  t.like(actors.get("Hard"), { state: "DEAD", cause: { kind: "node_died" } });
  nodes.expire((n) => actors.nodeDied(n), 2000);
  t.like(actors.get("Restarts"), { state: "DEAD", cause: { kind: "infeasible", nodeId: "b" } });
  t.regex(actors.get("Restarts")!.cause!.message, /hard affinity to node b, which is dead/);
});

test("an actor in a placement group draws from its bundle: the one it names, or the first with room", (t) => {
  const { out, nodes, actors, pgs } = wiredParts();
  addNode(nodes, "a", { CPU: 2 }, [0]);
  addNode(nodes, "b", { CPU: 2 }, [0]);
  const pg = pgs.create({
    t: "createPg",
    pgId: "pg1",
    bundles: [{ CPU: 1, GPU: 1 }, { CPU: 1 }],
    strategy: "STRICT_SPREAD",
    clientId: "driver",
  });
  t.is(pg.state, "CREATED", "it fits: reserved at once");
  t.deepEqual(
    pgs.get("pg1")!.placed!.map((p) => p.nodeId),
    ["a", "b"],
  );
  actors.create(spec("InSecond", { placementGroup: "pg1", bundleIndex: 1 }), "k");
  actors.create(spec("Share1", { placementGroup: "pg1", resources: { CPU: 0.5, GPU: 0.5 } }), "k");
  actors.create(spec("Share2", { placementGroup: "pg1", resources: { CPU: 0.5, GPU: 0.5 } }), "k");
  actors.create(spec("NoRoom", { placementGroup: "pg1", bundleIndex: 1 }), "k");
  t.deepEqual(
    out.take("startWorker").map((s) => [s.m.spec.actorId, s.to, s.m.bundleIndex, s.m.gpuIds]),
    [
      ["InSecond", "b", 1, []],
      ["Share1", "a", 0, [0]],
      ["Share2", "a", 0, [0]],
    ],
  );
  t.is(actors.get("NoRoom")!.state, "PENDING", "its bundle is full: it waits");
  actors.create(spec("TooBig", { placementGroup: "pg1", bundleIndex: 1, resources: { CPU: 2 } }), "k");
  t.is(
    actors.get("TooBig")!.cause!.message,
    "A (TooBig) requests {CPU: 2} but bundle 1 of placement group pg1 holds only {CPU: 1}",
  );
  actors.create(spec("BadIndex", { placementGroup: "pg1", bundleIndex: 2 }), "k");
  t.is(actors.get("BadIndex")!.cause!.message, "bundle index 2 is out of range: the group has 2 bundles");
  actors.create(spec("NoGroup", { placementGroup: "pg-nope" }), "k");
  t.is(actors.get("NoGroup")!.cause!.message, "placement group pg-nope does not exist");

  // the group is removed: its actors are killed, the one waiting for it is DEAD, the nodes get their CPUs back
  pgs.remove("pg1");
  t.deepEqual(
    out.take("killWorker").map((s) => s.m.actorId),
    ["InSecond", "Share1", "Share2"],
  );
  t.like(actors.get("NoRoom"), { state: "DEAD", cause: { kind: "killed" } });
  t.is(nodes.get("a")!.pool.avail.CPU, 2);
  t.is(nodes.get("b")!.pool.avail.CPU, 2);
});
