/**
 * ZeroMQ sockets with batched writes: a Dealer link to one peer and a Router server for many.
 * Messages pushed in the same tick (or while a send is blocked) leave as one multipart message.
 */
import { randomBytes } from "node:crypto";
import * as zmq from "zeromq";
import { ClusterAuthError } from "../errors.js";
import { logDebug, logWarn } from "../log.js";
import { buildBatch, MAX_WIRE_FRAME_BYTES, parseBatch } from "./batch.js";
import { type Encoded, encode } from "./codec.js";
import { secureClientSocket, secureServerSocket, watchHandshake } from "./security.js";

const MAX_BATCH = 4096;

/** Outgoing TCP connections go through the SOCKS5 proxy TORL_SOCKS_PROXY ("host:port") when set. */
export function viaSocksProxy(sock: zmq.Socket, endpoint: string): void {
  const proxy = process.env.TORL_SOCKS_PROXY;
  if (proxy && endpoint.startsWith("tcp://")) sock.socksProxy = proxy;
}

/**
 * The transport's socket settings: nothing lingers after close, no high-water mark drops or blocks
 * messages (the runtime bounds its own queues), and no frame over MAX_FRAME_BYTES is accepted (so a
 * peer, authenticated or not, cannot make the socket buffer more for one frame; batch.ts cuts
 * larger ones into pieces). The benchmark's raw floor uses them too.
 */
export function tuneSocket(sock: zmq.Dealer | zmq.Router): void {
  sock.linger = 0;
  sock.sendHighWaterMark = 0;
  sock.receiveHighWaterMark = 0;
  sock.maxMessageSize = MAX_WIRE_FRAME_BYTES;
}

/** Connects a client socket to a server of the cluster: its keys (if any), the proxy (if set), the endpoint. */
export function connectClient(sock: zmq.Socket, endpoint: string): void {
  secureClientSocket(sock);
  viaSocksProxy(sock, endpoint);
  sock.connect(endpoint);
}

/**
 * What both sockets share: batched writes (whatever is queued while a send is running, or within one
 * tick, leaves as one multipart message) and a read loop that splits batches and isolates handlers.
 */
abstract class BatchingSocket<S extends zmq.Dealer | zmq.Router> {
  protected scheduled = false;
  protected busy = false;
  protected closed = false;

  constructor(
    readonly sock: S,
    protected label: string,
  ) {
    tuneSocket(sock);
  }

  /** Sends what is queued, and what gets queued meanwhile, until nothing is left or the socket closes. */
  protected abstract drain(): Promise<void>;

  /** Whether anything is queued. */
  protected abstract pending(): boolean;

  /** Forgets what is still queued (on close). */
  protected abstract discard(): void;

  /** A flush on the next microtask, unless one is running or already due. */
  protected schedule(): void {
    if (!this.scheduled && !this.busy) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  protected async flush(): Promise<void> {
    this.scheduled = false;
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      await this.drain();
    } catch (e) {
      if (!this.closed) logWarn(`${this.label}: send failed: ${(e as Error).message}`);
    } finally {
      this.busy = false;
      // a message queued between drain()'s last check and here saw a busy socket and scheduled nothing
      if (!this.closed && this.pending()) this.schedule();
    }
  }

  /** Delivers every message of every batch; `frames` sees each raw multipart message first. */
  protected async readLoop(
    firstFrame: number,
    deliver: (parts: Buffer[], msg: any) => void,
    frames: (parts: Buffer[]) => void = () => {},
  ): Promise<void> {
    try {
      for await (const parts of this.sock) {
        frames(parts);
        // a message that does not decode arrives as an UndecodableMessage for its handler to answer
        const msgs = parseBatch(parts, firstFrame);
        for (const m of msgs) {
          try {
            deliver(parts, m);
          } catch (e) {
            logWarn(`${this.label}: handler failed: ${(e as Error).stack}`);
          }
        }
      }
    } catch (e) {
      if (!this.closed) logWarn(`${this.label}: receive stopped: ${(e as Error).message}`);
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.discard();
    try {
      this.sock.close();
    } catch {}
  }
}

/** A connection to one peer (a worker, an owner of objects, or the head). */
export class DealerLink extends BatchingSocket<zmq.Dealer> {
  private queue: Encoded[] = [];

  /** Set once the secure handshake with the peer failed; the link is closed then. */
  authError: ClusterAuthError | null = null;
  /**
   * Runs when the connection came back after it broke. What was in flight when it broke may be lost
   * (ZeroMQ re-sends only what it had not yet written), so owners re-send what is still unanswered.
   */
  onReconnect: (() => void) | null = null;

  /**
   * `onAuthFailure` runs once if the peer refuses this process's keys (or the lack of them): the link
   * closes, and whoever waits on it must fail with the error instead of waiting forever. The error is
   * also logged, unless `onAuthFailure` returns true: it reached a caller, who reports it.
   */
  constructor(
    readonly endpoint: string,
    onMessage: (msg: any) => void,
    label = endpoint,
    onAuthFailure?: (err: ClusterAuthError) => unknown,
  ) {
    super(new zmq.Dealer(), label);
    // one identity across reconnections: the server's replies find this link again (handover)
    this.sock.routingId = `L${randomBytes(8).toString("hex")}`;
    let broken = false;
    this.sock.events.on("disconnect", () => {
      broken = true;
    });
    this.sock.events.on("handshake", () => {
      if (!broken || this.closed) return;
      broken = false;
      logDebug(`${this.label}: connection back after a break; re-sending what has no answer`);
      this.onReconnect?.();
    });
    watchHandshake(
      this.sock,
      (reason) => {
        if (this.closed) return;
        this.authError = new ClusterAuthError(endpoint, reason);
        this.close();
        if (onAuthFailure?.(this.authError) !== true) logWarn(`${this.label}: ${this.authError.message}`);
      },
      () => {
        if (this.closed) return;
        logDebug(
          `${this.label}: a connection that had worked broke the protocol; dialling ${endpoint} again`,
        );
        try {
          this.sock.disconnect(endpoint);
        } catch {} // ZeroMQ may have dropped the endpoint already
        connectClient(this.sock, endpoint);
      },
    );
    try {
      connectClient(this.sock, endpoint);
    } catch (e) {
      // an endpoint ZeroMQ refuses (EINVAL): an open socket left behind would keep the process alive
      this.close();
      throw new Error(`cannot connect to ${endpoint}: ${(e as Error).message}`, { cause: e });
    }
    void this.readLoop(0, (_parts, m) => onMessage(m));
  }

  send(msg: unknown): void {
    this.sendEncoded(encode(msg));
  }

  sendEncoded(e: Encoded): void {
    if (this.closed) return;
    this.queue.push(e);
    if (this.queue.length === 1 && !this.scheduled && !this.busy) {
      // idle link: send now (lowest latency); what follows in this tick batches behind it
      void this.flush();
      return;
    }
    this.schedule();
  }

  protected async drain(): Promise<void> {
    while (this.queue.length > 0 && !this.closed) {
      const batch = this.queue.length <= MAX_BATCH ? this.queue : this.queue.slice(0, MAX_BATCH);
      this.queue = this.queue.length <= MAX_BATCH ? [] : this.queue.slice(MAX_BATCH);
      await this.sock.send(buildBatch(batch));
    }
  }

  protected pending(): boolean {
    return this.queue.length > 0;
  }

  protected discard(): void {
    this.queue = [];
  }
}

interface Pending {
  id: Buffer;
  msgs: Encoded[];
}

/** A bound Router: receives from many peers (identified by routing id) and replies in batches. */
export class RouterServer extends BatchingSocket<zmq.Router> {
  private out = new Map<string, Pending>();
  readonly endpoints: string[] = [];
  /** Bytes received so far (all frames). */
  bytesIn = 0;

  constructor(
    private onMessage: (peer: Buffer, msg: any) => void,
    label: string,
  ) {
    super(new zmq.Router(), label);
    // a client that reconnects with its identity takes over from its broken connection
    this.sock.handover = true;
  }

  private unsecure: (() => void) | null = null;

  async bind(endpoint: string): Promise<string> {
    // socket options apply to endpoints bound after they are set: secure before the first bind
    this.unsecure ??= await secureServerSocket(this.sock, this.label);
    await this.sock.bind(endpoint);
    const real = this.sock.lastEndpoint ?? endpoint;
    this.endpoints.push(real);
    return real;
  }

  start(): void {
    void this.readLoop(
      1,
      (parts, m) => this.onMessage(parts[0]!, m),
      (parts) => {
        for (const p of parts) this.bytesIn += p.byteLength;
      },
    );
  }

  send(peer: Buffer, msg: unknown): void {
    this.sendEncoded(peer, encode(msg));
  }

  sendEncoded(peer: Buffer, e: Encoded): void {
    if (this.closed) return;
    const key = peer.toString("latin1");
    let p = this.out.get(key);
    if (!p) this.out.set(key, (p = { id: peer, msgs: [] }));
    p.msgs.push(e);
    this.schedule();
  }

  protected async drain(): Promise<void> {
    while (this.out.size > 0 && !this.closed) {
      const batches = [...this.out.values()];
      this.out.clear();
      for (const b of batches) {
        for (let i = 0; i < b.msgs.length; i += MAX_BATCH) {
          await this.sock.send([b.id, ...buildBatch(b.msgs.slice(i, i + MAX_BATCH))]);
        }
      }
    }
  }

  protected pending(): boolean {
    return this.out.size > 0;
  }

  protected discard(): void {
    this.out.clear();
  }

  override close(): void {
    super.close();
    this.unsecure?.();
  }
}
