import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ActorDiedError, clusterStatus, get, getActor, init, put, shutdown } from "@torl-ts/actors";
import test from "ava";
import { type Counter, StoreActor } from "./fixtures/classes.js";
import { CliCluster } from "./fixtures/cli-cluster.js";

const cluster = new CliCluster("torl-multinode-", {
  TORL_NODE_TIMEOUT_MS: "1500",
  TORL_CLIENT_TIMEOUT_MS: "5000",
});

test.after.always(async () => {
  await shutdown();
  await cluster.stop();
});

test("a head and a second node agent on 127.0.0.2: placement by resource, objects between nodes, node death", async (t) => {
  const { head, node2 } = await cluster.startTwoNodes(
    { numCpus: 1, resources: { headnode: 1 } },
    { numCpus: 2, resources: { remote: 2 } },
  );
  t.not(node2.nodeId, head.nodeId);

  const status = JSON.parse(await cluster.torl("status", "--json"));
  t.deepEqual(status.nodes.map((n: any) => [n.ip, n.alive]).sort(), [
    ["127.0.0.1", true],
    ["127.0.0.2", true],
  ]);
  t.regex(await cluster.torl("status"), /127\.0\.0\.2\s+ALIVE.*remote 0\/2 used/);

  process.env.TORL_NO_IPC = "1";
  await init({ address: head.address });

  // placement by custom resource
  const remote = StoreActor.options({ resources: { remote: 1 } }).remote();
  const local = StoreActor.options({ resources: { headnode: 0.5 } }).remote();
  const [rw, lw] = await get([remote.where(), local.where()]);
  t.is(rw.nodeId, node2.nodeId);
  t.true(rw.tcp.startsWith("tcp://127.0.0.2:"), rw.tcp);
  t.is(lw.nodeId, head.nodeId);
  t.is((await clusterStatus()).nodes.find((x) => x.nodeId === node2.nodeId)?.available.remote, 1);

  // objects between nodes, owner -> reader directly (the head sees only control messages)
  const before = (await clusterStatus()).bytesReceived;
  const n = 1 << 22; // 16 MiB per array
  t.is(await remote.sum(put(new Float32Array(n).fill(1))), n, "driver -> node 2");
  const [onNode2] = await remote.makeRef(n, 2);
  t.is(await local.sumRef([onNode2!]), 2 * n, "node 2 worker -> node 1 worker");
  const back = await remote.make(n, 3);
  t.is(back.length, n);
  t.is(back[n - 1], 3, "node 2 -> driver");
  const after = (await clusterStatus()).bytesReceived;
  t.true(after - before < 1 << 20, `the head received ${after - before} bytes while 48 MiB moved`);

  // the second node dies: its actors die (or restart elsewhere), the cluster goes on
  const restartable = StoreActor.options({ numCpus: 1, maxRestarts: 1 }).remote();
  t.is((await restartable.where()).nodeId, node2.nodeId);
  const pending = remote.sleep(60_000);
  process.kill(node2.pid, "SIGKILL");
  const err = await t.throwsAsync(pending, { instanceOf: ActorDiedError });
  t.is(err!.cause.kind, "node_died");
  t.is(err!.cause.nodeId, node2.nodeId);
  await t.throwsAsync(remote.sum(new Float32Array(4)), { instanceOf: ActorDiedError });
  let moved: any;
  for (let i = 0; i < 50 && !moved; i++) {
    try {
      moved = await restartable.where();
    } catch (e) {
      t.true(e instanceof ActorDiedError);
    }
  }
  t.is(moved.nodeId, head.nodeId, "restarted on the surviving node");
  t.is(await local.sum(new Float32Array([1, 2])), 3);
  const later = await clusterStatus();
  t.false(later.nodes.find((x) => x.nodeId === node2.nodeId)?.alive ?? true);

  // a driver that dies without shutdown(): the head notices (no heartbeats) and kills its actors
  const orphanDriver = spawn(
    process.execPath,
    ["--import", "tsx", fileURLToPath(new URL("./fixtures/orphan-driver.ts", import.meta.url)), head.address],
    {
      env: cluster.env,
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  await new Promise((resolve) => orphanDriver.stdout!.once("data", resolve));
  const orphan = await getActor<Counter>("orphan");
  t.is(await orphan.inc(2), 2);
  orphanDriver.kill("SIGKILL");
  const gone = await t.throwsAsync(
    (async () => {
      for (let i = 0; i < 300; i++) {
        await orphan.inc(1);
        await new Promise((r) => setTimeout(r, 200));
      }
    })(),
    { instanceOf: ActorDiedError },
  );
  t.is(gone!.cause.kind, "owner_died");
});
