/** Request/reply and pushed updates between a process's runtime and the head. */
import { DealerLink } from "../wire/links.js";

export class HeadError extends Error {
  override name = "HeadError";
}

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

  /** The head refused this process's keys: every request fails with the error, now and later. */
  private failAll(err: Error): void {
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  request<T = any>(t: string, body: Record<string, unknown> = {}, timeoutMs = 0): Promise<T> {
    const rid = ++this.rid;
    return new Promise<T>((resolve, reject) => {
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

  notify(t: string, body: Record<string, unknown> = {}): void {
    this.link.send({ ...body, t });
  }

  private onMessage(m: any): void {
    if (!m || typeof m !== "object") return;
    if (m.t === "re") {
      const p = this.pending.get(m.rid);
      if (!p) return;
      this.pending.delete(m.rid);
      if (m.ok) p.resolve(m.v);
      else {
        const err = new Error(m.e?.message ?? "head error");
        err.name = m.e?.name ?? "HeadError";
        Object.assign(err, m.e?.data ?? {});
        p.reject(err);
      }
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
