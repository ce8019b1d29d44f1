/**
 * The head's node table: the node agents that registered, their resource pools, and their
 * heartbeats. A node silent for longer than the node timeout is declared dead and never rejoins.
 */
import { logWarn } from "../log.js";
import type { HeadToNode, NodeRegistered, NodeToHead } from "./messages.js";
import { formatResources, makePool, type Pool, type Resources } from "./resources.js";

export interface HeadNode {
  nodeId: string;
  ip: string;
  /** The node agent's routing id on the head's socket. */
  peer: Buffer;
  pool: Pool;
  alive: boolean;
  lastHeartbeat: number;
  pid: number;
  labels: Record<string, string>;
}

/** What the head tells a node that was declared dead and still beats. */
export const DECLARED_DEAD: HeadToNode = {
  t: "shutdown",
  reason: `declared dead by the head after missing heartbeats; its actors were failed or restarted elsewhere, so it may not rejoin (start it again to add a fresh node)`,
};

export class NodeTable {
  private nodes = new Map<string, HeadNode>();

  /** `timeoutMs`: a node with no heartbeat for this long is declared dead (Infinity: never). */
  constructor(readonly timeoutMs: number) {}

  register(peer: Buffer, m: Extract<NodeToHead, { t: "registerNode" }>, now = Date.now()): NodeRegistered {
    const total: Resources = { ...(m.resources ?? {}) };
    delete total.GPU;
    this.nodes.set(m.nodeId, {
      nodeId: m.nodeId,
      ip: m.ip,
      peer,
      pool: makePool(total, m.gpuIds ?? []),
      alive: true,
      lastHeartbeat: now,
      pid: m.pid,
      labels: m.labels ?? {},
    });
    return { nodeId: m.nodeId, nodeTimeoutMs: this.timeoutMs };
  }

  get(nodeId: string): HeadNode | undefined {
    return this.nodes.get(nodeId);
  }

  /** Every node ever registered, dead ones included, in registration order. */
  all(): HeadNode[] {
    return [...this.nodes.values()];
  }

  /** The live nodes, in registration order. */
  alive(): HeadNode[] {
    return this.all().filter((n) => n.alive);
  }

  get size(): number {
    return this.nodes.size;
  }

  /** The live node at this IP (the first registered), where a driver that joined runs. */
  at(ip: unknown): string | undefined {
    for (const n of this.nodes.values()) if (n.alive && n.ip === ip) return n.nodeId;
    return undefined;
  }

  /**
   * A heartbeat from `nodeId`: what to answer it with. A live node gets an ack (without acks for as
   * long as the node timeout it fences itself); a node declared dead is told to shut down, since its
   * actors were failed or restarted elsewhere; an unknown node gets nothing.
   */
  heartbeat(nodeId: string, now = Date.now()): HeadToNode | null {
    const n = this.nodes.get(nodeId);
    if (!n) return null;
    if (n.alive) {
      n.lastHeartbeat = now;
      return { t: "nodeHeartbeatAck" };
    }
    logWarn(`head: refused node ${n.nodeId} (${n.ip}): it was declared dead and may not rejoin`);
    return DECLARED_DEAD;
  }

  /**
   * Declares dead each live node silent for longer than the timeout, one at a time: `onDead` runs for
   * a node (its actors and bundles go) before the next one is looked at.
   */
  expire(onDead: (n: HeadNode) => void, now = Date.now()): void {
    for (const n of this.nodes.values()) {
      const silentMs = now - n.lastHeartbeat;
      if (!n.alive || silentMs <= this.timeoutMs) continue;
      n.alive = false;
      logWarn(`head: node ${n.nodeId} (${n.ip}) missed heartbeats for ${silentMs} ms; marking it dead`);
      onDead(n);
    }
  }

  /** The live nodes and what each holds, for error messages ("no nodes" when there are none). */
  describe(): string {
    return (
      this.alive()
        .map((n) => `${n.nodeId}: {${formatResources(n.pool.total)}}`)
        .join("; ") || "no nodes"
    );
  }
}
