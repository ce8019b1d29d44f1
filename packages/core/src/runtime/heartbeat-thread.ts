/**
 * A thread that tells the head a driver is alive, once a second. It runs beside the driver's event
 * loop, so a driver busy in long synchronous work keeps its actors; only a dead process falls silent.
 *
 * Its socket must be closed before the thread ends: a thread (or process) torn down with a ZeroMQ
 * socket open can abort the whole process. The driver asks it to stop ("stop", at shutdown) or, when
 * its process exits without shutdown(), to say goodbye for it first ("exit"); either way the thread
 * sets `closed[0]` once its socket is closed, which the driver may wait on synchronously.
 */
import { parentPort, workerData } from "node:worker_threads";
import * as zmq from "zeromq";
import { buildBatch, MAX_WIRE_FRAME_BYTES } from "../wire/batch.js";
import { encode } from "../wire/codec.js";
import { connectClient } from "../wire/links.js";
import { type ClusterKeys, setClusterKeys } from "../wire/security.js";

export interface HeartbeatThreadData {
  headEndpoint: string;
  clientId: string;
  intervalMs: number;
  keys: ClusterKeys | null;
  /** Set to 1 (and notified) by the thread once its socket is closed. */
  closed: Int32Array;
  /** How long the goodbye may take to leave (the exiting process waits that long at most). */
  goodbyeLingerMs: number;
}

/** What the driver tells the thread: stop beating, or say goodbye for a process that is exiting. */
export type HeartbeatThreadOrder = "stop" | "exit";

const data = workerData as HeartbeatThreadData;
setClusterKeys(data.keys);
// A plain socket, no event observer: a thread torn down (process.exit) with an observer open aborts
// the whole process. Handshake failures are reported by the driver's own link to the head.
const sock = new zmq.Dealer({ linger: 0, sendHighWaterMark: 4, maxMessageSize: MAX_WIRE_FRAME_BYTES });
connectClient(sock, data.headEndpoint);
// ZeroMQ allows one send in flight per socket; while the head is unreachable a beat waits, and the
// next ones are skipped (a stale beat is worth nothing later) instead of failing the thread.
let inFlight: Promise<void> | null = null;
const send = (msg: object): Promise<void> | null => {
  if (inFlight) return null;
  try {
    inFlight = sock
      .send(buildBatch([encode(msg)]))
      .catch(() => {})
      .finally(() => {
        inFlight = null;
      });
  } catch {
    inFlight = null;
  }
  return inFlight;
};
send({ t: "clientHeartbeat", clientId: data.clientId });
const timer = setInterval(() => send({ t: "clientHeartbeat", clientId: data.clientId }), data.intervalMs);

function closeSocket(): void {
  sock.close();
  Atomics.store(data.closed, 0, 1);
  Atomics.notify(data.closed, 0);
  parentPort!.close();
}

parentPort!.once("message", (order: HeartbeatThreadOrder) => {
  clearInterval(timer);
  if (order !== "exit") return closeSocket();
  // the head frees the driver's actors now, with the reason, instead of after its heartbeat timeout
  void (async () => {
    const deadline = setTimeout(closeSocket, data.goodbyeLingerMs);
    try {
      if (inFlight) await inFlight;
      sock.linger = data.goodbyeLingerMs;
      await send({ t: "bye", clientId: data.clientId, exited: true });
    } finally {
      clearTimeout(deadline);
      if (!sock.closed) closeSocket();
    }
  })();
});
