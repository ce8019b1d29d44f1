import test from "ava";
import { DECLARED_DEAD, type HeadNode, NodeTable } from "../src/cluster/node-table.js";
import { addNode } from "./head-parts.fixture.js";

test("a node registers with its resources; its GPUs are its GPU ids, whatever GPU amount it declares", (t) => {
  const nodes = new NodeTable(3000);
  t.deepEqual(addNode(nodes, "a", { CPU: 4, GPU: 8, disk: 1 }, [0, 1]), { nodeId: "a", nodeTimeoutMs: 3000 });
  const a = nodes.get("a")!;
  t.deepEqual(a.pool.total, { CPU: 4, disk: 1, GPU: 2 });
  t.deepEqual(
    [...a.pool.gpuFree],
    [
      [0, 1],
      [1, 1],
    ],
  );
  t.true(a.alive);
  t.is(nodes.size, 1);
});

test("a node silent past the timeout is declared dead once; its later heartbeats are told to shut down", (t) => {
  const nodes = new NodeTable(1000);
  addNode(nodes, "a", { CPU: 1 }, [], 0);
  addNode(nodes, "b", { CPU: 1 }, [], 0);
  t.deepEqual(nodes.heartbeat("a", 500), { t: "nodeHeartbeatAck" });
  const dead: string[] = [];
  const onDead = (n: HeadNode) => dead.push(n.nodeId);
  nodes.expire(onDead, 1000);
  t.deepEqual(dead, [], "silent for exactly the timeout is not yet dead");
  nodes.expire(onDead, 1001);
  t.deepEqual(dead, ["b"], "a beat at 500");
  nodes.expire(onDead, 1501);
  t.deepEqual(dead, ["b", "a"]);
  nodes.expire(onDead, 60_000);
  t.deepEqual(dead, ["b", "a"], "a dead node is not declared dead again");
  t.deepEqual(
    nodes.alive().map((n) => n.nodeId),
    [],
  );
  t.is(nodes.all().length, 2, "dead nodes stay in the table");
  const answer = nodes.heartbeat("a", 60_001);
  t.is(answer, DECLARED_DEAD);
  t.like(answer, { t: "shutdown" });
  t.regex((answer as { reason: string }).reason, /may not rejoin/);
  t.false(nodes.get("a")!.alive, "a heartbeat does not revive it");
  t.is(nodes.heartbeat("never-registered"), null, "an unknown node gets no answer");
});

test("silent nodes are declared dead one at a time: the first one's loss is handled before the next is looked at", (t) => {
  const nodes = new NodeTable(10);
  addNode(nodes, "a", { CPU: 1 }, [], 0);
  addNode(nodes, "b", { CPU: 1 }, [], 0);
  const seen: string[] = [];
  nodes.expire((n) => seen.push(`${n.nodeId} dead; b alive: ${nodes.get("b")!.alive}`), 100);
  t.deepEqual(seen, ["a dead; b alive: true", "b dead; b alive: false"]);
});

test("with an infinite timeout no node ever expires", (t) => {
  const nodes = new NodeTable(Number.POSITIVE_INFINITY);
  addNode(nodes, "a", { CPU: 1 }, [], 0);
  nodes.expire(() => t.fail("expired"), Number.MAX_SAFE_INTEGER);
  t.true(nodes.get("a")!.alive);
});

test("a driver finds the first live node at its IP; describe names the live nodes and what they hold", (t) => {
  const nodes = new NodeTable(10);
  t.is(nodes.describe(), "no nodes");
  addNode(nodes, "a", { CPU: 2 }, [0], 0);
  addNode(nodes, "b", { CPU: 4 }, [], 50);
  t.is(nodes.at("ip-of-a"), "a");
  t.is(nodes.at("elsewhere"), undefined);
  t.is(nodes.describe(), "a: {CPU: 2, GPU: 1}; b: {CPU: 4}");
  nodes.expire(() => {}, 20);
  t.is(nodes.at("ip-of-a"), undefined, "a is dead");
  t.is(nodes.describe(), "b: {CPU: 4}");
});
