// A peer that has not authenticated cannot make a listener hold memory: a ZMTP 3 greeting (CURVE,
// or NULL on a plaintext loopback cluster) followed by a frame header announcing 1 GiB and then
// ~200 MB of bytes ends in the listener dropping the connection, and the head's resident memory
// grows by far less than what was sent. Values larger than the frame bound still travel, in pieces.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import net from "node:net";
import { fileURLToPath } from "node:url";
import test from "ava";
import * as zmq from "zeromq";
import { buildBatch, MAX_FRAME_BYTES, MAX_WIRE_FRAME_BYTES, parseBatch } from "../src/wire/batch.js";
import { encode } from "../src/wire/codec.js";

const SEND_BYTES = 200 << 20;
/** Well below what is sent, far above the frame bound and the noise of a loaded machine. */
const RSS_BOUND = 64 << 20;

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? 0) * 1024;
}

async function startHead(mode: "keys" | "plain"): Promise<{ proc: ChildProcess; port: number }> {
  const proc = spawn(
    process.execPath,
    ["--import", "tsx", fileURLToPath(new URL("./fixtures/lone-head.ts", import.meta.url)), mode],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const line = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("\n")) resolve(out.trim());
    });
    proc.once("exit", (code) => reject(new Error(`the head exited (${code}) before listening`)));
  });
  return { proc, port: Number(line.split(":").pop()) };
}

/** The 64-byte ZMTP 3.0 greeting of a client using `mechanism`. */
function greeting(mechanism: string): Buffer {
  const g = Buffer.alloc(64);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = 3; // version 3.0
  g[11] = 0;
  g.write(mechanism, 12, "ascii");
  return g;
}

/**
 * Greets, announces a frame of 1 GiB (a command frame: what a handshake would send next) and then
 * writes `SEND_BYTES` while the listener takes them; returns what the kernel accepted, whether the
 * listener closed the connection, and the peak growth of the head's resident memory meanwhile.
 */
async function attack(port: number, pid: number, mechanism: string) {
  const before = rssOf(pid);
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssOf(pid));
  }, 20);
  const sock = net.connect(port, "127.0.0.1");
  let closed = false;
  const ended = new Promise<void>((resolve) => {
    sock.on("close", () => {
      closed = true;
      resolve();
    });
    sock.on("error", () => {});
  });
  await new Promise<void>((resolve) => sock.once("connect", () => resolve()));
  sock.write(greeting(mechanism));
  const header = Buffer.alloc(9);
  header[0] = 0x06; // long frame, command
  header.writeBigUInt64BE(1n << 30n, 1);
  sock.write(header);
  const chunk = Buffer.alloc(1 << 20, 0x41);
  let sent = 0;
  while (sent < SEND_BYTES && !closed) {
    const more = sock.write(chunk);
    sent += chunk.length;
    if (!more) {
      await Promise.race([
        new Promise<void>((resolve) => sock.once("drain", () => resolve())),
        ended,
        new Promise((resolve) => setTimeout(resolve, 30_000)), // a listener that stops reading
      ]);
    }
  }
  // a listener that took everything holds it while the connection is open: look once more
  await new Promise((resolve) => setTimeout(resolve, 500));
  peak = Math.max(peak, rssOf(pid));
  clearInterval(sampler);
  sock.destroy();
  return { sent: sent - sock.writableLength, closed, grewBy: peak - before };
}

for (const [mode, mechanism] of [
  ["keys", "CURVE"],
  ["plain", "NULL"],
] as const) {
  test.serial(
    `an unauthenticated ${mechanism} peer announcing 1 GiB is dropped, and the head does not buffer it`,
    async (t) => {
      const { proc, port } = await startHead(mode);
      try {
        await new Promise((resolve) => setTimeout(resolve, 500)); // let the head settle its memory
        const r = await attack(port, proc.pid!, mechanism);
        t.log(
          `${mechanism}: accepted ${(r.sent / 2 ** 20).toFixed(1)} MiB, closed ${r.closed}, RSS +${(r.grewBy / 2 ** 20).toFixed(1)} MiB`,
        );
        t.true(r.closed, "the listener dropped the connection");
        t.true(r.sent < SEND_BYTES, "the listener stopped taking bytes before all were sent");
        t.true(r.grewBy < RSS_BOUND, `the head's RSS grew by ${(r.grewBy / 2 ** 20).toFixed(1)} MiB`);
      } finally {
        proc.kill("SIGKILL");
      }
    },
  );
}

test("a batch with frames above the bound travels in pieces and arrives whole", (t) => {
  const big = new Float32Array((3 * MAX_FRAME_BYTES) / 4 + 5).map((_, i) => i);
  const text = "x".repeat(MAX_FRAME_BYTES + 17);
  const parts = buildBatch([encode({ big, text }), encode([1, new Uint8Array(600)])]);
  t.true(
    parts.every((p) => p.byteLength <= MAX_FRAME_BYTES),
    "no frame above the bound",
  );
  // as ZeroMQ hands them over: separate buffers, behind a routing id
  const received = [Buffer.from("peer"), ...parts.map((p) => Buffer.from(p))];
  const [first, second] = parseBatch(received, 1);
  t.deepEqual(first.big, big);
  t.is(first.text, text);
  t.deepEqual(second, [1, new Uint8Array(600)]);
});

/** One frame of `bytes` from a CURVE client to a CURVE server that accepts `accept` bytes a frame. */
async function curveFrameArrives(bytes: number, accept: number): Promise<boolean> {
  const server = zmq.curveKeyPair();
  const client = zmq.curveKeyPair();
  const router = new zmq.Router({
    curveServer: true,
    curveSecretKey: server.secretKey,
    maxMessageSize: accept,
    receiveTimeout: 3000,
    linger: 0,
  });
  const dealer = new zmq.Dealer({
    curveServerKey: server.publicKey,
    curvePublicKey: client.publicKey,
    curveSecretKey: client.secretKey,
    linger: 0,
  });
  try {
    await router.bind("tcp://127.0.0.1:*");
    dealer.connect(router.lastEndpoint!);
    await dealer.send(new Uint8Array(bytes).fill(7));
    const [, frame] = await router.receive();
    return frame!.byteLength === bytes;
  } catch {
    return false; // the server dropped the connection: nothing arrives before the receive timeout
  } finally {
    router.close();
    dealer.close();
  }
}

test("an authenticated frame of exactly the bound arrives over CURVE (the socket limit leaves room for its wrapping)", async (t) => {
  t.true(await curveFrameArrives(MAX_FRAME_BYTES, MAX_WIRE_FRAME_BYTES));
  // without that room ZeroMQ counts CURVE's bytes too and drops the connection: the limit the sockets use matters
  t.false(await curveFrameArrives(MAX_FRAME_BYTES, MAX_FRAME_BYTES));
});
