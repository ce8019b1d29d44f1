import test from "ava";
import { Head } from "../src/cluster/head.js";
import type { ClusterStatus, ToHead } from "../src/cluster/messages.js";
import { DealerLink } from "../src/wire/links.js";
import { hello, spec } from "./head-parts.fixture.js";

/** A raw link to a head: sends messages as a peer of the same version would, collects what comes back. */
async function withHead(run: (send: (m: ToHead) => void, next: () => Promise<unknown>) => Promise<void>) {
  const head = new Head({ host: "127.0.0.1", port: 0, nodeTimeoutMs: Number.POSITIVE_INFINITY });
  const address = await head.start();
  const inbox: unknown[] = [];
  const waiting: ((m: unknown) => void)[] = [];
  const link = new DealerLink(`tcp://${address}`, (m) => {
    const w = waiting.shift();
    if (w) w(m);
    else inbox.push(m);
  });
  const next = () =>
    inbox.length > 0
      ? Promise.resolve(inbox.shift())
      : new Promise<unknown>((resolve, reject) => {
          waiting.push(resolve);
          setTimeout(() => reject(new Error("no message from the head within 20 s")), 20_000).unref();
        });
  try {
    await run((m) => link.send(m), next);
  } finally {
    link.close();
    head.stop();
  }
}

test("the head answers requests by their type; heartbeats are notifications with clear names", async (t) => {
  await withHead(async (send, next) => {
    // a driver says hello, beats, and is then listed as a connected client
    send({ ...hello("c1"), rid: 1 });
    t.like(await next(), { rid: 1, ok: true, v: { nodes: 0 } });
    send({ t: "clientHeartbeat", clientId: "c1" });
    send({ t: "nodeHeartbeat", nodeId: "no-such-node" });
    send({ t: "status", rid: 2 });
    const status = (await next()) as { rid: number; ok: boolean; v: ClusterStatus };
    t.is(status.rid, 2, "the heartbeats were not answered: the next message is the status reply");
    t.true(status.ok);
    t.is(status.v.clients, 1);
    t.deepEqual(status.v.nodes, []);
    t.is(status.v.security.mode, "none");
  });
});

test("a message type the head does not know is refused by name, the old heartbeat names included", async (t) => {
  await withHead(async (send, next) => {
    for (const [rid, type] of [
      [1, "chb"],
      [2, "hb"],
    ] as const) {
      send({ t: type, rid } as unknown as ToHead);
      const reply = (await next()) as { rid: number; ok: boolean; e: { message: string } };
      t.is(reply.rid, rid);
      t.false(reply.ok);
      t.is(reply.e.message, `unknown message type '${type}'`);
    }
  });
});

test("a driver that says bye takes its actors and placement groups with it; the node is told to stop the worker", async (t) => {
  await withHead(async (send, next) => {
    // this link is both a node agent (2 CPUs) and the driver c1
    send({
      t: "registerNode",
      rid: 1,
      nodeId: "n1",
      ip: "127.0.0.1",
      resources: { CPU: 2 },
      gpuIds: [],
      pid: 1,
    });
    t.like(await next(), { rid: 1, ok: true, v: { nodeId: "n1" } });
    send({ ...hello("c1", { pid: 5, heartbeats: false }), rid: 2 });
    t.like(await next(), { rid: 2, ok: true, v: { nodes: 1, nodeId: "n1" } });
    send({ t: "createPg", rid: 3, pgId: "g", bundles: [{ CPU: 1 }], clientId: "c1" });
    t.like(await next(), { rid: 3, ok: true, v: { pgId: "g", state: "CREATED", bundleNodes: ["n1"] } });
    send({ t: "createActor", rid: 4, spec: spec("A1", { maxRestarts: 3, ownerClientId: "c1" }) });
    t.like(await next(), {
      t: "startWorker",
      spec: { actorId: "A1" },
      incarnation: 0,
      resources: { CPU: 1 },
    });
    t.like(await next(), { rid: 4, ok: true, v: { actorId: "A1" } });
    send({ t: "bye", rid: 5, clientId: "c1" });
    t.like(await next(), { t: "killWorker", actorId: "A1", incarnation: 0 });
    t.like(await next(), { rid: 5, ok: true, v: null });
    send({ t: "workerExit", actorId: "A1", incarnation: 0, code: null, signal: "SIGTERM", pid: 9 });
    send({ t: "status", rid: 6 });
    // the creator subscribed: the actor's death arrives before the status
    const news = (await next()) as { t: string; state: string; cause: { kind: string; message: string } };
    t.like(news, { t: "actor", actorId: "A1", state: "DEAD", cause: { kind: "owner_died" } });
    t.is(news.cause.message, "its owner (pid 5) is gone: it called shutdown()");
    const status = (await next()) as { rid: number; v: ClusterStatus };
    t.is(status.rid, 6);
    t.like(status.v.placementGroups, [{ pgId: "g", state: "REMOVED", error: "it was removed" }]);
    t.like(status.v.nodes, [{ nodeId: "n1", available: { CPU: 2 } }]);
    t.is(status.v.clients, 0);
  });
});
