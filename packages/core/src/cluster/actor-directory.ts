/**
 * The head's actor directory: every actor created, its state (PENDING, ALIVE, RESTARTING, DEAD) and
 * incarnation, named actors, who subscribed to its news, and its restarts. An actor whose worker is
 * gone restarts while it has restarts left (maxRestarts; < 0 for unlimited), then is DEAD with the
 * cause. Placing actors on nodes is the scheduler's; the directory asks it through its hooks.
 */
import { ActorNameTakenError, ActorNotFoundError, type DeathCause } from "../errors.js";
import type { ActorSpec, ActorState, ActorUpdate } from "../runtime/protocol.js";
import type { HeadReplies, NodeToHead } from "./messages.js";
import type { HeadNode, NodeTable } from "./node-table.js";
import type { Outbox } from "./outbox.js";
import { type Allocation, type Pool, release, validateRequest } from "./resources.js";

export interface HeadActor {
  spec: ActorSpec;
  state: ActorState;
  /** Bumped on each restart and at death: news and reports of an older incarnation are stale. */
  incarnation: number;
  restartsLeft: number;
  /** Where it is placed (set by the scheduler), with the pool it draws from and what it holds. */
  nodeId?: string;
  pool?: Pool;
  alloc?: Allocation;
  endpoint?: ActorUpdate["endpoint"];
  pid?: number;
  /** The keys of the peers told of its changes. */
  subscribers: Set<string>;
  killed: boolean;
  /** Why it was killed when not by kill(): its owner died or left. */
  killCause?: DeathCause;
  cause?: DeathCause;
}

/** What the directory asks of the rest of the head. */
export interface DirectoryHooks {
  /** Why this spec can never be placed, or null (the scheduler). */
  infeasible(spec: ActorSpec): string | null;
  /** Queue the actor for placement. */
  enqueue(actorId: string): void;
  /** Resources changed or actors wait: place what fits. */
  schedule(): void;
  /** The worker of this actor is gone: what the runtime inside it owned goes too. */
  workerGone(actorId: string): void;
}

export class ActorDirectory {
  private actors = new Map<string, HeadActor>();
  private named = new Map<string, string>();

  constructor(
    private nodes: NodeTable,
    private out: Outbox,
    private hooks: DirectoryHooks,
  ) {}

  get(actorId: string): HeadActor | undefined {
    return this.actors.get(actorId);
  }

  /** Every actor ever created, dead ones included, in creation order. */
  entries(): Array<[string, HeadActor]> {
    return [...this.actors.entries()];
  }

  /**
   * Records a new actor (the creator subscribes to it) and queues it for placement, or marks it DEAD at
   * once when it can never be placed. The same request again (sent twice over a broken connection)
   * creates nothing new.
   */
  create(spec: ActorSpec, subscriberKey: string): HeadReplies["createActor"] {
    if (this.actors.has(spec.actorId)) return { actorId: spec.actorId };
    validateRequest(spec.resources);
    if (spec.name) {
      const existing = this.named.get(spec.name);
      if (existing && this.actors.get(existing)?.state !== "DEAD") {
        throw new ActorNameTakenError(`an actor named '${spec.name}' already exists`);
      }
    }
    const a: HeadActor = {
      spec,
      state: "PENDING",
      incarnation: 0,
      restartsLeft: spec.maxRestarts < 0 ? Number.POSITIVE_INFINITY : spec.maxRestarts,
      subscribers: new Set([subscriberKey]),
      killed: false,
    };
    this.actors.set(spec.actorId, a);
    if (spec.name) this.named.set(spec.name, spec.actorId);
    const why = this.hooks.infeasible(spec);
    if (why) {
      this.setDead(spec.actorId, a, { kind: "infeasible", message: why });
      return { actorId: spec.actorId };
    }
    this.hooks.enqueue(spec.actorId);
    this.hooks.schedule();
    return { actorId: spec.actorId };
  }

  /** Subscribes the peer `key` to an actor's news and sends it the news so far (DEAD for an unknown actor). */
  subscribe(actorId: string, key: string): void {
    const a = this.actors.get(actorId);
    if (a) {
      a.subscribers.add(key);
      this.out.sendTo(key, update(actorId, a));
    } else
      this.out.sendTo(key, {
        t: "actor",
        actorId,
        state: "DEAD",
        incarnation: 1e9,
        cause: { kind: "unknown", message: "no such actor at the head" },
      });
  }

  byName(name: string): HeadReplies["getActor"] {
    const id = this.named.get(name);
    const a = id ? this.actors.get(id) : undefined;
    if (!id || !a || a.state === "DEAD") throw new ActorNotFoundError(`no live actor named '${name}'`);
    return { actorId: id, name };
  }

  /** The scheduler placed the actor: it holds `alloc` of `pool` on `nodeId` until its worker is gone. */
  placed(a: HeadActor, nodeId: string, pool: Pool, alloc: Allocation): void {
    a.nodeId = nodeId;
    a.pool = pool;
    a.alloc = alloc;
  }

  /** Its worker constructed the actor (reports of an older incarnation are ignored). */
  ready(m: Extract<NodeToHead, { t: "actorReady" }>): void {
    const a = this.live(m.actorId, m.incarnation);
    if (!a) return;
    a.state = "ALIVE";
    a.endpoint = m.endpoint;
    a.pid = m.pid;
    this.publish(m.actorId, a);
  }

  /** Its constructor threw: the actor is DEAD (no restart), its worker is stopped. */
  failed(m: Extract<NodeToHead, { t: "actorFailed" }>): void {
    const a = this.live(m.actorId, m.incarnation);
    if (!a) return;
    const err = m.error;
    const node = a.nodeId ? this.nodes.get(a.nodeId) : undefined;
    if (node) this.out.send(node.peer, { t: "killWorker", actorId: m.actorId, incarnation: a.incarnation });
    this.freeAlloc(a);
    this.setDead(m.actorId, a, {
      kind: "creation_failed",
      message: `its constructor threw ${err?.name}: ${err?.message}${err?.stack ? `\n${err.stack}` : ""}`,
      creationError: err,
    });
    this.hooks.schedule();
  }

  /** Its worker process ended: killed, or exited unexpectedly (then it may restart). */
  workerExit(m: Extract<NodeToHead, { t: "workerExit" }>): void {
    const a = this.live(m.actorId, m.incarnation);
    if (!a) return;
    const killed = a.killed;
    this.gone(m.actorId, a, {
      kind: killed ? (a.killCause?.kind ?? "killed") : "exited",
      message: killed
        ? (a.killCause?.message ?? "it was killed by kill()")
        : `its worker process (pid ${m.pid}) exited unexpectedly${m.signal ? ` on signal ${m.signal}` : ` with code ${m.code}`}`,
      exitCode: m.code,
      signal: m.signal,
      nodeId: a.nodeId,
    });
  }

  /** The node died: each actor starting or alive on it is gone. */
  nodeDied(n: HeadNode): void {
    for (const [id, a] of this.actors) {
      if (a.nodeId === n.nodeId && (a.state === "ALIVE" || a.state === "PENDING")) {
        this.gone(id, a, {
          kind: "node_died",
          message: `its node ${n.nodeId} (${n.ip}) stopped sending heartbeats`,
          nodeId: n.nodeId,
        });
      }
    }
  }

  /**
   * Kills an actor: its node stops the worker (the exit is reported back), or, when it runs nowhere,
   * it is DEAD at once. Without `noRestart` it may restart.
   */
  kill(actorId: string, noRestart: boolean): void {
    const a = this.actors.get(actorId);
    if (!a || a.state === "DEAD") return;
    if (noRestart) a.killed = true;
    const node = a.nodeId ? this.nodes.get(a.nodeId) : undefined;
    if (node?.alive) {
      this.out.send(node.peer, { t: "killWorker", actorId, incarnation: a.incarnation });
    } else if (noRestart) {
      this.freeAlloc(a);
      this.setDead(
        actorId,
        a,
        a.killCause ?? { kind: "killed", message: "it was killed by kill() before it started" },
      );
    }
  }

  /** Kills for good the actors the client `clientId` owns and did not detach (it is gone: `cause`). */
  killOwnedBy(clientId: string, cause: DeathCause): void {
    for (const [id, a] of this.actors) {
      if (a.spec.ownerClientId === clientId && !a.spec.detached && a.state !== "DEAD") {
        a.killed = true;
        a.killCause = cause;
        this.kill(id, true);
      }
    }
  }

  /** Kills for good the actors placed in this placement group (it is being removed). */
  killInGroup(pgId: string): void {
    for (const [id, a] of this.actors) {
      if (a.spec.placementGroup === pgId && a.state !== "DEAD") {
        a.killed = true;
        this.kill(id, true);
      }
    }
  }

  /** DEAD for good, with its cause: its name is free again and subscribers are told. */
  setDead(id: string, a: HeadActor, cause: DeathCause): void {
    this.hooks.workerGone(id);
    a.state = "DEAD";
    a.cause = cause;
    a.incarnation++;
    if (a.spec.name && this.named.get(a.spec.name) === id) this.named.delete(a.spec.name);
    this.publish(id, a);
  }

  /** The actor of this incarnation, unless it is unknown, stale or dead. */
  private live(actorId: string, incarnation: number): HeadActor | undefined {
    const a = this.actors.get(actorId);
    return a && a.incarnation === incarnation && a.state !== "DEAD" ? a : undefined;
  }

  /** Its worker is gone: it restarts while it has restarts left and was not killed, else it is DEAD. */
  private gone(id: string, a: HeadActor, cause: DeathCause): void {
    this.hooks.workerGone(id);
    this.freeAlloc(a);
    a.endpoint = undefined;
    if (!a.killed && a.restartsLeft > 0) {
      a.restartsLeft--;
      a.incarnation++;
      a.state = "RESTARTING";
      a.cause = {
        ...cause,
        message: `${cause.message}; restarting (${a.restartsLeft === Number.POSITIVE_INFINITY ? "unlimited" : a.restartsLeft} restarts left)`,
      };
      this.publish(id, a);
      this.hooks.enqueue(id);
    } else {
      this.setDead(id, a, cause);
    }
    this.hooks.schedule();
  }

  private freeAlloc(a: HeadActor): void {
    if (a.pool && a.alloc) release(a.pool, a.alloc);
    a.pool = undefined;
    a.alloc = undefined;
    a.nodeId = undefined;
  }

  private publish(actorId: string, a: HeadActor): void {
    const u = update(actorId, a);
    for (const key of a.subscribers) this.out.sendTo(key, u);
  }
}

function update(actorId: string, a: HeadActor): ActorUpdate {
  return {
    t: "actor",
    actorId,
    name: a.spec.name,
    state: a.state,
    incarnation: a.incarnation,
    endpoint: a.endpoint,
    nodeId: a.nodeId,
    cause: a.cause,
  };
}
