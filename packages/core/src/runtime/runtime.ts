/**
 * The runtime of one process: owner of its objects (store + object server), caller of actors and
 * tasks, client of the head. In a driver started with init() and no address it also hosts the
 * embedded head and node agent; in a worker it also executes calls.
 */
import { mkdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Worker } from "node:worker_threads";
import { type LogBatch, prefixOf } from "../cluster/worker-logs.js";
import { HeadError, MessageDecodeError, ObjectLostError, OwnerDiedError, RemoteError } from "../errors.js";
import { logWarn } from "../log.js";
import { siblingModule, threadEntry } from "../module-files.js";
import { UndecodableMessage } from "../wire/batch.js";
import { decode, encode, encodeError, errorToWire, registerClass } from "../wire/codec.js";
import { DealerLink, RouterServer } from "../wire/links.js";
import { clusterKeys, requireKeysToListen } from "../wire/security.js";
import { prepareValue } from "../wire/sendable.js";
import { ActorCalls, NOT_INLINED } from "./actor-calls.js";
// every process that decodes messages must know every value type from its first message on
import "./actor-handle.js";
import { approxBytes, type RunningCall } from "../observe/process-report.js";
import { traceRecorder } from "../observe/timeline.js";
import { Streams } from "./call-stream.js";
import { setRuntime } from "./current.js";
import { HeadClient } from "./head-client.js";
import type { HeartbeatThreadData, HeartbeatThreadOrder } from "./heartbeat-thread.js";
import { randomId } from "./ids.js";
import { ObjectRef, type OwnerAddress } from "./object-ref.js";
import { FAILED, ObjectStore, PENDING, READY } from "./object-store.js";
import {
  ADDREF,
  CALL,
  CANCEL,
  FETCH,
  FETCH_ERROR,
  FETCH_LOST,
  FETCH_OK,
  FETCH_REPLY,
  FETCH_UNCONFIRMED,
  FETCH_UNDECODABLE,
  type FetchStatus,
  PROTOCOL_ERROR,
  RELEASE,
  RESULT,
  RESULT_THREW,
  RESULT_UNDECODABLE,
  STREAM_ACK,
} from "./protocol.js";
import { reportOf } from "./report.js";
import { refuseRefInThreadValue } from "./thread-actor-wire.js";

export interface RuntimeContext {
  /** Id of the actor this process hosts; undefined in a driver. */
  actorId?: string;
  actorName?: string;
  /** The node this process runs on (as in `torl status`); undefined for a driver on a machine with no node. */
  nodeId?: string;
  /** GPU ids assigned to this actor (also in CUDA_VISIBLE_DEVICES). */
  gpuIds: number[];
  /** Resources assigned to this actor. */
  resources: Record<string, number>;
  /** Id of this process's runtime (owner id of its objects). */
  clientId: string;
  /** Address of the head. */
  headAddress: string;
  /** Where this process's object server (and, in a worker, its call endpoint) listens. */
  address: OwnerAddress;
  isWorker: boolean;
  placementGroup?: string;
  bundleIndex?: number;
}

type Handler = (peer: Buffer, msg: any) => void;

/** How long the head may take to say whether an object's owner is alive. */
const OWNER_CHECK_MS = 10_000;

/** How often a driver tells the head it is alive (the head's TORL_CLIENT_TIMEOUT_MS is several of these). */
const DRIVER_HEARTBEAT_MS = 1000;
/** How long shutdown() waits for the heartbeat thread to close its socket before ending it anyway. */
const HEARTBEAT_THREAD_STOP_MS = 30_000;
/** How long a goodbye for a driver whose process exits may take to leave (the exit waits that long at most). */
const GOODBYE_LINGER_MS = 500;
/**
 * How long a driver exiting without shutdown() waits for its heartbeat thread to say goodbye: the linger,
 * plus time for a thread still loading (it takes the order once loaded; seconds on a loaded machine).
 */
const EXIT_GOODBYE_WAIT_MS = GOODBYE_LINGER_MS + 5000;

export class Runtime {
  readonly clientId = randomId();
  readonly store = new ObjectStore();
  readonly ObjectRefClass = ObjectRef;
  readonly actors = new ActorCalls(this);
  readonly streams = new Streams(this);
  /** Where cancel(ref) looks for a call not finished yet: actor calls, then task queues and thread actors. */
  readonly cancellers: Array<{ cancel(seq: number, force: boolean): boolean }> = [this.actors];
  address!: OwnerAddress;
  head!: HeadClient;
  server!: RouterServer;
  context!: RuntimeContext;
  /** Extra handler for CALL, STREAM_ACK and CANCEL messages (workers). */
  callHandler: Handler | null = null;
  /** Hooks run on shutdown (embedded head/node, task pools). */
  readonly onShutdown: Array<() => Promise<void> | void> = [];
  private seqCounter = 0;
  private peers = new Map<string, DealerLink>();
  private fetches = new Map<string, Array<(m: any) => void>>();
  private ownerOfEndpoint = new Map<string, string>();
  private goneOwners = new Set<string>();
  /** Owners the head said were alive (their death arrives as a clientGone push). */
  private liveOwners = new Set<string>();
  private checkingOwners = new Set<string>();
  private releases = new Map<string, { addr: OwnerAddress; seqs: number[]; add: number[] }>();
  private releaseTimer: NodeJS.Timeout | null = null;
  private ownedFr = new FinalizationRegistry<number>((seq) => {
    this.store.dropLocal(seq);
    // the last ref to a call is gone: a stream nobody can read stops its producer
    if (!this.store.entries.has(seq)) this.streams.abandoned(seq);
  });
  private borrowedFr = new FinalizationRegistry<[string, number, OwnerAddress]>(([owner, seq, addr]) => {
    const id = `${owner}:${seq}`;
    const n = (this.borrowed.get(id) ?? 1) - 1;
    if (n > 0) this.borrowed.set(id, n);
    else this.borrowed.delete(id);
    this.queueRelease(owner, addr, seq, false);
  });
  /** Objects owned elsewhere that this process holds refs to: the count of its live refs to each. */
  readonly borrowed = new Map<string, number>();
  /** The worker's calls, for its reports (set by the worker; a driver runs none). */
  calls: { className: string; running(): RunningCall[]; queued(): number } | null = null;
  private pushHandlers: Array<(m: any) => void> = [];
  sessionDir = "";
  private heartbeat: NodeJS.Timeout | null = null;
  private heartbeatThread: { thread: Worker; closed: Int32Array; onExit: () => void } | null = null;
  closed = false;

  nextSeq(): number {
    return ++this.seqCounter;
  }

  /** Binds the object server and connects to the head. */
  /** `logs`: a driver that wants its actors' and tasks' output printed here (worker runtimes never do). */
  async start(
    headAddress: string,
    ip: string,
    context: Partial<RuntimeContext>,
    logs = false,
  ): Promise<void> {
    requireKeysToListen(ip, "this process's object server");
    this.sessionDir = path.join(os.tmpdir(), "torl", "sockets");
    mkdirSync(this.sessionDir, { recursive: true });
    this.server = new RouterServer(
      (peer, msg) => this.onServerMessage(peer, msg),
      `runtime ${this.clientId}`,
    );
    const tcp = await this.server.bind(`tcp://${ip}:0`);
    const ipcPath = path.join(this.sessionDir, `${this.clientId}.sock`);
    let ipc: string | undefined;
    if (!process.env.TORL_NO_IPC) {
      try {
        ipc = await this.server.bind(`ipc://${ipcPath}`);
      } catch {
        ipc = undefined;
      }
    }
    this.server.start();
    this.address = { tcp, ipc, host: os.hostname() };
    try {
      this.head = new HeadClient(`tcp://${headAddress}`, (m) => this.onPush(m));
    } catch (e) {
      // ZeroMQ's own words (e.g. "Invalid argument") say nothing of which address it refused
      const why = (e as Error).cause instanceof Error ? ((e as Error).cause as Error).message : String(e);
      throw new HeadError(`cannot connect to the head at tcp://${headAddress}: ${why}`, { cause: e });
    }
    // news about actors pushed while the connection was broken are lost: ask again for their state
    this.head.onReconnect = () => {
      for (const rec of this.actors.records.values())
        if (rec.state !== "DEAD") this.head.notify("subscribe", { actorId: rec.actorId });
    };
    this.context = {
      gpuIds: [],
      resources: {},
      isWorker: false,
      ...context,
      clientId: this.clientId,
      headAddress,
      address: this.address,
    };
    setRuntime(this);
    const heartbeats = !this.context.isWorker;
    traceRecorder.joining();
    const hello = await this.head.request(
      "hello",
      {
        clientId: this.clientId,
        address: this.address,
        nodeIp: ip,
        pid: process.pid,
        actorId: this.context.actorId,
        heartbeats,
        logs: logs && !this.context.isWorker,
      },
      15000,
    );
    // a driver that joined runs on the node at its own address (workers and embedded drivers know theirs)
    this.context.nodeId ??= hello?.nodeId;
    traceRecorder.setRecording(hello?.recording === true, hello?.recordingEpoch ?? 0);
    if (heartbeats) this.startHeartbeats(headAddress);
  }

  /**
   * Asks the heartbeat thread to close its socket and end. terminate() with its socket open can abort
   * the process, so a thread slow to end is terminated only once it closed its socket (or after
   * HEARTBEAT_THREAD_STOP_MS, with a warning, rather than never).
   */
  private async stopHeartbeatThread(): Promise<void> {
    const hb = this.heartbeatThread;
    if (!hb) return;
    this.heartbeatThread = null;
    process.off("exit", hb.onExit);
    const ended = new Promise<void>((resolve) => hb.thread.once("exit", () => resolve()));
    hb.thread.postMessage("stop" satisfies HeartbeatThreadOrder);
    const since = Date.now();
    const check = setInterval(() => {
      if (Atomics.load(hb.closed, 0) === 1) void hb.thread.terminate();
      else if (Date.now() - since > HEARTBEAT_THREAD_STOP_MS) {
        logWarn(
          `heartbeat thread did not close its socket within ${HEARTBEAT_THREAD_STOP_MS / 1000} s of shutdown(); ending it anyway`,
        );
        void hb.thread.terminate();
      }
    }, 2000);
    await ended;
    clearInterval(check);
  }

  /** A driver's heartbeats come from a thread: they go on while its event loop is busy. */
  private startHeartbeats(headAddress: string): void {
    const closed = new Int32Array(new SharedArrayBuffer(4));
    const data: HeartbeatThreadData = {
      headEndpoint: `tcp://${headAddress}`,
      clientId: this.clientId,
      intervalMs: DRIVER_HEARTBEAT_MS,
      keys: clusterKeys(),
      closed,
      goodbyeLingerMs: GOODBYE_LINGER_MS,
    };
    const thread = new Worker(threadEntry(siblingModule(import.meta.url, "./heartbeat-thread")), {
      workerData: data,
    });
    thread.unref();
    // The process exits without shutdown() (process.exit, or its last callback ran): the thread says
    // goodbye for this driver, so the head frees its actors now and says why, and closes its socket
    // before the process tears the thread down. Blocking here is allowed (and bounded): nothing else
    // runs after 'exit'.
    const onExit = () => {
      if (Atomics.load(closed, 0) === 1) return;
      thread.postMessage("exit" satisfies HeartbeatThreadOrder);
      Atomics.wait(closed, 0, 0, EXIT_GOODBYE_WAIT_MS);
    };
    process.on("exit", onExit);
    thread.on("error", (e) => {
      logWarn(`heartbeat thread failed (${e.message}); heartbeats now come from the event loop`);
      process.off("exit", onExit);
      this.heartbeatThread = null;
      if (this.closed) return;
      this.heartbeat = setInterval(
        () => this.head.notify("clientHeartbeat", { clientId: this.clientId }),
        DRIVER_HEARTBEAT_MS,
      );
      this.heartbeat.unref();
    });
    this.heartbeatThread = { thread, closed, onExit };
  }

  addPushHandler(f: (m: any) => void): void {
    this.pushHandlers.push(f);
  }

  private onPush(m: any): void {
    if (m.t === "actor") this.actors.onUpdate(m);
    else if (m.t === "clientGone") this.onOwnerGone(m.clientId);
    else if (m.t === "workerLog") printWorkerLog(m.batches);
    else if (m.t === "probe") {
      if (typeof m.recording === "boolean") traceRecorder.setRecording(m.recording, m.epoch ?? 0);
      this.head.notify("processReport", { qid: m.qid, report: reportOf(this, m) });
    }
    for (const f of this.pushHandlers) f(m);
  }

  // ---- objects ------------------------------------------------------------------------------

  newOwnedRef<T = unknown>(seq: number): ObjectRef<T> {
    const e = this.store.create(seq);
    e.local = 1;
    const ref = new ObjectRef<T>(this.clientId, seq, this.address);
    this.ownedFr.register(ref, seq);
    return ref;
  }

  /** cancel(ref): true if call `seq` was still queued or running here. */
  cancel(seq: number, force: boolean): boolean {
    return this.cancellers.some((c) => c.cancel(seq, force));
  }

  /** Settles the result of call `seq`; a failure also ends the stream it opened. */
  settleCall(seq: number, state: typeof READY | typeof FAILED, value: unknown): void {
    this.store.settle(seq, state, value);
    if (state === FAILED) this.streams.fail(seq, value as Error);
  }

  put<T>(value: T): ObjectRef<T> {
    // Snapshot semantics: typed arrays are copied once; later changes by the caller are not seen.
    // Large ones are copied into recycled, already-touched buffers (see object-store.ts for when
    // a buffer may go back to the pool).
    const enc = encode(prepareValue(value, "value", "cannot be stored with put()"));
    const pool = this.store.pool;
    let pooled: ArrayBuffer[] | null = null;
    const frames = enc.frames.map((f) => {
      const c = pool.copyIn(f);
      if (pool.poolable(f.byteLength)) (pooled ??= []).push(c.buffer as ArrayBuffer);
      return c;
    });
    const stored = decode(enc.head, frames);
    const seq = this.nextSeq();
    const ref = this.newOwnedRef<T>(seq);
    this.store.entries.get(seq)!.pooled = pooled;
    this.store.settle(seq, READY, stored);
    return ref;
  }

  /** A ready, owned, not-too-large value to send inline instead of the ref. */
  tryInline(ref: ObjectRef, maxBytes: number): unknown {
    if (ref.ownerId !== this.clientId) {
      if (
        ref._cached?.ok &&
        !(ArrayBuffer.isView(ref._cached.value) && ref._cached.value.byteLength > maxBytes)
      ) {
        return ref._cached.value;
      }
      return NOT_INLINED;
    }
    const e = this.store.entries.get(ref.seq);
    if (!e || e.state !== READY) return NOT_INLINED;
    if (ArrayBuffer.isView(e.value) && e.value.byteLength > maxBytes) return NOT_INLINED;
    return this.store.handOut(e);
  }

  getOne(ref: ObjectRef): Promise<unknown> {
    if (ref.ownerId === this.clientId) {
      const e = this.store.entries.get(ref.seq);
      if (!e)
        return Promise.reject(new ObjectLostError(ref.id, "it was freed (no reference to it remained)"));
      if (e.state === READY) return Promise.resolve(this.store.handOut(e));
      if (e.state === FAILED) return Promise.reject(e.value);
      return new Promise((resolve, reject) =>
        this.store.onSettled(e, (s) =>
          s.state === READY ? resolve(this.store.handOut(s)) : reject(s.value),
        ),
      );
    }
    if (ref._cached)
      return ref._cached.ok ? Promise.resolve(ref._cached.value) : Promise.reject(ref._cached.value);
    const span = traceRecorder.start("transfer", `fetch ${ref.id}`);
    return this.fetch(ref).then((m) => {
      traceRecorder.end(span, m[2] === FETCH_OK ? { bytes: approxBytes(m[3]) } : { failed: true });
      if (m[2] === FETCH_OK) {
        ref._cached = { ok: true, value: m[3] };
        return m[3];
      }
      if (m[2] === FETCH_UNCONFIRMED) throw new ObjectLostError(ref.id, m[3]);
      if (m[2] === FETCH_UNDECODABLE) {
        // not cached: the reader may still learn to decode it (a serializer registered later)
        throw new MessageDecodeError(`object ${ref.id} arrived but could not be decoded: ${m[3]}`);
      }
      const err =
        m[2] === FETCH_LOST
          ? this.goneOwners.has(ref.ownerId)
            ? new OwnerDiedError(ref.id, ref.ownerId)
            : new ObjectLostError(ref.id, "its owner no longer has it (freed, or the owner process died)")
          : new RemoteError(m[3] ?? { name: "Error", message: "unknown" }, {});
      ref._cached = { ok: false, value: err };
      throw err;
    });
  }

  private peer(addr: OwnerAddress): DealerLink {
    const endpoint = addr.ipc && addr.host === os.hostname() ? addr.ipc : addr.tcp;
    let link = this.peers.get(endpoint);
    if (!link) {
      link = new DealerLink(
        endpoint,
        (m) => this.onPeerMessage(endpoint, m),
        `owner ${endpoint}`,
        (err) => this.onOwnerRefused(endpoint, err),
      );
      const l = link;
      // fetches are idempotent: after a broken connection, ask again for what has no answer yet
      l.onReconnect = () => {
        for (const key of this.fetches.keys())
          if (key.startsWith(`${endpoint}|`)) l.send([FETCH, Number(key.slice(endpoint.length + 1))]);
      };
      this.peers.set(endpoint, link);
    }
    return link;
  }

  private fetch(ref: ObjectRef): Promise<any> {
    if (this.goneOwners.has(ref.ownerId)) return Promise.resolve([FETCH_REPLY, ref.seq, FETCH_LOST, null]);
    const link = this.peer(ref.owner);
    this.ownerOfEndpoint.set(link.endpoint, ref.ownerId);
    const key = `${link.endpoint}|${ref.seq}`;
    const reply = new Promise((resolve) => {
      const w = this.fetches.get(key);
      if (w) w.push(resolve);
      else {
        this.fetches.set(key, [resolve]);
        link.send([FETCH, ref.seq]);
      }
    });
    this.confirmOwner(ref.ownerId);
    return reply;
  }

  /**
   * Asks the head, once per owner, whether the owner is alive. A process that joined after the
   * owner died never got the news, and a fetch sent to a dead endpoint would wait forever.
   */
  private confirmOwner(ownerId: string): void {
    if (this.liveOwners.has(ownerId) || this.checkingOwners.has(ownerId)) return;
    this.checkingOwners.add(ownerId);
    this.head.request("clientAlive", { clientId: ownerId }, OWNER_CHECK_MS).then(
      (alive) => {
        this.checkingOwners.delete(ownerId);
        if (alive) this.liveOwners.add(ownerId);
        else this.onOwnerGone(ownerId);
      },
      (e: Error) => {
        this.checkingOwners.delete(ownerId);
        if (this.closed) return;
        this.failFetches(
          ownerId,
          FETCH_UNCONFIRMED,
          `the head could not say whether its owner is alive (${e.message})`,
        );
      },
    );
  }

  /** A process that owned objects is gone: fetches from it can never be answered. */
  private onOwnerGone(ownerId: string): void {
    this.goneOwners.add(ownerId);
    this.liveOwners.delete(ownerId);
    this.failFetches(ownerId, FETCH_LOST, null, true);
  }

  /** Settles every fetch waiting on `ownerId` with `status` (and, with `forget`, closes its links). */
  private failFetches(ownerId: string, status: FetchStatus, value: unknown, forget = false): void {
    for (const [endpoint, owner] of this.ownerOfEndpoint) {
      if (owner !== ownerId) continue;
      this.failEndpointFetches(endpoint, status, value);
      if (!forget) continue;
      this.ownerOfEndpoint.delete(endpoint);
      this.peers.get(endpoint)?.close();
      this.peers.delete(endpoint);
    }
  }

  /** An owner refused this process's keys: its fetches fail now instead of waiting forever. */
  private onOwnerRefused(endpoint: string, err: Error): void {
    this.peers.delete(endpoint);
    this.failEndpointFetches(endpoint, FETCH_ERROR, errorToWire(err));
  }

  private failEndpointFetches(endpoint: string, status: FetchStatus, value: unknown): void {
    for (const [key, waiters] of this.fetches) {
      if (!key.startsWith(`${endpoint}|`)) continue;
      this.fetches.delete(key);
      const seq = Number(key.slice(endpoint.length + 1));
      for (const f of waiters) f([FETCH_REPLY, seq, status, value]);
    }
  }

  /** Replies from owners this process fetched from. */
  private onPeerMessage(endpoint: string, m: any): void {
    if (m instanceof UndecodableMessage) {
      if (m.kind === FETCH_REPLY && m.seq !== undefined) {
        this.settleFetch(endpoint, [FETCH_REPLY, m.seq, FETCH_UNDECODABLE, m.reason]);
      } else this.failEndpointFetches(endpoint, FETCH_UNDECODABLE, `a message from ${endpoint}: ${m.reason}`);
      return;
    }
    if (!Array.isArray(m) || m[0] !== FETCH_REPLY) {
      const why = Array.isArray(m) && m[0] === PROTOCOL_ERROR ? m[1] : "it sent an unexpected message";
      this.failEndpointFetches(
        endpoint,
        FETCH_UNDECODABLE,
        `the owner at ${endpoint} could not serve fetches: ${why}`,
      );
      return;
    }
    this.settleFetch(endpoint, m);
  }

  private settleFetch(endpoint: string, m: any[]): void {
    const key = `${endpoint}|${m[1]}`;
    const w = this.fetches.get(key);
    if (!w) return; // already settled (the owner was declared gone first)
    this.fetches.delete(key);
    for (const f of w) f(m);
  }

  /**
   * Object server: answers fetches and reference-count news; hands calls to the worker. Whatever
   * it cannot decode or does not expect is answered with an error, never dropped.
   */
  private onServerMessage(peer: Buffer, m: any): void {
    if (m instanceof UndecodableMessage) {
      if (m.kind === CALL && m.seq !== undefined) {
        this.server.send(peer, [RESULT, m.seq, RESULT_UNDECODABLE, m.reason]);
      } else if (m.kind === FETCH && m.seq !== undefined) {
        const wire = errorToWire(new MessageDecodeError(`the fetch could not be decoded: ${m.reason}`));
        this.server.send(peer, [FETCH_REPLY, m.seq, FETCH_ERROR, wire]);
      } else this.server.send(peer, [PROTOCOL_ERROR, `a message could not be decoded: ${m.reason}`]);
      return;
    }
    if (!Array.isArray(m) || (m[0] !== RELEASE && m[0] !== ADDREF && typeof m[1] !== "number")) {
      this.server.send(peer, [PROTOCOL_ERROR, "expected a message [kind, seq, ...]"]);
      return;
    }
    switch (m[0]) {
      case FETCH: {
        const seq = m[1] as number;
        const e = this.store.entries.get(seq);
        if (!e) {
          this.server.send(peer, [FETCH_REPLY, seq, FETCH_LOST, null]);
          return;
        }
        this.store.onSettled(e, (s) => {
          if (s.state === READY) {
            try {
              // the encoded frames are views that the send may read later: hand the value out
              const span = traceRecorder.start("transfer", `serve ${this.clientId}:${seq}`);
              const value = prepareValue(this.store.handOut(s), "value", "cannot be sent");
              const enc = encode([FETCH_REPLY, seq, FETCH_OK, value]);
              // ended before the reply leaves (as a call's run is): the fetcher's clock is past its end
              if (span)
                traceRecorder.end(span, {
                  bytes: enc.frames.reduce((n, f) => n + f.byteLength, enc.head.byteLength),
                });
              this.server.sendEncoded(peer, enc);
            } catch (err) {
              this.server.sendEncoded(
                peer,
                encodeError(err, (w) => [FETCH_REPLY, seq, FETCH_ERROR, w]),
              );
            }
          } else
            this.server.sendEncoded(
              peer,
              encodeError(s.value, (w) => [FETCH_REPLY, seq, FETCH_ERROR, w]),
            );
        });
        return;
      }
      case RELEASE:
        for (const seq of m[1] as number[]) this.store.addOut(seq, -1);
        return;
      case ADDREF:
        for (const seq of m[1] as number[]) this.store.addOut(seq, 1);
        return;
      case CALL:
        if (this.callHandler) this.callHandler(peer, m);
        else {
          const err = new MessageDecodeError("a call reached a process that hosts no actor (a driver)");
          this.server.send(peer, [RESULT, m[1], RESULT_THREW, errorToWire(err)]);
        }
        return;
      case STREAM_ACK:
      case CANCEL:
        if (m[0] === STREAM_ACK && !(Number.isSafeInteger(m[2]) && m[2] >= 0))
          this.server.send(peer, [PROTOCOL_ERROR, "expected [STREAM_ACK, seq, consumed >= 0]"]);
        else if (this.callHandler) this.callHandler(peer, m);
        else this.server.send(peer, [PROTOCOL_ERROR, "a stream or cancel message reached a driver"]);
        return;
      default:
        this.server.send(peer, [PROTOCOL_ERROR, `unknown message kind ${m[0]}`]);
    }
  }

  // ---- reference counting across processes ---------------------------------------------------

  /** Encoding a ref into a message: one more copy outside (owned) or tell the owner (borrowed). */
  onRefEncoded(ref: ObjectRef): void {
    if (ref.ownerId === this.clientId) this.store.addOut(ref.seq, 1);
    else this.queueRelease(ref.ownerId, ref.owner, ref.seq, true);
  }

  onRefDecoded(ownerId: string, seq: number, addr: OwnerAddress): ObjectRef {
    if (ownerId === this.clientId) {
      const ref = new ObjectRef(ownerId, seq, this.address);
      const e = this.store.entries.get(seq);
      if (e) {
        e.local++;
        e.out--;
        this.ownedFr.register(ref, seq);
      }
      return ref;
    }
    const ref = new ObjectRef(ownerId, seq, addr);
    this.borrowedFr.register(ref, [ownerId, seq, addr]);
    this.borrowed.set(ref.id, (this.borrowed.get(ref.id) ?? 0) + 1);
    return ref;
  }

  private queueRelease(owner: string, addr: OwnerAddress, seq: number, add: boolean): void {
    if (this.closed || this.goneOwners.has(owner)) return;
    let r = this.releases.get(owner);
    if (!r) this.releases.set(owner, (r = { addr, seqs: [], add: [] }));
    if (add) {
      // ADDREF must reach the owner before any later release: send at once.
      this.peer(addr).send([ADDREF, [seq]]);
      return;
    }
    r.seqs.push(seq);
    if (!this.releaseTimer) {
      this.releaseTimer = setTimeout(() => this.flushReleases(), 20);
      this.releaseTimer.unref();
    }
  }

  private flushReleases(): void {
    this.releaseTimer = null;
    for (const [owner, r] of this.releases) {
      if (r.seqs.length > 0) this.peer(r.addr).send([RELEASE, r.seqs]);
      this.releases.delete(owner);
    }
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  async shutdown(): Promise<void> {
    if (this.closed) return;
    this.flushReleases();
    for (const f of this.onShutdown.splice(0).reverse()) {
      try {
        await f();
      } catch (e) {
        logWarn(`shutdown step failed: ${(e as Error).message}`);
      }
    }
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    await this.stopHeartbeatThread();
    try {
      if (this.head) await this.head.request("bye", { clientId: this.clientId }, 3000);
    } catch {}
    this.actors.closeAll();
    for (const l of this.peers.values()) l.close();
    this.peers.clear();
    // a start() that failed part-way (init() shuts it down) may not have made its head link or server
    this.head?.close();
    this.server?.close();
    // a get() still waiting on a result of this process settles now instead of never
    this.store.failPending(
      (seq) =>
        new ObjectLostError(`${this.clientId}:${seq}`, "shutdown() ended its owner before it was ready"),
    );
    this.streams.failAll(
      (seq) =>
        new ObjectLostError(`${this.clientId}:${seq}`, "shutdown() ended the stream's reader before its end"),
    );
    this.store.clear();
    if (this.address?.ipc) rmSync(this.address.ipc.slice("ipc://".length), { force: true });
    setRuntime(null);
  }
}

// ObjectRefs travel as [ownerId, seq, tcp, ipc, host]; the runtime counts copies.
registerClass(
  0x60,
  ObjectRef,
  (ref: ObjectRef) => {
    refuseRefInThreadValue();
    currentOrNull()?.onRefEncoded(ref);
    return [ref.ownerId, ref.seq, ref.owner.tcp, ref.owner.ipc ?? null, ref.owner.host ?? null];
  },
  (d: any[]) => {
    const addr: OwnerAddress = { tcp: d[2], ipc: d[3] ?? undefined, host: d[4] ?? undefined };
    const rt = currentOrNull();
    return rt ? rt.onRefDecoded(d[0], d[1], addr) : new ObjectRef(d[0], d[1], addr);
  },
);

import { maybeRuntime as currentOrNull } from "./current.js";

export { PENDING };

/** Prints what workers printed, each line after Ray's prefix: `(Counter pid=123) ...`. */
function printWorkerLog(batches: LogBatch[]): void {
  for (const b of batches) {
    const prefix = prefixOf(b);
    const text = b.lines.map((l) => `${prefix} ${l}\n`).join("");
    (b.stream === "err" ? process.stderr : process.stdout).write(text);
  }
}
