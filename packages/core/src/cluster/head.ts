/**
 * The head: control plane of a cluster. Data never passes here: callers talk to workers and owners
 * directly. This file holds the socket loop and hands each message to the part that owns it:
 * - node-table.ts: the node agents, their pools and heartbeats;
 * - clients.ts: the drivers and worker runtimes, and driver heartbeats;
 * - actor-directory.ts: actors, names, subscriptions, restarts and deaths;
 * - scheduler.ts: placing actors on nodes and in bundles;
 * - placement-groups.ts: reserving bundles by strategy;
 * - status.ts: resource totals and the cluster status;
 * - log-router.ts: worker output to the drivers, and log files read on their nodes;
 * - process-probes.ts: every process's report (calls, objects, metrics, timeline) and timeline recording.
 * What crosses parts is wired here: a client that is gone takes the actors and groups it owns with
 * it; a dead node takes its actors and the groups holding bundles on it.
 */
import { InputError } from "../errors.js";
import { logWarn } from "../log.js";
import { UndecodableMessage } from "../wire/batch.js";
import { errorToWire } from "../wire/codec.js";
import { RouterServer } from "../wire/links.js";
import { requireKeysToListen } from "../wire/security.js";
import { ActorDirectory } from "./actor-directory.js";
import { ClientTable } from "./clients.js";
import { LogRouter } from "./log-router.js";
import type { Reply, ToHead } from "./messages.js";
import { NodeTable } from "./node-table.js";
import type { Outbox } from "./outbox.js";
import { PlacementGroups } from "./placement-groups.js";
import { MAX_TIMELINE_SECONDS, ProcessProbes } from "./process-probes.js";
import { Scheduler } from "./scheduler.js";
import { clusterStatus, resourceTotals } from "./status.js";

export interface HeadOptions {
  host: string;
  port: number;
  /** A node with no heartbeat for this long is declared dead (default 3000 ms, env TORL_NODE_TIMEOUT_MS). */
  nodeTimeoutMs?: number;
}

export class Head {
  private server = new RouterServer((peer, m) => this.onMessage(peer, m), "head");
  /** Each peer's routing id by its latin1 key, as last seen. */
  private peers = new Map<string, Buffer>();
  private out: Outbox = {
    send: (peer, m) => this.server.send(peer, m),
    sendTo: (key, m) => {
      const p = this.peers.get(key);
      if (p) this.server.send(p, m);
    },
  };
  private readonly nodes: NodeTable;
  /** A driver silent for its timeout is taken for dead and its actors are killed (drivers beat every second). */
  private readonly clients = new ClientTable();
  private readonly actors: ActorDirectory;
  private readonly pgs: PlacementGroups;
  private readonly scheduler: Scheduler;
  private readonly logs: LogRouter;
  private readonly probes: ProcessProbes;
  private timer: NodeJS.Timeout | null = null;
  address = "";
  readonly startedAt = Date.now();

  constructor(private opts: HeadOptions) {
    this.nodes = new NodeTable(opts.nodeTimeoutMs ?? Number(process.env.TORL_NODE_TIMEOUT_MS ?? 3000));
    // the parts call each other through these hooks, which run only once messages arrive
    this.actors = new ActorDirectory(this.nodes, this.out, {
      infeasible: (spec) => this.scheduler.infeasible(spec),
      enqueue: (id) => this.scheduler.enqueue(id),
      schedule: () => this.scheduler.schedule(),
      workerGone: (id) => {
        const clientId = this.clients.takeClientOfActor(id);
        if (clientId) this.clientGone(clientId, `it is an actor (${id}) that died`);
      },
    });
    this.pgs = new PlacementGroups(this.nodes, {
      schedule: () => this.scheduler.schedule(),
      killActorsIn: (pgId) => this.actors.killInGroup(pgId),
    });
    this.scheduler = new Scheduler(this.nodes, this.pgs, this.actors, this.out);
    this.logs = new LogRouter(this.nodes, this.actors, this.clients, this.out);
    this.probes = new ProcessProbes(this.clients, this.out);
  }

  async start(): Promise<string> {
    requireKeysToListen(this.opts.host, "the head");
    const ep = await this.server.bind(`tcp://${this.opts.host}:${this.opts.port}`);
    this.server.start();
    this.address = ep.replace(/^tcp:\/\//, "");
    if (Number.isFinite(this.nodes.timeoutMs)) {
      this.timer = setInterval(() => this.checkLiveness(), Math.max(100, this.nodes.timeoutMs / 5));
      this.timer.unref();
    }
    return this.address;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const n of this.nodes.alive()) this.server.send(n.peer, { t: "shutdown" });
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

  /** Hands a message to its part; returns the reply to a request, or NO_REPLY. */
  private handle(peer: Buffer, key: string, m: ToHead): unknown {
    switch (m.t) {
      // clients
      case "hello":
        this.clients.hello(m, key);
        return {
          nodes: this.nodes.size,
          nodeId: this.nodes.at(m.nodeIp),
          recording: this.probes.recording,
          recordingEpoch: this.probes.epoch,
        };
      case "clientHeartbeat":
        this.clients.heartbeat(m.clientId);
        return NO_REPLY;
      case "bye":
        this.clientGone(
          m.clientId,
          m.exited ? "it exited without calling shutdown()" : "it called shutdown()",
        );
        return null;
      case "clientAlive":
        return this.clients.has(m.clientId);
      case "createActor":
        return this.actors.create(m.spec, key);
      case "subscribe":
        this.actors.subscribe(m.actorId, key);
        return NO_REPLY;
      case "getActor":
        return this.actors.byName(m.name);
      case "kill":
        // while recording, what its worker recorded is collected first: it would die with it
        this.probes.beforeKill(this.clients.clientOfActor(m.actorId), () =>
          this.actors.kill(m.actorId, m.noRestart !== false),
        );
        return null;
      case "createPg":
        return this.pgs.create(m);
      case "waitPg": {
        const rid = m.rid;
        const waiter =
          rid === undefined ? undefined : (r: unknown) => this.reply(peer, rid, !(r instanceof Error), r);
        return this.pgs.wait(m.pgId, waiter) ?? NO_REPLY;
      }
      case "removePg":
        this.pgs.remove(m.pgId);
        return null;
      case "status":
        return clusterStatus({
          address: this.address,
          listen: this.opts.host,
          startedAt: this.startedAt,
          bytesReceived: this.server.bytesIn,
          nodes: this.nodes,
          actors: this.actors,
          pgs: this.pgs,
          clients: this.clients,
        });
      case "clusterResources":
        return resourceTotals(this.nodes);
      case "readLogs": {
        const rid = m.rid;
        this.logs.read(m.target, m.tailBytes, (ok, v) => {
          if (rid !== undefined) this.reply(peer, rid, ok, v);
        });
        return NO_REPLY;
      }
      case "processes": {
        const rid = m.rid;
        const from = m.traceFromUs;
        const to = m.traceToUs;
        if ((from === undefined) !== (to === undefined) || (from !== undefined && !(to! >= from)))
          throw new InputError("processes: give both traceFromUs and traceToUs (from <= to), or neither");
        const window = from === undefined ? undefined : { fromUs: from, toUs: to! };
        this.probes.probe(window, (v) => rid !== undefined && this.reply(peer, rid, true, v));
        return NO_REPLY;
      }
      case "timeline": {
        if (!(m.seconds > 0 && m.seconds <= MAX_TIMELINE_SECONDS))
          throw new InputError(
            `timeline: seconds must be > 0 and <= ${MAX_TIMELINE_SECONDS}, got ${m.seconds}`,
          );
        const rid = m.rid;
        this.probes.window(m.seconds, (v) => rid !== undefined && this.reply(peer, rid, true, v));
        return NO_REPLY;
      }
      case "record": {
        const rid = m.rid;
        this.probes.record(m.holder, m.on, (v) => rid !== undefined && this.reply(peer, rid, true, v));
        return NO_REPLY;
      }
      case "processReport":
        this.probes.answered(m.qid, m.report);
        return NO_REPLY;
      // node agents
      case "registerNode": {
        const registered = this.nodes.register(peer, m);
        this.scheduler.schedule();
        return registered;
      }
      case "nodeHeartbeat": {
        const answer = this.nodes.heartbeat(m.nodeId);
        if (answer) this.server.send(peer, answer);
        return NO_REPLY;
      }
      case "actorReady":
        this.actors.ready(m);
        return NO_REPLY;
      case "actorFailed":
        this.actors.failed(m);
        return NO_REPLY;
      case "workerExit":
        this.actors.workerExit(m);
        return NO_REPLY;
      case "workerLog":
        this.logs.forward(m.batches);
        return NO_REPLY;
      case "logsRead":
        this.logs.answered(m);
        return NO_REPLY;
      case "undecodable":
        logWarn(`head: a peer could not decode a message from the head: ${m.reason}`);
        return NO_REPLY;
      default:
        throw new Error(`unknown message type '${(m as { t: string }).t}'`);
    }
  }

  // ---- what crosses parts ---------------------------------------------------------------------

  /** Silent drivers are gone; silent nodes are dead. */
  private checkLiveness(): void {
    const now = Date.now();
    for (const { client, silentMs } of this.clients.silent(now)) {
      logWarn(
        `head: driver ${client.clientId} (pid ${client.pid}) sent no heartbeat for ${silentMs} ms; killing its actors`,
      );
      this.clientGone(
        client.clientId,
        `it sent no heartbeat for ${silentMs} ms (died, or cut off from the head)`,
      );
    }
    this.nodes.expire((n) => {
      this.actors.nodeDied(n);
      this.pgs.nodeDied(n.nodeId);
    }, now);
  }

  /** The process `clientId` left or died (`why`): what it owns and did not detach goes with it. */
  private clientGone(clientId: string, why: string): void {
    const owner = this.clients.gone(clientId, this.out);
    this.probes.gone(clientId);
    this.actors.killOwnedBy(clientId, {
      kind: "owner_died",
      message: `its owner (${owner}) is gone: ${why}`,
    });
    this.pgs.removeOwnedBy(clientId);
  }
}

const NO_REPLY = Symbol("no reply");
