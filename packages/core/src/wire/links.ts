/**
 * ZeroMQ sockets with batched writes: a Dealer link to one peer and a Router server for many.
 * Messages pushed in the same tick (or while a send is blocked) leave as one multipart message.
 */
import * as zmq from "zeromq";
import { logWarn } from "../log.js";
import { buildBatch, MalformedMessageError, parseBatch } from "./batch.js";
import { type Encoded, encode } from "./codec.js";

const MAX_BATCH = 4096;

function tune(sock: zmq.Dealer | zmq.Router): void {
  sock.linger = 0;
  sock.sendHighWaterMark = 0;
  sock.receiveHighWaterMark = 0;
}

/** A connection to one peer (a worker, an owner of objects, or the head). */
export class DealerLink {
  readonly sock = new zmq.Dealer();
  private queue: Encoded[] = [];
  private scheduled = false;
  private busy = false;
  private closed = false;

  constructor(
    readonly endpoint: string,
    private onMessage: (msg: any) => void,
    private label = endpoint,
  ) {
    tune(this.sock);
    this.sock.connect(endpoint);
    void this.readLoop();
  }

  send(msg: unknown): void {
    this.sendEncoded(encode(msg));
  }

  sendEncoded(e: Encoded): void {
    if (this.closed) return;
    this.queue.push(e);
    if (!this.scheduled && !this.busy) {
      if (this.queue.length === 1) {
        // idle link: send now (lowest latency); what follows in this tick batches behind it
        void this.flush();
        return;
      }
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const batch = this.queue.length <= MAX_BATCH ? this.queue : this.queue.slice(0, MAX_BATCH);
        this.queue = this.queue.length <= MAX_BATCH ? [] : this.queue.slice(MAX_BATCH);
        await this.sock.send(buildBatch(batch));
      }
    } catch (e) {
      if (!this.closed) logWarn(`send to ${this.label} failed: ${(e as Error).message}`);
    } finally {
      this.busy = false;
    }
  }

  private async readLoop(): Promise<void> {
    try {
      for await (const parts of this.sock) {
        let msgs: any[];
        try {
          msgs = parseBatch(parts, 0);
        } catch (e) {
          if (e instanceof MalformedMessageError) {
            logWarn(`dropped malformed message from ${this.label}: ${e.message}`);
            continue;
          }
          throw e;
        }
        for (const m of msgs) {
          try {
            this.onMessage(m);
          } catch (e) {
            logWarn(`handler failed for message from ${this.label}: ${(e as Error).stack}`);
          }
        }
      }
    } catch (e) {
      if (!this.closed) logWarn(`receive from ${this.label} stopped: ${(e as Error).message}`);
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.queue = [];
    try {
      this.sock.close();
    } catch {}
  }
}

interface Pending {
  id: Buffer;
  msgs: Encoded[];
}

/** A bound Router: receives from many peers (identified by routing id) and replies in batches. */
export class RouterServer {
  readonly sock = new zmq.Router();
  private out = new Map<string, Pending>();
  private scheduled = false;
  private busy = false;
  private closed = false;
  readonly endpoints: string[] = [];
  /** Bytes received so far (all frames). */
  bytesIn = 0;

  constructor(
    private onMessage: (peer: Buffer, msg: any) => void,
    private label: string,
  ) {
    tune(this.sock);
  }

  async bind(endpoint: string): Promise<string> {
    await this.sock.bind(endpoint);
    const real = this.sock.lastEndpoint ?? endpoint;
    this.endpoints.push(real);
    return real;
  }

  start(): void {
    void this.readLoop();
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
    if (!this.scheduled && !this.busy) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      while (this.out.size > 0 && !this.closed) {
        const batches = [...this.out.values()];
        this.out.clear();
        for (const b of batches) {
          for (let i = 0; i < b.msgs.length; i += MAX_BATCH) {
            await this.sock.send([b.id, ...buildBatch(b.msgs.slice(i, i + MAX_BATCH))]);
          }
        }
      }
    } catch (e) {
      if (!this.closed) logWarn(`${this.label}: send failed: ${(e as Error).message}`);
    } finally {
      this.busy = false;
    }
  }

  private async readLoop(): Promise<void> {
    try {
      for await (const parts of this.sock) {
        const peer = parts[0]!;
        for (const p of parts) this.bytesIn += p.byteLength;
        let msgs: any[];
        try {
          msgs = parseBatch(parts, 1);
        } catch (e) {
          if (e instanceof MalformedMessageError) {
            logWarn(`${this.label}: dropped malformed message (${parts.length} frames): ${e.message}`);
            continue;
          }
          throw e;
        }
        for (const m of msgs) {
          try {
            this.onMessage(peer, m);
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
    this.out.clear();
    try {
      this.sock.close();
    } catch {}
  }
}
