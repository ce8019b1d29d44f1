/**
 * The head: control plane of a cluster. Node table (with heartbeats), actor directory and named
 * actors, placement groups, and the scheduler that places actors on nodes. Data never passes here:
 * callers talk to workers and owners directly.
 */
import {
  ActorNameTakenError,
  ActorNotFoundError,
  type DeathCause,
  InfeasibleResourceError,
  PlacementGroupError,
} from "../errors.js";
import { logWarn } from "../log.js";
import { randomId } from "../runtime/ids.js";
import type { ActorSpec, ActorState, ActorUpdate, PlacementStrategy } from "../runtime/protocol.js";
import { UndecodableMessage } from "../wire/batch.js";
import { errorToWire } from "../wire/codec.js";
import { RouterServer } from "../wire/links.js";
import { clusterKeys, refusedConnections, requireKeysToListen } from "../wire/security.js";
import type {
  ClusterStatus,
  HeadReplies,
  NodeToHead,
  PlacementGroupStatus,
  Reply,
  ToHead,
} from "./messages.js";
import { type Placed, placeBundles } from "./placement.js";
import {
  type Allocation,
  bundlePool,
  clonePool,
  couldEverFit,
  formatResources,
  makePool,
  type Pool,
  type Resources,
  release,
  tryAllocate,
  validateRequest,
} from "./resources.js";

interface HeadNode {
  nodeId: string;
  ip: string;
  peer: Buffer;
  pool: Pool;
  alive: boolean;
  lastHeartbeat: number;
  pid: number;
  labels: Record<string, string>;
}

interface HeadActor {
  spec: ActorSpec;
  state: ActorState;
  incarnation: number;
  restartsLeft: number;
  nodeId?: string;
  pool?: Pool;
  alloc?: Allocation;
  endpoint?: ActorUpdate["endpoint"];
  pid?: number;
  subscribers: Set<string>;
  killed: boolean;
  /** Why it was killed when not by kill(): its owner died or left. */
  killCause?: DeathCause;
  cause?: DeathCause;
}

interface HeadPg {
  pgId: string;
  name?: string;
  bundles: Resources[];
  strategy: PlacementStrategy;
  state: "PENDING" | "CREATED" | "REMOVED" | "INFEASIBLE";
  placed: Array<{ nodeId: string; alloc: Allocation; pool: Pool }> | null;
  waiters: Array<{ peer: Buffer; rid: number }>;
  ownerClientId: string;
  error?: string;
}

export interface HeadOptions {
  host: string;
  port: number;
  /** A node with no heartbeat for this long is declared dead (default 3000 ms, env TORL_NODE_TIMEOUT_MS). */
  nodeTimeoutMs?: number;
}

export class Head {
  private server = new RouterServer((peer, m) => this.onMessage(peer, m), "head");
  private nodes = new Map<string, HeadNode>();
  private actors = new Map<string, HeadActor>();
  private named = new Map<string, string>();
  private pgs = new Map<string, HeadPg>();
  private peers = new Map<string, Buffer>();
  private clients = new Map<
    string,
    { clientId: string; pid: number; peerKey: string; actorId?: string; lastSeen: number }
  >();
  private clientOfActor = new Map<string, string>();
  /** A driver silent this long is taken for dead and its actors are killed (drivers beat every second). */
  private clientTimeoutMs = Number(process.env.TORL_CLIENT_TIMEOUT_MS ?? 8000);
  private pendingActors: string[] = [];
  private timer: NodeJS.Timeout | null = null;
  private nodeTimeoutMs: number;
  address = "";
  readonly startedAt = Date.now();

  constructor(private opts: HeadOptions) {
    this.nodeTimeoutMs = opts.nodeTimeoutMs ?? Number(process.env.TORL_NODE_TIMEOUT_MS ?? 3000);
  }

  async start(): Promise<string> {
    requireKeysToListen(this.opts.host, "the head");
    const ep = await this.server.bind(`tcp://${this.opts.host}:${this.opts.port}`);
    this.server.start();
    this.address = ep.replace(/^tcp:\/\//, "");
    if (Number.isFinite(this.nodeTimeoutMs)) {
      this.timer = setInterval(() => this.checkNodes(), Math.max(100, this.nodeTimeoutMs / 5));
      this.timer.unref();
    }
    return this.address;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const n of this.nodes.values()) if (n.alive) this.server.send(n.peer, { t: "shutdown" });
    setTimeout(() => this.server.close(), 50).unref?.();
  }

  // ---- messages -----------------------------------------------------------------------------

  private reply(peer: Buffer, rid: number, ok: boolean, v: unknown): void {
    const answer: Reply = ok ? { t: "re", rid, ok: true, v } : { t: "re", rid, ok: false, e: errorToWire(v) };
    this.server.send(peer, answer);
  }

  private onMessage(peer: Buffer, raw: unknown): void {
    if (
      raw instanceof UndecodableMessage ||
      !raw ||
      typeof raw !== "object" ||
      typeof (raw as { t?: unknown }).t !== "string"
    ) {
      // the sender cannot be told which request failed: it fails all it has waiting (see HeadClient)
      const reason = raw instanceof UndecodableMessage ? raw.reason : "a message without a type";
      logWarn(`head: a message could not be decoded: ${reason}`);
      this.server.send(peer, { t: "undecodable", reason });
      return;
    }
    // a peer of the same version: its messages are ToHead (an unknown type is refused below)
    const m = raw as ToHead;
    const key = peer.toString("latin1");
    this.peers.set(key, peer);
    try {
      const v = this.handle(peer, key, m);
      if (v !== NO_REPLY && typeof m.rid === "number") this.reply(peer, m.rid, true, v ?? null);
    } catch (e) {
      if (typeof m.rid === "number") this.reply(peer, m.rid, false, e);
      else {
        // a notification (no one waits for a reply): tell the sender anyway
        logWarn(`head: '${m.t}' failed: ${(e as Error).message}`);
        this.server.send(peer, { t: "refused", request: m.t, e: errorToWire(e) });
      }
    }
  }

  private handle(peer: Buffer, key: string, m: ToHead): unknown {
    switch (m.t) {
      // clients
      case "hello":
        this.clients.set(m.clientId, {
          clientId: m.clientId,
          pid: m.pid,
          peerKey: key,
          actorId: m.actorId,
          lastSeen: m.heartbeats ? Date.now() : Number.POSITIVE_INFINITY,
        });
        if (m.actorId) this.clientOfActor.set(m.actorId, m.clientId);
        return { nodes: this.nodes.size, nodeId: this.nodeAt(m.nodeIp) };
      case "clientHeartbeat": {
        const c = this.clients.get(m.clientId);
        if (c) c.lastSeen = Date.now();
        return NO_REPLY;
      }
      case "bye":
        this.onClientGone(m.clientId, "it called shutdown()");
        return null;
      case "clientAlive":
        // every live process said hello before it could own an object; gone ones were removed
        return this.clients.has(m.clientId);
      case "createActor":
        return this.createActor(m.spec, key);
      case "subscribe": {
        const a = this.actors.get(m.actorId);
        if (a) {
          a.subscribers.add(key);
          this.server.send(peer, this.update(m.actorId, a));
        } else
          this.server.send(peer, {
            t: "actor",
            actorId: m.actorId,
            state: "DEAD",
            incarnation: 1e9,
            cause: { kind: "unknown", message: "no such actor at the head" },
          });
        return NO_REPLY;
      }
      case "getActor": {
        const id = this.named.get(m.name);
        const a = id ? this.actors.get(id) : undefined;
        if (!id || !a || a.state === "DEAD") throw new ActorNotFoundError(`no live actor named '${m.name}'`);
        return { actorId: id, name: m.name };
      }
      case "kill":
        this.kill(m.actorId, m.noRestart !== false);
        return null;
      case "createPg":
        return this.createPg(m);
      case "waitPg": {
        const pg = this.pgs.get(m.pgId);
        if (!pg) throw new PlacementGroupError(`no placement group ${m.pgId}`);
        if (pg.state === "CREATED") return pgInfo(pg);
        if (pg.state !== "PENDING") throw pgError(pg);
        if (m.rid === undefined) throw new Error("waitPg is a request: it needs a rid to be answered");
        pg.waiters.push({ peer, rid: m.rid });
        return NO_REPLY;
      }
      case "removePg":
        this.removePg(m.pgId);
        return null;
      case "status":
        return this.status();
      case "clusterResources":
        return this.resourceTotals();
      // node agents
      case "registerNode":
        return this.registerNode(peer, m);
      case "nodeHeartbeat": {
        const n = this.nodes.get(m.nodeId);
        if (n?.alive) {
          n.lastHeartbeat = Date.now();
          // the node counts these: without them for as long as the node timeout, it fences itself
          this.server.send(peer, { t: "nodeHeartbeatAck" });
        } else if (n && !n.alive) {
          // its actors were declared dead (and maybe restarted elsewhere): it may not come back
          logWarn(`head: refused node ${n.nodeId} (${n.ip}): it was declared dead and may not rejoin`);
          this.server.send(peer, {
            t: "shutdown",
            reason: `declared dead by the head after missing heartbeats; its actors were failed or restarted elsewhere, so it may not rejoin (start it again to add a fresh node)`,
          });
        }
        return NO_REPLY;
      }
      case "actorReady":
        this.onActorReady(m);
        return NO_REPLY;
      case "actorFailed":
        this.onActorFailed(m);
        return NO_REPLY;
      case "workerExit":
        this.onWorkerExit(m);
        return NO_REPLY;
      case "undecodable":
        logWarn(`head: a peer could not decode a message from the head: ${m.reason}`);
        return NO_REPLY;
      default:
        throw new Error(`unknown message type '${(m as { t: string }).t}'`);
    }
  }

  // ---- nodes ---------------------------------------------------------------------------------

  private registerNode(peer: Buffer, m: Extract<NodeToHead, { t: "registerNode" }>): unknown {
    const total: Resources = { ...(m.resources ?? {}) };
    delete total.GPU;
    const node: HeadNode = {
      nodeId: m.nodeId,
      ip: m.ip,
      peer,
      pool: makePool(total, m.gpuIds ?? []),
      alive: true,
      lastHeartbeat: Date.now(),
      pid: m.pid,
      labels: m.labels ?? {},
    };
    this.nodes.set(m.nodeId, node);
    this.schedule();
    return { nodeId: m.nodeId, nodeTimeoutMs: this.nodeTimeoutMs };
  }

  /** The live node at this IP (the first registered), where a driver that joined runs. */
  private nodeAt(ip: unknown): string | undefined {
    for (const n of this.nodes.values()) if (n.alive && n.ip === ip) return n.nodeId;
    return undefined;
  }

  private checkNodes(): void {
    const now = Date.now();
    for (const c of [...this.clients.values()]) {
      if (now - c.lastSeen > this.clientTimeoutMs) {
        const silent = now - c.lastSeen;
        logWarn(
          `head: driver ${c.clientId} (pid ${c.pid}) sent no heartbeat for ${silent} ms; killing its actors`,
        );
        this.onClientGone(
          c.clientId,
          `it sent no heartbeat for ${silent} ms (died, or cut off from the head)`,
        );
      }
    }
    for (const n of this.nodes.values()) {
      if (n.alive && now - n.lastHeartbeat > this.nodeTimeoutMs) this.onNodeDead(n, now - n.lastHeartbeat);
    }
  }

  private onNodeDead(n: HeadNode, silentMs: number): void {
    n.alive = false;
    logWarn(`head: node ${n.nodeId} (${n.ip}) missed heartbeats for ${silentMs} ms; marking it dead`);
    for (const [id, a] of this.actors) {
      if (a.nodeId === n.nodeId && (a.state === "ALIVE" || a.state === "PENDING")) {
        this.onActorGone(id, a, {
          kind: "node_died",
          message: `its node ${n.nodeId} (${n.ip}) stopped sending heartbeats`,
          nodeId: n.nodeId,
        });
      }
    }
    for (const pg of this.pgs.values()) {
      if (pg.placed?.some((p) => p.nodeId === n.nodeId)) {
        pg.state = "INFEASIBLE";
        pg.error = `node ${n.nodeId} holding some of its bundles died`;
      }
    }
  }

  // ---- actors --------------------------------------------------------------------------------

  private createActor(spec: ActorSpec, subscriberKey: string): HeadReplies["createActor"] {
    // the same request again (sent twice over a broken connection) creates nothing new
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
    const why = this.infeasible(spec);
    if (why) {
      this.setDead(spec.actorId, a, { kind: "infeasible", message: why });
      return { actorId: spec.actorId };
    }
    this.pendingActors.push(spec.actorId);
    this.schedule();
    return { actorId: spec.actorId };
  }

  private describeActor(spec: ActorSpec): string {
    return `${spec.className ?? "task executor"}${spec.name ? ` '${spec.name}'` : ""} (${spec.actorId})`;
  }

  /** Why a spec can never be placed, or null. */
  private infeasible(spec: ActorSpec): string | null {
    const req = spec.resources;
    if (spec.placementGroup) {
      const pg = this.pgs.get(spec.placementGroup);
      if (!pg) return `placement group ${spec.placementGroup} does not exist`;
      if (pg.state === "REMOVED" || pg.state === "INFEASIBLE")
        return `placement group ${pg.pgId} is ${pg.state.toLowerCase()}`;
      const idx = spec.bundleIndex ?? -1;
      if (idx >= pg.bundles.length)
        return `bundle index ${idx} is out of range: the group has ${pg.bundles.length} bundles`;
      const bundles = idx >= 0 ? [pg.bundles[idx]!] : pg.bundles;
      const fits = bundles.some((b) => {
        const gpuShares = new Map<number, number>();
        if ((b.GPU ?? 0) > 0) {
          const g = b.GPU!;
          if (g >= 1) for (let i = 0; i < g; i++) gpuShares.set(i, 1);
          else gpuShares.set(0, g);
        }
        return couldEverFit({ total: b, avail: b, gpuFree: gpuShares, bundleGpuShares: gpuShares }, req);
      });
      if (!fits) {
        return `${this.describeActor(spec)} requests {${formatResources(req)}} but bundle${idx >= 0 ? ` ${idx}` : "s"} of placement group ${pg.pgId} hold${idx >= 0 ? "s" : ""} only ${bundles.map((b) => `{${formatResources(b)}}`).join(" / ")}`;
      }
      return null;
    }
    const affinity = this.affinityProblem(spec);
    if (affinity && !spec.nodeAffinity!.soft) return affinity;
    if (spec.nodeAffinity && !affinity) return null;
    const alive = [...this.nodes.values()].filter((n) => n.alive);
    if (alive.some((n) => couldEverFit(n.pool, req))) return null;
    const have = alive.map((n) => `${n.nodeId}: {${formatResources(n.pool.total)}}`).join("; ") || "no nodes";
    return `${this.describeActor(spec)} requests {${formatResources(req)}}, which no node in the cluster can ever provide (${have})`;
  }

  /** Why the node an actor has affinity to cannot take it (dead, unknown, too small), or null. */
  private affinityProblem(spec: ActorSpec): string | null {
    const na = spec.nodeAffinity;
    if (!na) return null;
    const n = this.nodes.get(na.nodeId);
    const kind = na.soft ? "soft" : "hard";
    if (!n)
      return `${this.describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which is not in the cluster`;
    if (!n.alive)
      return `${this.describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which is dead`;
    if (!couldEverFit(n.pool, spec.resources)) {
      return `${this.describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which can never provide {${formatResources(spec.resources)}} (it has {${formatResources(n.pool.total)}})`;
    }
    return null;
  }

  /** Places pending actors where resources allow, in arrival order. */
  private schedule(): void {
    for (const pg of this.pgs.values()) if (pg.state === "PENDING") this.tryPlacePg(pg);
    const still: string[] = [];
    for (const id of this.pendingActors) {
      const a = this.actors.get(id);
      if (!a || a.state === "DEAD") continue;
      if (a.nodeId) continue;
      if (!this.place(id, a)) still.push(id);
    }
    this.pendingActors = still;
  }

  private place(id: string, a: HeadActor): boolean {
    const req = a.spec.resources;
    let chosen: { node: HeadNode; pool: Pool; alloc: Allocation; bundle?: number } | null = null;
    if (a.spec.placementGroup) {
      const pg = this.pgs.get(a.spec.placementGroup);
      if (!pg || pg.state === "REMOVED" || pg.state === "INFEASIBLE") {
        this.setDead(id, a, {
          kind: "infeasible",
          message: `placement group ${a.spec.placementGroup} is gone`,
        });
        return true;
      }
      if (pg.state !== "CREATED" || !pg.placed) return false;
      const indices = (a.spec.bundleIndex ?? -1) >= 0 ? [a.spec.bundleIndex!] : pg.placed.map((_, i) => i);
      for (const i of indices) {
        const b = pg.placed[i]!;
        const node = this.nodes.get(b.nodeId);
        if (!node?.alive) continue;
        const alloc = tryAllocate(b.pool, req);
        if (alloc) {
          chosen = { node, pool: b.pool, alloc, bundle: i };
          break;
        }
      }
    } else {
      let nodes = [...this.nodes.values()].filter((n) => n.alive);
      const na = a.spec.nodeAffinity;
      if (na) {
        // the node may have died since creation (a restart): hard affinity cannot go elsewhere
        const problem = this.affinityProblem(a.spec);
        if (!problem) nodes = [this.nodes.get(na.nodeId)!];
        else if (!na.soft) {
          this.setDead(id, a, { kind: "infeasible", message: problem, nodeId: na.nodeId });
          return true;
        }
      }
      // prefer the node with the most free CPU (spread load), then registration order
      nodes.sort((x, y) => (y.pool.avail.CPU ?? 0) - (x.pool.avail.CPU ?? 0));
      for (const node of nodes) {
        const alloc = tryAllocate(node.pool, req);
        if (alloc) {
          chosen = { node, pool: node.pool, alloc };
          break;
        }
      }
    }
    if (!chosen) return false;
    a.nodeId = chosen.node.nodeId;
    a.pool = chosen.pool;
    a.alloc = chosen.alloc;
    this.server.send(chosen.node.peer, {
      t: "startWorker",
      spec: a.spec,
      incarnation: a.incarnation,
      gpuIds: chosen.alloc.gpus.map(([gid]) => gid),
      resources: chosen.alloc.res,
      bundleIndex: chosen.bundle,
    });
    return true;
  }

  private freeAlloc(a: HeadActor): void {
    if (a.pool && a.alloc) release(a.pool, a.alloc);
    a.pool = undefined;
    a.alloc = undefined;
    a.nodeId = undefined;
  }

  private update(actorId: string, a: HeadActor): ActorUpdate {
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

  private publish(actorId: string, a: HeadActor): void {
    const u = this.update(actorId, a);
    for (const key of a.subscribers) {
      const p = this.peers.get(key);
      if (p) this.server.send(p, u);
    }
  }

  private onActorReady(m: Extract<NodeToHead, { t: "actorReady" }>): void {
    const a = this.actors.get(m.actorId);
    if (!a || a.incarnation !== m.incarnation || a.state === "DEAD") return;
    a.state = "ALIVE";
    a.endpoint = m.endpoint;
    a.pid = m.pid;
    this.publish(m.actorId, a);
  }

  private onActorFailed(m: Extract<NodeToHead, { t: "actorFailed" }>): void {
    const a = this.actors.get(m.actorId);
    if (!a || a.incarnation !== m.incarnation || a.state === "DEAD") return;
    const err = m.error;
    const node = a.nodeId ? this.nodes.get(a.nodeId) : undefined;
    if (node)
      this.server.send(node.peer, { t: "killWorker", actorId: m.actorId, incarnation: a.incarnation });
    this.freeAlloc(a);
    this.setDead(m.actorId, a, {
      kind: "creation_failed",
      message: `its constructor threw ${err?.name}: ${err?.message}${err?.stack ? `\n${err.stack}` : ""}`,
      creationError: err,
    });
    this.schedule();
  }

  private onWorkerExit(m: Extract<NodeToHead, { t: "workerExit" }>): void {
    const a = this.actors.get(m.actorId);
    if (!a || a.incarnation !== m.incarnation || a.state === "DEAD") return;
    const killed = a.killed;
    this.onActorGone(m.actorId, a, {
      kind: killed ? (a.killCause?.kind ?? "killed") : "exited",
      message: killed
        ? (a.killCause?.message ?? "it was killed by kill()")
        : `its worker process (pid ${m.pid}) exited unexpectedly${m.signal ? ` on signal ${m.signal}` : ` with code ${m.code}`}`,
      exitCode: m.code,
      signal: m.signal,
      nodeId: a.nodeId,
    });
  }

  private onActorGone(id: string, a: HeadActor, cause: DeathCause): void {
    this.ownerGone(id);
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
      this.pendingActors.push(id);
    } else {
      this.setDead(id, a, cause);
    }
    this.schedule();
  }

  /** The worker of actor `id` is gone: actors and groups it created (not detached) go too. */
  private ownerGone(actorId: string): void {
    const clientId = this.clientOfActor.get(actorId);
    if (!clientId) return;
    this.clientOfActor.delete(actorId);
    this.onClientGone(clientId, `it is an actor (${actorId}) that died`);
  }

  private setDead(id: string, a: HeadActor, cause: DeathCause): void {
    this.ownerGone(id);
    a.state = "DEAD";
    a.cause = cause;
    a.incarnation++;
    if (a.spec.name && this.named.get(a.spec.name) === id) this.named.delete(a.spec.name);
    this.publish(id, a);
  }

  private kill(actorId: string, noRestart: boolean): void {
    const a = this.actors.get(actorId);
    if (!a || a.state === "DEAD") return;
    if (noRestart) a.killed = true;
    const node = a.nodeId ? this.nodes.get(a.nodeId) : undefined;
    if (node?.alive) {
      this.server.send(node.peer, { t: "killWorker", actorId, incarnation: a.incarnation });
    } else if (noRestart) {
      this.freeAlloc(a);
      this.setDead(
        actorId,
        a,
        a.killCause ?? { kind: "killed", message: "it was killed by kill() before it started" },
      );
    }
  }

  /** The process `clientId` left or died (`why`): what it owns and did not detach goes with it. */
  private onClientGone(clientId: string, why: string): void {
    const c = this.clients.get(clientId);
    this.clients.delete(clientId);
    const owner = c ? `pid ${c.pid}` : clientId;
    // tell everyone: fetches of objects that process owned can never be answered
    for (const other of this.clients.values()) {
      const p = this.peers.get(other.peerKey);
      if (p) this.server.send(p, { t: "clientGone", clientId });
    }
    for (const [id, a] of this.actors) {
      if (a.spec.ownerClientId === clientId && !a.spec.detached && a.state !== "DEAD") {
        a.killed = true;
        a.killCause = { kind: "owner_died", message: `its owner (${owner}) is gone: ${why}` };
        this.kill(id, true);
      }
    }
    for (const pg of this.pgs.values()) if (pg.ownerClientId === clientId) this.removePg(pg.pgId);
  }

  // ---- placement groups ----------------------------------------------------------------------

  private createPg(m: Extract<ToHead, { t: "createPg" }>): HeadReplies["createPg"] {
    const bundles = m.bundles as Resources[];
    if (!Array.isArray(bundles) || bundles.length === 0)
      throw new Error("a placement group needs at least one bundle");
    for (const b of bundles) validateRequest(b);
    const strategy = (m.strategy ?? "PACK") as PlacementStrategy;
    if (!["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"].includes(strategy)) {
      throw new Error(
        `unknown placement strategy '${strategy}'; one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD`,
      );
    }
    if (typeof m.pgId === "string" && this.pgs.has(m.pgId)) return pgInfo(this.pgs.get(m.pgId)!);
    const pg: HeadPg = {
      pgId: typeof m.pgId === "string" ? m.pgId : `pg-${randomId(4)}`,
      name: m.name,
      bundles,
      strategy,
      state: "PENDING",
      placed: null,
      waiters: [],
      ownerClientId: m.clientId,
    };
    this.pgs.set(pg.pgId, pg);
    // infeasible if it cannot be placed on an empty cluster
    const empty = [...this.nodes.values()]
      .filter((n) => n.alive)
      .map((n) => ({ nodeId: n.nodeId, pool: clonePool(makeEmpty(n.pool)) }));
    if (!placeBundles(empty, bundles, strategy)) {
      pg.state = "INFEASIBLE";
      pg.error = `placement group ${pg.pgId} (${strategy}, bundles ${bundles.map((b) => `{${formatResources(b)}}`).join(", ")}) can never be placed on this cluster (${
        [...this.nodes.values()]
          .filter((n) => n.alive)
          .map((n) => `${n.nodeId}: {${formatResources(n.pool.total)}}`)
          .join("; ") || "no nodes"
      })`;
      return pgInfo(pg);
    }
    this.schedule();
    return pgInfo(pg);
  }

  private tryPlacePg(pg: HeadPg): void {
    if (pg.state !== "PENDING") return;
    const nodes = [...this.nodes.values()]
      .filter((n) => n.alive)
      .map((n) => ({ nodeId: n.nodeId, pool: n.pool }));
    const placed = placeBundles(nodes, pg.bundles, pg.strategy);
    if (!placed) return;
    pg.placed = placed.map((p: Placed) => ({ ...p, pool: bundlePool(p.alloc) }));
    pg.state = "CREATED";
    for (const w of pg.waiters.splice(0)) this.reply(w.peer, w.rid, true, pgInfo(pg));
  }

  private removePg(pgId: string): void {
    const pg = this.pgs.get(pgId);
    if (!pg || pg.state === "REMOVED") return;
    for (const [id, a] of this.actors) {
      if (a.spec.placementGroup === pgId && a.state !== "DEAD") {
        a.killed = true;
        this.kill(id, true);
      }
    }
    if (pg.placed) {
      for (const p of pg.placed) {
        const node = this.nodes.get(p.nodeId);
        if (node) release(node.pool, p.alloc);
      }
    }
    pg.state = "REMOVED";
    pg.error = "it was removed";
    for (const w of pg.waiters.splice(0)) this.reply(w.peer, w.rid, false, pgError(pg));
    this.schedule();
  }

  // ---- status --------------------------------------------------------------------------------

  private resourceTotals(): { total: Resources; available: Resources; nodes: number } {
    const total: Resources = {};
    const available: Resources = {};
    let nodes = 0;
    for (const n of this.nodes.values()) {
      if (!n.alive) continue;
      nodes++;
      for (const [k, v] of Object.entries(n.pool.total)) total[k] = (total[k] ?? 0) + v;
      for (const [k, v] of Object.entries(n.pool.avail)) available[k] = (available[k] ?? 0) + v;
    }
    return { total, available, nodes };
  }

  private status(): ClusterStatus {
    return {
      address: this.address,
      uptimeS: Math.round((Date.now() - this.startedAt) / 1000),
      nodes: [...this.nodes.values()].map((n) => ({
        nodeId: n.nodeId,
        ip: n.ip,
        alive: n.alive,
        pid: n.pid,
        total: n.pool.total,
        available: n.pool.avail,
        gpus: Object.fromEntries(n.pool.gpuFree),
      })),
      actors: [...this.actors.entries()].map(([id, a]) => ({
        actorId: id,
        name: a.spec.name,
        className: a.spec.className ?? "(task executor)",
        state: a.state,
        nodeId: a.nodeId,
        pid: a.pid,
        resources: a.spec.resources,
        restarts: a.incarnation,
        nodeAffinity: a.spec.nodeAffinity,
        cause: a.cause?.message,
      })),
      placementGroups: [...this.pgs.values()].map(pgInfo),
      clients: this.clients.size,
      bytesReceived: this.server.bytesIn,
      security: {
        mode: clusterKeys() ? "curve" : "none",
        listen: this.opts.host,
        refusedConnections: refusedConnections(),
      },
    };
  }
}

const NO_REPLY = Symbol("no reply");

function makeEmpty(p: Pool): Pool {
  return {
    total: p.total,
    avail: { ...p.total },
    gpuFree: new Map([...p.gpuFree.keys()].map((id) => [id, 1])),
  };
}

function pgInfo(pg: HeadPg): PlacementGroupStatus {
  return {
    pgId: pg.pgId,
    name: pg.name,
    state: pg.state,
    strategy: pg.strategy,
    bundles: pg.bundles,
    bundleNodes: pg.placed?.map((p) => p.nodeId) ?? null,
    bundleGpus: pg.placed?.map((p) => p.alloc.gpus.map(([id]) => id)) ?? null,
    error: pg.error,
  };
}

function pgError(pg: HeadPg): Error {
  const message = pg.error ?? `placement group ${pg.pgId} is ${pg.state}`;
  return pg.state === "INFEASIBLE" ? new InfeasibleResourceError(message) : new PlacementGroupError(message);
}
