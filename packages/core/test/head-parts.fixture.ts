/**
 * The head's parts without a socket, for their unit tests: an outbox that records what is sent,
 * node registration, actor specs, and the parts wired to each other as the head wires them.
 */
import { ActorDirectory } from "../src/cluster/actor-directory.js";
import type { ClientToHead, HeadToClient, HeadToNode } from "../src/cluster/messages.js";
import { NodeTable } from "../src/cluster/node-table.js";
import type { Outbox } from "../src/cluster/outbox.js";
import { PlacementGroups } from "../src/cluster/placement-groups.js";
import type { Resources } from "../src/cluster/resources.js";
import { Scheduler } from "../src/cluster/scheduler.js";
import type { ActorSpec } from "../src/runtime/protocol.js";

export type Sent = { to: string; m: HeadToNode | HeadToClient };

/** An outbox that keeps each message with the key of the peer it went to. */
export class Recorder implements Outbox {
  sent: Sent[] = [];

  send(peer: Buffer, m: HeadToNode | HeadToClient): void {
    this.sent.push({ to: peer.toString("latin1"), m });
  }

  sendTo(key: string, m: HeadToClient): void {
    this.sent.push({ to: key, m });
  }

  /** The messages of type `t` sent so far, which are then forgotten (the others are kept). */
  take<T extends Sent["m"]["t"]>(t: T): Array<{ to: string; m: Extract<Sent["m"], { t: T }> }> {
    const found = this.sent.filter((s) => s.m.t === t);
    this.sent = this.sent.filter((s) => s.m.t !== t);
    return found as Array<{ to: string; m: Extract<Sent["m"], { t: T }> }>;
  }
}

/** A client runtime's hello (a driver that beats unless told otherwise). */
export function hello(
  clientId: string,
  more: Partial<Extract<ClientToHead, { t: "hello" }>> = {},
): Extract<ClientToHead, { t: "hello" }> {
  return {
    t: "hello",
    clientId,
    address: { tcp: "tcp://127.0.0.1:1" },
    nodeIp: "127.0.0.1",
    pid: 7,
    heartbeats: true,
    ...more,
  };
}

/** Registers a node whose agent's peer key is its id. */
export function addNode(
  nodes: NodeTable,
  nodeId: string,
  resources: Resources,
  gpuIds: number[] = [],
  now?: number,
) {
  return nodes.register(
    Buffer.from(nodeId, "latin1"),
    { t: "registerNode", nodeId, ip: `ip-of-${nodeId}`, resources, gpuIds, pid: 100 },
    now,
  );
}

/** An actor spec of class A owned by the client "driver", taking one CPU unless told otherwise. */
export function spec(actorId: string, more: Partial<ActorSpec> = {}): ActorSpec {
  return {
    actorId,
    module: "file:///actor.js",
    className: "A",
    args: { h: new Uint8Array(), f: [] },
    resources: { CPU: 1 },
    maxRestarts: 0,
    maxConcurrency: 1,
    ownerClientId: "driver",
    ...more,
  };
}

/**
 * Node table, actor directory, placement groups and scheduler wired as the head wires them; the
 * workers that are gone are listed (the head would end the clients inside them).
 */
export function wiredParts(nodeTimeoutMs = Number.POSITIVE_INFINITY) {
  const out = new Recorder();
  const nodes = new NodeTable(nodeTimeoutMs);
  const workersGone: string[] = [];
  const actors: ActorDirectory = new ActorDirectory(nodes, out, {
    infeasible: (s) => scheduler.infeasible(s),
    enqueue: (id) => scheduler.enqueue(id),
    schedule: () => scheduler.schedule(),
    workerGone: (id) => workersGone.push(id),
  });
  const pgs = new PlacementGroups(nodes, {
    schedule: () => scheduler.schedule(),
    killActorsIn: (pgId) => actors.killInGroup(pgId),
  });
  const scheduler = new Scheduler(nodes, pgs, actors, out);
  return { out, nodes, actors, pgs, scheduler, workersGone };
}
