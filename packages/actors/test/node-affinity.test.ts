// Node affinity (Ray's NodeAffinitySchedulingStrategy, hard and soft) on a head and a second node
// agent on 127.0.0.2; node ids in the runtime context and in `torl status --json`.
import {
  ActorDiedError,
  get,
  getRuntimeContext,
  InfeasibleResourceError,
  init,
  NodeAffinitySchedulingStrategy,
  placementGroup,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { CliCluster } from "./fixtures/cli-cluster.js";
import { ProbeActor, whereAmITask } from "./fixtures/values.js";

const cluster = new CliCluster("torl-affinity-", { TORL_NODE_TIMEOUT_MS: "1500" });

test.after.always(async () => {
  await shutdown();
  await cluster.stop();
});

test("actors and tasks go to the chosen node (hard and soft affinity); node ids in the context and in status", async (t) => {
  const { head, node2 } = await cluster.startTwoNodes(
    { numCpus: 1 },
    { numCpus: 4, resources: { remote: 1 } },
  );
  process.env.TORL_NO_IPC = "1";
  const info = await init({ address: head.address });
  t.is(getRuntimeContext().nodeId, head.nodeId, "a driver that joined runs on the node at its address");
  t.is(info.nodeId, head.nodeId);

  // without affinity the scheduler prefers the node with the most free CPU (node 2); hard affinity overrides it
  const onHead = new NodeAffinitySchedulingStrategy(head.nodeId);
  const pinned = [0, 1, 2].map(() => ProbeActor.options({ schedulingStrategy: onHead }).remote());
  t.deepEqual(await get(pinned.map((p) => p.nodeId())), [head.nodeId, head.nodeId, head.nodeId]);
  const toNode2 = ProbeActor.options({
    schedulingStrategy: new NodeAffinitySchedulingStrategy(node2.nodeId),
  }).remote();
  t.is(await toNode2.nodeId(), node2.nodeId);
  t.is(await whereAmITask.options({ schedulingStrategy: onHead }).remote(), head.nodeId, "tasks too");

  // hard affinity that can never hold fails at once; soft affinity falls back to any node
  const unknown = ProbeActor.options({
    schedulingStrategy: new NodeAffinitySchedulingStrategy("node-nope"),
  }).remote();
  const err = await t.throwsAsync(unknown.ready(), { instanceOf: InfeasibleResourceError });
  t.regex(err!.message, /hard affinity to node node-nope, which is not in the cluster/);
  const tooBig = ProbeActor.options({ numCpus: 2, schedulingStrategy: onHead }).remote();
  await t.throwsAsync(tooBig.ready(), { instanceOf: InfeasibleResourceError, message: /can never provide/ });
  const softBig = ProbeActor.options({
    numCpus: 2,
    schedulingStrategy: new NodeAffinitySchedulingStrategy(head.nodeId, true),
  }).remote();
  t.is(await softBig.nodeId(), node2.nodeId, "soft: placed where it fits");
  const softUnknown = ProbeActor.options({
    schedulingStrategy: new NodeAffinitySchedulingStrategy("node-nope", true),
  }).remote();
  t.truthy(await softUnknown.nodeId());
  t.throws(
    () =>
      ProbeActor.options({
        schedulingStrategy: onHead,
        placementGroup: placementGroup([{ CPU: 1 }]),
      }).remote(),
    { instanceOf: TypeError, message: /cannot be combined/ },
  );

  const status = JSON.parse(await cluster.torl("status", "--json"));
  const row = status.actors.find((a: any) => a.actorId === toNode2.actorId);
  t.is(row.nodeId, node2.nodeId);
  t.deepEqual(row.nodeAffinity, { nodeId: node2.nodeId, soft: false });
  t.deepEqual(status.nodes.map((n: any) => n.nodeId).sort(), [head.nodeId, node2.nodeId].sort());
  t.regex(await cluster.torl("status"), new RegExp(`affinity ${node2.nodeId}`));

  // node 2 dies: a hard-affine actor cannot restart elsewhere; a soft-affine one does
  const hard = ProbeActor.options({
    maxRestarts: 1,
    schedulingStrategy: new NodeAffinitySchedulingStrategy(node2.nodeId),
  }).remote();
  const soft = ProbeActor.options({
    maxRestarts: 1,
    schedulingStrategy: new NodeAffinitySchedulingStrategy(node2.nodeId, true),
  }).remote();
  t.deepEqual(await get([hard.nodeId(), soft.nodeId()]), [node2.nodeId, node2.nodeId]);
  const hardCall = hard.sleep(60_000);
  process.kill(node2.pid, "SIGKILL");
  await t.throwsAsync(hardCall, { instanceOf: ActorDiedError });
  let moved: string | undefined;
  for (let i = 0; i < 100 && !moved; i++) {
    try {
      moved = await soft.nodeId();
    } catch (e) {
      t.true(e instanceof ActorDiedError, String(e));
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  t.is(moved, head.nodeId, "soft affinity: restarted on the surviving node");
  // its restart has nowhere to go: later calls fail as for any request that can never be placed
  await t.throwsAsync(hard.nodeId(), { instanceOf: InfeasibleResourceError, message: /which is dead/ });
});
