import test from "ava";
import type { PlacementGroupStatus } from "../src/cluster/messages.js";
import { NodeTable } from "../src/cluster/node-table.js";
import { PlacementGroups } from "../src/cluster/placement-groups.js";
import type { Resources } from "../src/cluster/resources.js";
import { InfeasibleResourceError, PlacementGroupError, ResourceRequestError } from "../src/errors.js";
import type { PlacementStrategy } from "../src/runtime/protocol.js";
import { addNode } from "./head-parts.fixture.js";

/** Placement groups on nodes a and b (4 CPUs, GPUs 0 and 1 each); the hooks are recorded. */
function groups() {
  const nodes = new NodeTable(1000);
  addNode(nodes, "a", { CPU: 4 }, [0, 1], 0);
  addNode(nodes, "b", { CPU: 4 }, [0, 1], 0);
  const calls = { schedules: 0, killed: [] as string[] };
  const pgs = new PlacementGroups(nodes, {
    schedule: () => calls.schedules++,
    killActorsIn: (pgId) => calls.killed.push(pgId),
  });
  const create = (pgId: string, bundles: Resources[], strategy?: PlacementStrategy, clientId = "driver") =>
    pgs.create({ t: "createPg", pgId, bundles, strategy, clientId });
  const free = () => [nodes.get("a")!.pool.avail.CPU, nodes.get("b")!.pool.avail.CPU];
  return { nodes, pgs, calls, create, free };
}

test("each strategy reserves its bundles as implemented: PACK on one node, SPREAD across, STRICT_* or nothing", (t) => {
  const cases: Array<[PlacementStrategy | undefined, Resources[], string[], number[]]> = [
    // [strategy, bundles, the node of each bundle, free CPU on a and b after]
    [undefined, [{ CPU: 1 }, { CPU: 2 }], ["a", "a"], [1, 4]],
    ["PACK", [{ CPU: 3 }, { CPU: 3 }], ["a", "b"], [1, 1]],
    ["STRICT_PACK", [{ CPU: 2 }, { CPU: 2 }], ["a", "a"], [0, 4]],
    ["SPREAD", [{ CPU: 1 }, { CPU: 1 }, { CPU: 1 }], ["a", "b", "a"], [2, 3]],
    ["STRICT_SPREAD", [{ CPU: 1 }, { CPU: 1 }], ["a", "b"], [3, 3]],
  ];
  for (const [strategy, bundles, where, after] of cases) {
    const { pgs, create, free } = groups();
    const created = create("g", bundles, strategy);
    t.like(created, { state: "PENDING", strategy: strategy ?? "PACK", bundleNodes: null });
    pgs.placePending();
    t.like(pgs.wait("g", undefined), { state: "CREATED", bundleNodes: where }, String(strategy));
    t.deepEqual(free(), after, "the nodes' pools hold the reservations");
  }
});

test("a group that can never be placed is INFEASIBLE at once, naming the cluster; waiting on it throws", (t) => {
  const { pgs, create, calls } = groups();
  const strictSpread = create("ss", [{ CPU: 1 }, { CPU: 1 }, { CPU: 1 }], "STRICT_SPREAD");
  t.is(strictSpread.state, "INFEASIBLE");
  t.is(
    strictSpread.error,
    "placement group ss (STRICT_SPREAD, bundles {CPU: 1}, {CPU: 1}, {CPU: 1}) can never be placed on this cluster (a: {CPU: 4, GPU: 2}; b: {CPU: 4, GPU: 2})",
  );
  t.is(create("sp", [{ CPU: 3 }, { CPU: 3 }], "STRICT_PACK").state, "INFEASIBLE");
  t.is(create("p", [{ CPU: 3 }, { CPU: 3 }], "PACK").state, "PENDING", "PACK may use several nodes");
  t.is(create("gpu", [{ GPU: 3 }]).state, "INFEASIBLE");
  t.throws(() => pgs.wait("ss", () => {}), {
    instanceOf: InfeasibleResourceError,
    message: strictSpread.error,
  });
  t.is(calls.schedules, 1, "only the feasible group asks for scheduling");
});

test("a group that does not fit yet waits; its waiters are told when it is placed", (t) => {
  const { pgs, create, free } = groups();
  create("big", [{ CPU: 4 }, { CPU: 4 }], "STRICT_SPREAD");
  pgs.placePending();
  const told: Array<PlacementGroupStatus | Error> = [];
  t.is(create("late", [{ CPU: 1 }]).state, "PENDING");
  pgs.placePending();
  t.is(
    pgs.wait("late", (r) => told.push(r)),
    null,
    "pending: answered later",
  );
  t.throws(() => pgs.wait("late", undefined), {
    message: "waitPg is a request: it needs a rid to be answered",
  });
  pgs.remove("big");
  t.deepEqual(told, [], "freed, but only the next scheduling pass places it");
  pgs.placePending();
  t.like(told, [{ pgId: "late", state: "CREATED", bundleNodes: ["a"] }]);
  t.deepEqual(free(), [3, 4]);
});

test("removing a group kills its actors, frees its reservations, fails its waiters, and asks for scheduling", (t) => {
  const { nodes, pgs, create, calls, free } = groups();
  create("g", [{ CPU: 2, GPU: 1 }, { CPU: 2 }], "SPREAD");
  pgs.placePending();
  t.deepEqual(free(), [2, 2]);
  t.deepEqual(
    pgs.get("g")!.placed!.map((p) => p.alloc.gpus),
    [[[0, 1]], []],
  );
  create("w", [{ CPU: 4 }, { CPU: 4 }]);
  const told: Array<PlacementGroupStatus | Error> = [];
  pgs.wait("w", (r) => told.push(r));
  const before = calls.schedules;
  pgs.remove("g");
  pgs.remove("w");
  t.deepEqual(calls.killed, ["g", "w"]);
  t.deepEqual(free(), [4, 4]);
  t.deepEqual(
    [...nodes.get("a")!.pool.gpuFree],
    [
      [0, 1],
      [1, 1],
    ],
  );
  t.is(calls.schedules, before + 2);
  t.is(told.length, 1);
  t.true(told[0] instanceof PlacementGroupError);
  t.is((told[0] as Error).message, "it was removed");
  pgs.remove("g");
  t.deepEqual(calls.killed, ["g", "w"], "removing twice does nothing more");
  t.throws(() => pgs.wait("g", () => {}), { instanceOf: PlacementGroupError, message: "it was removed" });
  t.throws(() => pgs.wait("nope", () => {}), {
    instanceOf: PlacementGroupError,
    message: "no placement group nope",
  });
});

test("a group owned by a client that is gone is removed; a node death makes groups with bundles there INFEASIBLE", (t) => {
  const { nodes, pgs, create } = groups();
  create("mine", [{ CPU: 1 }], "PACK", "c1");
  create("theirs", [{ CPU: 1 }], "PACK", "c2");
  create("across", [{ CPU: 1 }, { CPU: 1 }], "STRICT_SPREAD", "c2");
  pgs.placePending();
  pgs.removeOwnedBy("c1");
  t.is(pgs.get("mine")!.state, "REMOVED");
  t.is(pgs.get("theirs")!.state, "CREATED");
  nodes.heartbeat("a", 900);
  nodes.expire((n) => pgs.nodeDied(n.nodeId), 1500);
  t.is(pgs.get("theirs")!.state, "CREATED", "its bundle is on a");
  t.like(pgs.get("across"), { state: "INFEASIBLE", error: "node b holding some of its bundles died" });
  t.throws(() => pgs.wait("across", () => {}), { instanceOf: InfeasibleResourceError });
});

test("bad requests are refused by name; the same pgId again returns the existing group", (t) => {
  const { pgs, create } = groups();
  t.throws(() => create("e", []), { message: "a placement group needs at least one bundle" });
  t.throws(() => create("m", [{ CPU: -1 }]), { instanceOf: ResourceRequestError });
  t.throws(() => create("s", [{ CPU: 1 }], "DIAGONAL" as PlacementStrategy), {
    message: "unknown placement strategy 'DIAGONAL'; one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD",
  });
  t.is(pgs.all().length, 0);
  const first = create("g", [{ CPU: 1 }]);
  pgs.placePending();
  t.like(create("g", [{ CPU: 2 }, { CPU: 2 }], "SPREAD"), {
    pgId: "g",
    state: "CREATED",
    bundles: first.bundles,
  });
  t.is(pgs.all().length, 1);
  t.regex(pgs.create({ t: "createPg", bundles: [{ CPU: 1 }], clientId: "d" }).pgId, /^pg-/);
});
