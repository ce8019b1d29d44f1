/** Request/reply and pushed updates between a process's runtime and the head. */

import type { ClientToHead, HeadReplies } from "../cluster/messages.js";
import {
  ActorNameTakenError,
  ActorNotFoundError,
  HeadError,
  InfeasibleResourceError,
  InputError,
  MessageDecodeError,
  PlacementGroupError,
  ResourceRequestError,
} from "../errors.js";
import { logWarn } from "../log.js";
import { UndecodableMessage } from "../wire/batch.js";
import type { WireError } from "../wire/codec.js";
import { DealerLink } from "../wire/links.js";

/** The fields of client message `K` besides its type. */
type MessageBody<K extends ClientToHead["t"]> = Omit<Extract<ClientToHead, { t: K }>, "t">;

export class HeadClient {
  private link: DealerLink;
  private rid = 0;
  private pending = new Map<
    number,
    { resolve: (v: any) => void; reject: (e: Error) => void; t: string; msg: Record<string, unknown> }
  >();
  /** Runs after the requests in flight were sent again on a connection that broke and came back. */
  onReconnect: (() => void) | null = null;

  constructor(
    readonly endpoint: string,
    private onPush: (msg: any) => void,
  ) {
    this.link = new DealerLink(
      endpoint,
      (m) => this.onMessage(m),
      `head ${endpoint}`,
      (err) => this.failAll(err),
    );
    // requests sent before the connection broke may be lost: send again what has no answer yet
    // (the head answers a repeated request as it did the first: each is idempotent)
    this.link.onReconnect = () => {
      for (const p of this.pending.values()) this.link.send(p.msg);
      this.onReconnect?.();
    };
  }

  /**
   * The head refused this process's keys: every request fails with the error, now and later. True
   * when a request was waiting (its caller reports the error, so the link need not log it too).
   */
  private failAll(err: Error): boolean {
    const waiting = this.pending.size > 0;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    return waiting;
  }

  request<K extends keyof HeadReplies>(t: K, body: MessageBody<K>, timeoutMs = 0): Promise<HeadReplies[K]> {
    const rid = ++this.rid;
    return new Promise<HeadReplies[K]>((resolve, reject) => {
      if (this.link.authError) return reject(this.link.authError);
      const msg = { ...body, t, rid };
      this.pending.set(rid, { resolve, reject, t, msg });
      this.link.send(msg);
      if (timeoutMs > 0) {
        setTimeout(() => {
          if (this.pending.delete(rid)) {
            reject(
              new HeadError(`no answer from the head at ${this.endpoint} to '${t}' within ${timeoutMs} ms`),
            );
          }
        }, timeoutMs).unref();
      }
    });
  }

  notify<K extends ClientToHead["t"]>(t: K, body: MessageBody<K>): void {
    this.link.send({ ...body, t });
  }

  private onMessage(m: any): void {
    if (m instanceof UndecodableMessage || m?.t === "undecodable" || !m || typeof m !== "object") {
      // a lost reply (ours to decode, or our request at the head): fail every request still waiting
      const reason =
        m instanceof UndecodableMessage
          ? `a message from the head: ${m.reason}`
          : m?.t === "undecodable"
            ? `the head could not decode a message from this process: ${m.reason}`
            : "the head sent a message that is not an object";
      logWarn(`head client: ${reason}`);
      for (const p of this.pending.values()) p.reject(new MessageDecodeError(`'${p.t}' failed: ${reason}`));
      this.pending.clear();
      return;
    }
    if (m.t === "refused") {
      logWarn(`the head refused '${m.request}': ${m.e?.name}: ${m.e?.message}`);
      return;
    }
    if (m.t === "re") {
      const p = this.pending.get(m.rid);
      if (!p) return;
      this.pending.delete(m.rid);
      if (m.ok) p.resolve(m.v);
      else p.reject(headErrorFromWire(m.e));
      return;
    }
    this.onPush(m);
  }

  close(): void {
    for (const p of this.pending.values())
      p.reject(new HeadError(`connection to the head closed during '${p.t}'`));
    this.pending.clear();
    this.link.close();
  }
}

/** Errors the head may answer with, rebuilt as these classes by the process that asked. */
const HEAD_ERRORS: Record<string, new (message: string) => Error> = {
  ActorNotFoundError,
  ActorNameTakenError,
  PlacementGroupError,
  InfeasibleResourceError,
  ResourceRequestError,
  InputError,
  HeadError,
};

/** The typed error for a refusal from the head (any other name becomes a HeadError). */
export function headErrorFromWire(wire: Partial<WireError> | undefined): Error {
  const Cls = HEAD_ERRORS[wire?.name ?? ""] ?? HeadError;
  const err = new Cls(wire?.message ?? "the head refused the request");
  for (const [k, v] of Object.entries(wire?.data ?? {})) if (!(k in err)) (err as any)[k] = v;
  if (wire?.stack) err.stack = `${err.name}: ${err.message}\n  --- at the head ---\n${wire.stack}`;
  return err;
}
