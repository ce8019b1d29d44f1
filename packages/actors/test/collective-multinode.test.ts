// A collective group spanning two node agents (127.0.0.1 and 127.0.0.2): the ring runs over TCP
// between the actor processes of both nodes; the head only sees the rendezvous.
import { createCollectiveGroup, init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { CollectiveWorkerActor, valueAt } from "./collective.fixture.js";
import { CliCluster } from "./fixtures/cli-cluster.js";

const cluster = new CliCluster("torl-coll-multinode-");

test.after.always(async () => {
  await shutdown();
  await cluster.stop();
});

test("allReduce and reduceScatter across two nodes over TCP, data not through the head", async (t) => {
  const { head, node2 } = await cluster.startTwoNodes(
    { numCpus: 2, resources: { one: 2 } },
    { numCpus: 2, resources: { two: 2 } },
  );
  process.env.TORL_NO_IPC = "1";
  await init({ address: head.address });
  // Alternate nodes so every ring hop crosses between 127.0.0.1 and 127.0.0.2.
  const members = [
    CollectiveWorkerActor.options({ resources: { one: 1 } }).remote(),
    CollectiveWorkerActor.options({ resources: { two: 1 } }).remote(),
    CollectiveWorkerActor.options({ resources: { one: 1 } }).remote(),
    CollectiveWorkerActor.options({ resources: { two: 1 } }).remote(),
  ];
  const t0 = Date.now();
  await Promise.all(members.map((m) => m.ready()));
  const t1 = Date.now();
  const group = await createCollectiveGroup(members, { name: "cross", transport: "tcp" });
  t.log(`actors ready in ${t1 - t0} ms, group formed in ${Date.now() - t1} ms`);
  const where = await Promise.all(members.map((m) => m.describe("cross")));
  t.deepEqual(
    where.map((w) => w.nodeId),
    [head.nodeId, node2.nodeId, head.nodeId, node2.nodeId],
  );
  for (const [rank, w] of where.entries()) {
    t.is(w.rank, rank);
    const tcp = w.address.tcp ?? "";
    t.true(tcp.startsWith(rank % 2 === 0 ? "tcp://127.0.0.1:" : "tcp://127.0.0.2:"), tcp);
    t.is(w.next, where[(rank + 1) % 4]!.address.tcp ?? "");
  }

  const before = JSON.parse(await cluster.torl("status", "--json")).bytesReceived;
  const n = (1 << 18) + 3; // 1 MiB of Float32, length not divisible by 4
  const res = await Promise.all(members.map((m) => m.allReduce("cross", "Float32Array", n, "sum")));
  for (const i of [0, 1, 12345, n - 1]) {
    const want = [0, 1, 2, 3].reduce((s, r) => s + Math.fround(valueAt("Float32Array", r, i)), 0);
    for (const r of res) t.true(Math.abs(r[i]! - want) < 1e-4, `element ${i}: ${r[i]} vs ${want}`);
  }
  const rs = await Promise.all(members.map((m) => m.reduceScatter("cross", "Int32Array", n, "max")));
  t.deepEqual(
    rs.map((r) => r.range),
    [
      { start: 0, end: 65537 },
      { start: 65537, end: 131074 },
      { start: 131074, end: 196611 },
      { start: 196611, end: n },
    ],
  );
  for (const [rank, r] of rs.entries()) {
    const i = r.range.start + 7;
    t.is(r.shard[7], Math.max(...[0, 1, 2, 3].map((q) => valueAt("Int32Array", q, i))), `rank ${rank}`);
  }
  t.log(`collectives done ${Date.now() - t1} ms after the group formed`);
  const after = JSON.parse(await cluster.torl("status", "--json")).bytesReceived;
  t.true(after - before < 1 << 20, `the head received ${after - before} bytes while the ring moved ~12 MiB`);
  await group.destroy();
});
