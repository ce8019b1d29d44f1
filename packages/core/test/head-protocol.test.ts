import test from "ava";
import { Head } from "../src/cluster/head.js";
import type { ClusterStatus, ToHead } from "../src/cluster/messages.js";
import { DealerLink } from "../src/wire/links.js";

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
    send({
      t: "hello",
      rid: 1,
      clientId: "c1",
      address: { tcp: "tcp://127.0.0.1:1" },
      nodeIp: "127.0.0.1",
      pid: 1,
      heartbeats: true,
    });
    const hello = (await next()) as { rid: number; ok: boolean; v: { nodes: number } };
    t.like(hello, { rid: 1, ok: true, v: { nodes: 0 } });
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
