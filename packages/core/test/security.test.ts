import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import test from "ava";
import * as zmq from "zeromq";
import { Head } from "../src/cluster/head.js";
import { ClusterAuthError, createActor, get, InsecureListenError, init, shutdown } from "../src/index.js";
import { randomId } from "../src/runtime/ids.js";
import { buildBatch } from "../src/wire/batch.js";
import { encode } from "../src/wire/codec.js";
import { DealerLink, RouterServer } from "../src/wire/links.js";
import { generateClusterKeys, setClusterKeys } from "../src/wire/security.js";
import type { MarkerActor } from "./fixtures/marker-actor.ts";

const run = promisify(execFile);
const stateDir = mkdtempSync(path.join(os.tmpdir(), "torl-sec-"));
const env = { ...process.env, TORL_STATE_DIR: stateDir, TORL_CLUSTER_KEYS: "" };
delete (env as Record<string, string | undefined>).TORL_CLUSTER_KEYS;
const torl = (...args: string[]) =>
  run("node", ["--import=tsx", "examples/torl/src/cli.ts", ...args], { env, timeout: 60_000 });
const MARKER_MODULE = new URL("./fixtures/marker-actor.ts", import.meta.url).href;

test.after.always(async () => {
  await torl("stop", "--force").catch(() => {});
});

/** The local addresses the process `pid` listens on (TCP). */
async function listening(pid: number): Promise<string[]> {
  const { stdout } = await run("ss", ["-ltnpH"]);
  return stdout
    .split("\n")
    .filter((l) => l.includes(`pid=${pid},`))
    .map((l) => l.trim().split(/\s+/)[3]!);
}

function markerSpec(marker: string) {
  const args = encode([marker]);
  return {
    actorId: `MarkerActor-${randomId(4)}`,
    module: MARKER_MODULE,
    className: "MarkerActor",
    args: { h: args.head, f: args.frames },
    resources: { CPU: 0 },
    maxRestarts: 0,
    maxConcurrency: 1,
    detached: true,
    ownerClientId: "outsider",
  };
}

/** The head's count of refused connections (`torl status --json`). */
async function refusals(): Promise<number> {
  const { stdout } = await torl("status", "--json");
  return JSON.parse(stdout).security.refusedConnections as number;
}

/** A process outside the cluster asks the head to create an actor, as a driver would. */
async function outsiderCreates(address: string, marker: string): Promise<ClusterAuthError | "answered"> {
  return new Promise((resolve) => {
    const link = new DealerLink(
      `tcp://${address}`,
      (m) => {
        if (m?.t === "re") {
          link.close();
          resolve("answered");
        }
      },
      "outsider",
      (err) => resolve(err),
    );
    link.send({ t: "createActor", rid: 1, spec: markerSpec(marker) });
  });
}

test.serial("default start listens on loopback only and status says it is not authenticated", async (t) => {
  const { stdout } = await torl("start", "--head", "--port", "0", "--num-cpus", "1");
  const ready = JSON.parse(stdout.trim().split("\n").pop()!);
  t.regex(stdout, /not authenticated: loopback only/);
  t.false(existsSync(path.join(stateDir, "cluster-keys.json")), "a loopback head writes no keys");
  const addrs = await listening(ready.pid);
  t.true(addrs.length > 0, "the head listens somewhere");
  for (const a of addrs) t.regex(a, /^127\.0\.0\.1:\d+$/, `listens on ${a}`);
  const status = await torl("status");
  t.regex(status.stdout, /security: NOT authenticated \(listening on 127\.0\.0\.1 only\)/);
  await torl("stop", "--force");
});

test.serial(
  "an outsider without the keys runs nothing; the head keeps serving; with keys it works",
  async (t) => {
    const { stdout } = await torl("start", "--head", "--secure", "--port", "0", "--num-cpus", "2");
    const ready = JSON.parse(stdout.trim().split("\n").pop()!);
    const keyFile = path.join(stateDir, "cluster-keys.json");
    t.is(statSync(keyFile).mode & 0o777, 0o600);
    t.is(JSON.parse(readFileSync(keyFile, "utf8")).address, ready.address);
    const work = mkdtempSync(path.join(os.tmpdir(), "torl-sec-marker-"));

    // 1. no keys at all
    setClusterKeys(null);
    const noKeys = path.join(work, "no-keys");
    const t0 = Date.now();
    const r1 = await outsiderCreates(ready.address, noKeys);
    t.true(r1 instanceof ClusterAuthError, `refused: ${String(r1)}`);
    t.regex((r1 as Error).message, /requires CURVE keys and this process has none/);
    t.true((r1 as Error).message.includes("TORL_CLUSTER_KEYS"), "says how to give keys");
    t.log(`refused without keys after ${Date.now() - t0} ms`);
    // 2. keys of another cluster
    setClusterKeys(generateClusterKeys());
    const wrongKeys = path.join(work, "wrong-keys");
    const r2 = await outsiderCreates(ready.address, wrongKeys);
    t.true(r2 instanceof ClusterAuthError, `refused: ${String(r2)}`);
    t.regex((r2 as Error).message, /keys are not the cluster's/);
    // 3. the cluster's public (server) key but a key pair of its own: the head's check of client keys
    const own = generateClusterKeys();
    const clusterPublic = JSON.parse(readFileSync(keyFile, "utf8")).publicKey as string;
    const ownKeys = path.join(work, "own-keys");
    const raw = new zmq.Dealer({ linger: 0 });
    raw.curveServerKey = clusterPublic;
    raw.curvePublicKey = own.publicKey;
    raw.curveSecretKey = own.secretKey;
    let authError: string | null = null;
    raw.events.on("handshake:error:auth", (ev) => {
      authError = ev.error.message;
    });
    const refusalsBefore = await refusals();
    raw.connect(`tcp://${ready.address}`);
    // not awaited: a send that cannot leave must not hang the test
    raw.send(buildBatch([encode({ t: "createActor", rid: 1, spec: markerSpec(ownKeys) })])).catch(() => {});
    // The head refuses the key (counted), and ZeroMQ tells the client with an ERROR command. Under load
    // the server may drop the connection before that command leaves, so the client side is not waited
    // on alone: either the client's event or the head's count shows the refusal, within 30 s.
    let refusedByHead = false;
    for (let i = 0; i < 60 && authError === null && !refusedByHead; i++) {
      await new Promise((r) => setTimeout(r, 500));
      refusedByHead = (await refusals()) > refusalsBefore;
    }
    raw.close();
    t.true(authError !== null || refusedByHead, "the head refused a key pair of the client's own");
    if (authError !== null) t.regex(authError, /Authentication failure/);
    setClusterKeys(null);
    // the public API says the same, in bounded time
    const e = await t.throwsAsync(init({ address: ready.address, keys: { ...generateClusterKeys() } }));
    t.true(e instanceof ClusterAuthError);

    // give a worker time to have started had the head accepted anything
    await new Promise((r) => setTimeout(r, 3000));
    t.false(existsSync(noKeys), "no code ran for the client without keys");
    t.false(existsSync(wrongKeys), "no code ran for the client with another cluster's keys");
    t.false(existsSync(ownKeys), "no code ran for the client with a key pair of its own");

    // the head still serves, and logged the refusals
    const status = await torl("status", "--json");
    const s = JSON.parse(status.stdout);
    t.is(s.security.mode, "curve");
    t.true(s.security.refusedConnections >= 2, `refusals counted: ${s.security.refusedConnections}`);
    t.is(s.actors.filter((a: { className: string }) => a.className === "MarkerActor").length, 0);
    const log = readFileSync(
      JSON.parse(readFileSync(path.join(stateDir, "processes", `${ready.pid}.json`), "utf8")).log,
      "utf8",
    );
    t.regex(log, /refused a connection/);

    // a node agent without the keys is refused too, and says so
    const elsewhere = { ...env, TORL_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), "torl-sec-other-")) };
    const agent = await t.throwsAsync(
      run("node", ["--import=tsx", "examples/torl/src/cli.ts", "start", "--address", ready.address], {
        env: elsewhere,
        timeout: 60_000,
      }),
    );
    t.regex((agent as Error & { stderr: string }).stderr, /ClusterAuthError: authentication with/);

    // 3. with the keys (found in the state directory for this address) it works
    const prevState = process.env.TORL_STATE_DIR;
    process.env.TORL_STATE_DIR = stateDir;
    try {
      await init({ address: ready.address });
      const ok = path.join(work, "with-keys");
      const a = createActor<MarkerActor>(MARKER_MODULE, "MarkerActor", [ok]);
      const pong: unknown = await get(a.ping());
      t.is(pong, "pong");
      t.true(existsSync(ok), "the keyed driver's actor ran");
    } finally {
      await shutdown();
      process.env.TORL_STATE_DIR = prevState;
    }
    await torl("stop", "--force");
  },
);

/** Connects a link holding keys to `endpoint`; resolves with its ClusterAuthError (or a timeout's). */
function keyedLinkFails(endpoint: string): Promise<ClusterAuthError | Error> {
  setClusterKeys(generateClusterKeys());
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(new Error("no auth error within 10 s")), 10_000);
    const link = new DealerLink(
      endpoint,
      () => {},
      "probe",
      (err) => {
        clearTimeout(timer);
        resolve(err);
      },
    );
    link.send({ t: "ping" });
  }).finally(() => setClusterKeys(null)) as Promise<ClusterAuthError | Error>;
}

test.serial(
  "a process with keys meets a server without CURVE: the error says so, with ZeroMQ's code",
  async (t) => {
    const server = new zmq.Router({ linger: 0 });
    await server.bind("tcp://127.0.0.1:0");
    const e = await keyedLinkFails(server.lastEndpoint!);
    server.close();
    t.true(e instanceof ClusterAuthError, String(e));
    t.regex(e.message, /ERR_ZMTP_MECHANISM_MISMATCH: the server does not use CURVE/);
  },
);

test.serial(
  "a stream garbled after the server's greeting is a protocol error, not a missing-CURVE guess",
  async (t) => {
    // a CURVE server's greeting (ZMTP 3.0), then bytes no CURVE server sends: a WELCOME that is not one
    const greeting = Buffer.alloc(64);
    greeting[0] = 0xff;
    greeting[9] = 0x7f;
    greeting[10] = 3;
    greeting.write("CURVE", 12);
    greeting[32] = 1;
    const garbage = Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0]);
    const server = net.createServer((c) => {
      c.on("error", () => {});
      c.resume();
      c.write(Buffer.concat([greeting, garbage]));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const e = await keyedLinkFails(`tcp://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
    server.close();
    t.true(e instanceof ClusterAuthError, String(e));
    t.regex(e.message, /ERR_ZMTP_\w+: the server's handshake broke the protocol/);
    t.notRegex(e.message, /does not use CURVE/);
  },
);

test.serial(
  "a connection that worked, then garbled on the path: the link dials again and goes on",
  async (t) => {
    setClusterKeys(generateClusterKeys());
    const server = new RouterServer((peer, msg) => server.send(peer, { echo: msg.n }), "echo");
    const serverPort = Number(new URL(await server.bind("tcp://127.0.0.1:0")).port);
    server.start();
    // a relay whose second connection passes the server's greeting, then bytes the server never sent
    const relayed: net.Socket[] = [];
    let connections = 0;
    const relay = net.createServer((client) => {
      const n = ++connections;
      const upstream = net.connect(serverPort, "127.0.0.1");
      relayed.push(client, upstream);
      for (const s of [client, upstream]) s.on("error", () => {});
      client.on("data", (d) => upstream.write(d));
      let fromServer = 0;
      upstream.on("data", (d) => {
        if (n !== 2) return void client.write(d);
        if (fromServer < 64) client.write(d.subarray(0, 64 - fromServer));
        if ((fromServer += d.length) >= 64) client.write(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0]));
      });
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
    const echoes: number[] = [];
    let authError: ClusterAuthError | null = null;
    const link = new DealerLink(
      `tcp://127.0.0.1:${(relay.address() as net.AddressInfo).port}`,
      (m) => echoes.push(m.echo),
      "probe",
      (e) => {
        authError = e;
      },
    );
    /** Sends `n` every 200 ms until its echo comes back (what was in flight on a broken link is lost). */
    const roundTrip = async (n: number) => {
      for (let i = 0; i < 50 && !echoes.includes(n) && !authError; i++) {
        link.send({ n });
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    try {
      await roundTrip(1);
      t.true(echoes.includes(1), "the first connection works");
      for (const s of relayed) s.resetAndDestroy(); // the link reconnects: that connection is garbled
      await roundTrip(2);
      t.is(authError, null, `no auth failure: ${String(authError)}`);
      t.true(echoes.includes(2), "the link came back after the garbled connection");
      t.true(connections >= 3, `connections through the relay: ${connections}`);
    } finally {
      link.close();
      server.close();
      relay.close();
      for (const s of relayed) s.destroy();
      setClusterKeys(null);
    }
  },
);

test("listening beyond loopback without keys is refused", async (t) => {
  setClusterKeys(null);
  const head = new Head({ host: "0.0.0.0", port: 0 });
  const e = await t.throwsAsync(head.start());
  t.true(e instanceof InsecureListenError);
  t.regex(e!.message, /would listen on 0\.0\.0\.0, beyond loopback, without authentication/);
});
