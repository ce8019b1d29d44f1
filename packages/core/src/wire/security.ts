/**
 * Cluster authentication and encryption: ZeroMQ CURVE on every socket a process opens, once the
 * process holds the cluster's keys. Every member (head, node agents, workers, drivers) holds the
 * same key pair; a server accepts a peer only when the peer proves it holds that pair's secret key
 * (checked by this process's ZAP handler). Without keys, sockets stay plaintext, and listening is
 * then allowed on loopback addresses only.
 */
import * as zmq from "zeromq";
import { InsecureListenError } from "../errors.js";
import { logWarn } from "../log.js";

/** The cluster's CURVE key pair, Z85-encoded (40 characters each). */
export interface ClusterKeys {
  publicKey: string;
  secretKey: string;
}

/** Fresh keys for a new cluster. */
export function generateClusterKeys(): ClusterKeys {
  return zmq.curveKeyPair();
}

let keys: ClusterKeys | null = null;

/** Uses `k` for every socket this process opens from now on (null: plaintext, loopback only). */
export function setClusterKeys(k: ClusterKeys | null): void {
  if (k) checkKeyShape(k, "cluster keys");
  keys = k;
}

/** The keys this process uses, or null when its sockets are plaintext. */
export function clusterKeys(): ClusterKeys | null {
  return keys;
}

const Z85 = /^[0-9a-zA-Z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/;

export function checkKeyShape(k: ClusterKeys, where: string): void {
  if (typeof k?.publicKey !== "string" || !Z85.test(k.publicKey))
    throw new TypeError(`${where}: publicKey must be a 40-character Z85 CURVE key`);
  if (typeof k?.secretKey !== "string" || !Z85.test(k.secretKey))
    throw new TypeError(`${where}: secretKey must be a 40-character Z85 CURVE key`);
}

/** Whether a host name or address reaches only this machine. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** Refuses to listen beyond loopback without keys: that would let anyone who can reach it run code. */
export function requireKeysToListen(host: string, what: string): void {
  if (!keys && !isLoopbackHost(host)) throw new InsecureListenError(host, what);
}

/**
 * Makes a socket that binds a CURVE server (before bind); peers must hold the cluster's keys.
 * Call the returned function when the socket closes (the key check stops with the last one).
 */
export async function secureServerSocket(sock: zmq.Socket, label: string): Promise<() => void> {
  if (!keys) return () => {};
  await ensureZapHandler();
  zapUsers++;
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    if (--zapUsers === 0) closeZapHandler();
  };
  sock.curveServer = true;
  sock.curveSecretKey = keys.secretKey;
  sock.zapDomain = ZAP_DOMAIN;
  sock.events.on("handshake:error:protocol", (e) =>
    noteRefusal(
      `${label}: refused a connection at ${e.address}`,
      "the peer does not speak CURVE with this cluster's keys (it was given no keys?)",
    ),
  );
  return release;
}

/** Makes a socket that connects a CURVE client (before connect), if this process holds keys. */
export function secureClientSocket(sock: zmq.Socket): void {
  if (!keys) return;
  sock.curveServerKey = keys.publicKey;
  sock.curvePublicKey = keys.publicKey;
  sock.curveSecretKey = keys.secretKey;
}

/**
 * Calls `onFailure` once when the secure handshake with the server fails for good. A refused key
 * (the server's key check said no) and a protocol error before any handshake succeeded (one side has
 * no keys, or no torl server is at that address) are final. A dropped connection (what a server that
 * cannot decrypt our hello does) also happens when a flaky network cuts a handshake short, so it
 * counts only when it goes on, with no handshake succeeding, FAILURES_IN_A_ROW times over at least
 * FAILURE_WINDOW_MS. A protocol error after a handshake succeeded counts the same way: the server
 * spoke CURVE with these keys, so what broke is this connection (something on the path altered it),
 * and ZeroMQ gives up an endpoint after a protocol error, so `redial` connects it again.
 */
export function watchHandshake(
  sock: zmq.Socket,
  onFailure: (reason: string) => void,
  redial?: () => void,
): void {
  let failed = false;
  let inARow = 0;
  let first = 0;
  let handshaken = false;
  const fail = (reason: string) => {
    if (failed) return;
    failed = true;
    onFailure(reason);
  };
  const persisting = (what: string, guess: string) => {
    if (inARow++ === 0) first = Date.now();
    const spanMs = Date.now() - first;
    if (inARow >= FAILURES_IN_A_ROW && spanMs >= FAILURE_WINDOW_MS)
      fail(`every handshake failed for ${spanMs} ms (${inARow} in a row; last: ${what}): ${guess}`);
  };
  const noKeys = "the server requires CURVE keys and this process has none";
  const altered =
    "the server's handshake broke the protocol (not a torl server at that address, or something on the path alters the stream)";
  sock.events.on("handshake", () => {
    inARow = 0;
    handshaken = true;
  });
  sock.events.on("handshake:error:auth", () => fail("the server refused this process's key"));
  sock.events.on("handshake:error:protocol", (e) => {
    const code = e.error?.code ?? "ERR_ZMTP_UNSPECIFIED";
    if (code === "ERR_ZMTP_MECHANISM_MISMATCH")
      fail(
        `${code}: ${keys ? "the server does not use CURVE (this process has keys, the cluster has none?)" : noKeys}`,
      );
    else if (!handshaken || !redial) fail(`${code}: ${altered}`);
    else {
      persisting(code, altered);
      if (!failed) setTimeout(() => !failed && redial(), REDIAL_AFTER_MS);
    }
  });
  sock.events.on("handshake:error:other", (e) =>
    persisting(
      e.error?.message ?? "connection dropped",
      keys ? "the server drops this process's hello: its keys are not the cluster's" : noKeys,
    ),
  );
}

/** ZeroMQ's own reconnect interval (its default): a redial after a protocol error waits as long. */
const REDIAL_AFTER_MS = 100;
const FAILURES_IN_A_ROW = 8;
const FAILURE_WINDOW_MS = 5000;

// ---- ZAP: the check of client keys ----------------------------------------------------------------

const ZAP_DOMAIN = "torl";
let zap: Promise<zmq.Router> | null = null;
/** Open CURVE server sockets: the handler's pending receive keeps the process alive, so it closes with the last. */
let zapUsers = 0;

/** ZeroMQ asks the socket bound at this inproc address whether to admit each CURVE client. */
async function ensureZapHandler(): Promise<void> {
  zap ??= (async () => {
    await zapClosing; // the address is free only once the previous handler closed
    const sock = new zmq.Router();
    sock.linger = 0;
    await sock.bind("inproc://zeromq.zap.01");
    void serveZap(sock);
    return sock;
  })();
  await zap;
}

let zapClosing: Promise<void> = Promise.resolve();

function closeZapHandler(): void {
  const z = zap;
  zap = null;
  if (z) zapClosing = z.then((sock) => sock.close()).catch(() => {});
}

async function serveZap(sock: zmq.Router): Promise<void> {
  try {
    for await (const frames of sock) {
      // [routing id, "", version, request id, domain, address, identity, mechanism, ...credentials]
      const [rid, empty, version, requestId, , address, , mechanism, clientKey] = frames;
      const wanted = keys ? z85Decode(keys.publicKey) : null;
      const ok =
        mechanism?.toString() === "CURVE" &&
        wanted !== null &&
        clientKey !== undefined &&
        Buffer.compare(clientKey, wanted) === 0;
      if (!ok)
        noteRefusal(
          `refused a connection from ${address?.toString() ?? "?"}`,
          `its ${mechanism?.toString() ?? "?"} key is not this cluster's key`,
        );
      await sock.send([
        rid!,
        empty!,
        version ?? "1.0",
        requestId ?? "",
        ok ? "200" : "400",
        ok ? "OK" : "not a key of this cluster",
        ok ? "torl" : "",
        "",
      ]);
    }
  } catch (e) {
    if (!sock.closed)
      logWarn(`ZAP handler stopped: ${(e as Error).message}; CURVE connections now wait unanswered`);
  }
}

const Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

function z85Decode(s: string): Buffer {
  const out = Buffer.alloc((s.length / 5) * 4);
  for (let i = 0, o = 0; i < s.length; i += 5, o += 4) {
    let v = 0;
    for (let j = 0; j < 5; j++) v = v * 85 + Z85_CHARS.indexOf(s[i + j]!);
    out.writeUInt32BE(v, o);
  }
  return out;
}

// ---- refusals are logged, at most once a minute per peer address ----------------------------------

const lastRefusal = new Map<string, number>();
let refusals = 0;

function noteRefusal(what: string, why: string): void {
  refusals++;
  const now = Date.now();
  if ((lastRefusal.get(what) ?? 0) > now - 60_000) return;
  lastRefusal.set(what, now);
  logWarn(`${what}: ${why} (refusals so far: ${refusals}; the same one is logged at most once a minute)`);
}

/** How many connections this process refused (for status). */
export function refusedConnections(): number {
  return refusals;
}
