/**
 * A thread that tells the head a driver is alive, once a second. It runs beside the driver's event
 * loop, so a driver busy in long synchronous work keeps its actors; only a dead process falls silent.
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
}

const data = workerData as HeartbeatThreadData;
setClusterKeys(data.keys);
// A plain socket, no event observer: a thread torn down (process.exit) with an observer open aborts
// the whole process. Handshake failures are reported by the driver's own link to the head.
const sock = new zmq.Dealer({ linger: 0, sendHighWaterMark: 4, maxMessageSize: MAX_WIRE_FRAME_BYTES });
connectClient(sock, data.headEndpoint);
// ZeroMQ allows one send in flight per socket; while the head is unreachable a beat waits, and the
// next ones are skipped (a stale beat is worth nothing later) instead of failing the thread.
let sending = false;
const beat = () => {
  if (sending) return;
  sending = true;
  try {
    sock
      .send(buildBatch([encode({ t: "clientHeartbeat", clientId: data.clientId })]))
      .catch(() => {})
      .finally(() => {
        sending = false;
      });
  } catch {
    sending = false;
  }
};
beat();
const timer = setInterval(beat, data.intervalMs);
parentPort!.once("message", () => {
  clearInterval(timer);
  sock.close();
  parentPort!.close();
});
