/**
 * The head's table of client runtimes: drivers and the runtimes inside workers, each said hello.
 * Drivers beat every second and are taken for dead when silent; workers live as long as their
 * process, whose end the node agent reports.
 */
import type { ClientToHead } from "./messages.js";
import type { Outbox } from "./outbox.js";

export interface ClientEntry {
  clientId: string;
  pid: number;
  /** Its routing id on the head's socket, as latin1. */
  peerKey: string;
  /** The actor whose worker this runtime is, for a worker. */
  actorId?: string;
  /** The last heartbeat (Infinity for a runtime that does not beat). */
  lastSeen: number;
  /** A driver that asked for its actors' and tasks' output. */
  logs: boolean;
}

export class ClientTable {
  private clients = new Map<string, ClientEntry>();
  private clientIdOfActor = new Map<string, string>();

  /** `timeoutMs`: a driver silent this long is taken for dead (default 8000 ms, env TORL_CLIENT_TIMEOUT_MS). */
  constructor(readonly timeoutMs = Number(process.env.TORL_CLIENT_TIMEOUT_MS ?? 8000)) {}

  hello(m: Extract<ClientToHead, { t: "hello" }>, peerKey: string, now = Date.now()): void {
    this.clients.set(m.clientId, {
      clientId: m.clientId,
      pid: m.pid,
      peerKey,
      actorId: m.actorId,
      lastSeen: m.heartbeats ? now : Number.POSITIVE_INFINITY,
      logs: m.logs === true,
    });
    if (m.actorId) this.clientIdOfActor.set(m.actorId, m.clientId);
  }

  heartbeat(clientId: string, now = Date.now()): void {
    const c = this.clients.get(clientId);
    if (c) c.lastSeen = now;
  }

  /** Every live process said hello before it could own an object; gone ones were removed. */
  has(clientId: string): boolean {
    return this.clients.has(clientId);
  }

  get(clientId: string): ClientEntry | undefined {
    return this.clients.get(clientId);
  }

  /** Every client said hello and not gone. */
  all(): ClientEntry[] {
    return [...this.clients.values()];
  }

  /** The drivers that asked for worker output. */
  wantingLogs(): ClientEntry[] {
    return [...this.clients.values()].filter((c) => c.logs);
  }

  get size(): number {
    return this.clients.size;
  }

  /** The clients silent for longer than the timeout, with how long each was silent. */
  silent(now = Date.now()): Array<{ client: ClientEntry; silentMs: number }> {
    return [...this.clients.values()]
      .map((client) => ({ client, silentMs: now - client.lastSeen }))
      .filter((s) => s.silentMs > this.timeoutMs);
  }

  /**
   * Forgets a client that left or died and tells the others: fetches of objects it owned can never be
   * answered. Returns how to name it as an owner (its pid, or its id if it is not known here).
   */
  gone(clientId: string, out: Outbox): string {
    const c = this.clients.get(clientId);
    this.clients.delete(clientId);
    for (const other of this.clients.values()) out.sendTo(other.peerKey, { t: "clientGone", clientId });
    return c ? `pid ${c.pid}` : clientId;
  }

  /** The runtime inside the worker of actor `actorId`, if it said hello. */
  clientOfActor(actorId: string): string | undefined {
    return this.clientIdOfActor.get(actorId);
  }

  /** The runtime inside the worker of actor `actorId`, forgotten as it is taken (the worker is gone). */
  takeClientOfActor(actorId: string): string | undefined {
    const clientId = this.clientIdOfActor.get(actorId);
    this.clientIdOfActor.delete(actorId);
    return clientId;
  }
}
