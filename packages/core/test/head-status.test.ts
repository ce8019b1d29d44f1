import test from "ava";
import { ClientTable } from "../src/cluster/clients.js";
import { clusterStatus, resourceTotals } from "../src/cluster/status.js";
import { addNode, hello, spec, wiredParts } from "./head-parts.fixture.js";

test("the resource totals sum the live nodes: all they have and what is free", (t) => {
  const { nodes, actors } = wiredParts(1000);
  t.deepEqual(resourceTotals(nodes), { total: {}, available: {}, nodes: 0 });
  addNode(nodes, "a", { CPU: 4, disk: 2 }, [0, 1], 0);
  addNode(nodes, "b", { CPU: 2 }, [], 0);
  actors.create(spec("A", { resources: { CPU: 1, GPU: 0.5 } }), "k");
  t.deepEqual(resourceTotals(nodes), {
    total: { CPU: 6, disk: 2, GPU: 2 },
    available: { CPU: 5, disk: 2, GPU: 1.5 },
    nodes: 2,
  });
  nodes.heartbeat("a", 900);
  nodes.expire(() => {}, 1500);
  t.deepEqual(
    resourceTotals(nodes),
    { total: { CPU: 4, disk: 2, GPU: 2 }, available: { CPU: 3, disk: 2, GPU: 1.5 }, nodes: 1 },
    "b is dead",
  );
});

test("the status lists every node, actor and group the head knows, dead ones included", (t) => {
  const { nodes, actors, pgs } = wiredParts(1000);
  const clients = new ClientTable();
  clients.hello(hello("c"), "k");
  addNode(nodes, "a", { CPU: 2 }, [0], 0);
  addNode(nodes, "b", { CPU: 1 }, [], 0);
  pgs.create({ t: "createPg", pgId: "g", bundles: [{ CPU: 1 }], clientId: "c" });
  actors.create(spec("A", { name: "named", resources: { GPU: 0.25 } }), "k");
  actors.create(
    spec("T", { className: null, nodeAffinity: { nodeId: "b", soft: true }, resources: {} }),
    "k",
  );
  nodes.heartbeat("a", 900);
  nodes.expire((n) => actors.nodeDied(n), 1500);
  const status = clusterStatus(
    { address: "h:1", listen: "127.0.0.1", startedAt: 0, bytesReceived: 12, nodes, actors, pgs, clients },
    2600,
  );
  t.like(status, {
    address: "h:1",
    uptimeS: 3,
    clients: 1,
    bytesReceived: 12,
    security: { mode: "none", listen: "127.0.0.1" },
  });
  t.is(status.nodes.length, 2);
  t.deepEqual(status.nodes[0], {
    nodeId: "a",
    ip: "ip-of-a",
    alive: true,
    pid: 100,
    total: { CPU: 2, GPU: 1 },
    available: { CPU: 1, GPU: 0.75 },
    gpus: { 0: 0.75 },
  });
  t.like(
    status.nodes[1],
    { nodeId: "b", alive: false, total: { CPU: 1, GPU: 0 }, gpus: {} },
    "dead nodes are listed",
  );
  t.like(status.actors, [
    {
      actorId: "A",
      name: "named",
      className: "A",
      state: "PENDING",
      nodeId: "a",
      resources: { GPU: 0.25 },
      restarts: 0,
    },
    {
      actorId: "T",
      className: "(task executor)",
      state: "DEAD",
      nodeId: undefined,
      nodeAffinity: { nodeId: "b", soft: true },
      cause: "its node b (ip-of-b) stopped sending heartbeats",
    },
  ]);
  t.like(status.placementGroups, [{ pgId: "g", state: "CREATED", bundleNodes: ["a"], bundleGpus: [[]] }]);
});
