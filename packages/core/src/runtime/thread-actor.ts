/**
 * Thread actors: `createActor(..., { thread: true })` (in @torl-ts/actors: `.options({ thread: true })`)
 * runs the actor in a worker thread of the creating process instead of a worker process, over comlink
 * (the thread exposes a ThreadActorHost; this side holds it as `Remote<ThreadActorHost>`).
 *
 * The caller sees what a process actor gives: the same typed handle, an ObjectRef per call owned by
 * this process's runtime, calls run in arrival order (maxConcurrency at a time), a thrown error as a
 * RemoteError with the thread's stack, SerializationError at the call site for what cannot travel,
 * ActorDiedError for calls in flight and later calls once it is killed or its thread ends, and
 * maxRestarts / maxTaskRetries. What differs, because a thread has no runtime of its own: top-level
 * ObjectRef arguments are resolved here before the call is sent (in order), a ref nested inside an
 * argument is refused, the actor's code cannot call put/get or other actors, and the handle cannot be
 * passed to another process. Placement options are refused: a thread uses its process's CPUs and GPUs.
 *
 * Observed as a process actor is: this side follows which calls the thread runs (it runs them in the
 * order they were sent, maxConcurrency at a time, once its constructor is done), so its process's
 * report lists the actor with its current calls and call counts (ThreadActorReport), and while the
 * cluster records a timeline each call is a span on the actor's own row, and the caller's wait a
 * "call" span on the caller's row.
 */
import { createInterface } from "node:readline";
import { Worker } from "node:worker_threads";
import { type Remote, wrap } from "comlink";
import nodeEndpoint from "comlink/dist/umd/node-adapter.js";
import { prefixOf } from "../cluster/worker-logs.js";
import {
  ActorDiedError,
  type DeathCause,
  MessageDecodeError,
  RemoteError,
  SerializationError,
  TaskCancelledError,
} from "../errors.js";
import type { ActorHandle } from "../handle-types.js";
import { siblingModule, threadEntry } from "../module-files.js";
import {
  type RunningCall,
  THREAD_ACTORS_DEAD_LISTED,
  type ThreadActorReport,
} from "../observe/process-report.js";
import { type OpenSpan, traceRecorder } from "../observe/timeline.js";
import { prepareValue } from "../wire/sendable.js";
import { methodProxy } from "./actor-handle.js";
import { type CallStream, streamWindowOf } from "./call-stream.js";
import { currentRuntime } from "./current.js";
import { randomId } from "./ids.js";
import { ObjectRef } from "./object-ref.js";
import { FAILED, READY } from "./object-store.js";
import type { ActorState } from "./protocol.js";
import type { Runtime } from "./runtime.js";
import { CodecPacket, isThreadCallFailure, READY_METHOD, type ThreadActorHost } from "./thread-actor-wire.js";

/** The options a thread actor takes; the rest of ActorOptions are refused by name. */
export interface ThreadActorOptions {
  maxConcurrency?: number;
  maxRestarts?: number;
  maxTaskRetries?: number;
  env?: Record<string, string>;
  streamBackpressure?: number;
}

/** An actor option that has no meaning for an actor living in a thread of its creator's process. */
export class ThreadActorOptionError extends Error {
  override name = "ThreadActorOptionError";
  constructor(
    readonly option: string,
    why: string,
  ) {
    super(`a thread actor does not take ${option}: ${why}; drop it, or make a process actor (thread: false)`);
  }
}

/** An operation that needs the actor to have a runtime of its own (a process actor). */
export class ThreadActorUnsupportedError extends Error {
  override name = "ThreadActorUnsupportedError";
  constructor(readonly operation: string) {
    super(
      `${operation} is not possible on a thread actor (it has no runtime of its own); use a process actor`,
    );
  }
}

const PLACEMENT_WHY = "a thread runs in its creator's process and uses that process's CPUs and GPUs";
const REFUSED: Record<string, string> = {
  name: "getActor() asks the cluster, and a thread actor is known only to the process that created it",
  numCpus: PLACEMENT_WHY,
  numGpus: PLACEMENT_WHY,
  resources: PLACEMENT_WHY,
  placementGroup: PLACEMENT_WHY,
  bundleIndex: PLACEMENT_WHY,
  schedulingStrategy: PLACEMENT_WHY,
  lifetime: "it ends with the process that created it",
};

/**
 * Throws ThreadActorOptionError for the first option that a thread actor cannot honour. The values
 * of the options it takes were checked with every actor's (checkActorOptions in api.ts).
 */
export function checkThreadActorOptions(opts: object): ThreadActorOptions {
  const o = opts as Record<string, unknown>;
  for (const [key, why] of Object.entries(REFUSED)) {
    if (o[key] !== undefined) throw new ThreadActorOptionError(key, why);
  }
  return opts as ThreadActorOptions;
}

interface PendingCall {
  seq: number;
  method: string;
  /** Encoded once it is sent (kept for a re-send after a restart). */
  packet: CodecPacket | null;
  retriesLeft: number;
  /** Its stream, once the thread said the method is a generator (such a call is never re-sent). */
  stream?: CallStream;
  /** Items pulled, and the count the consumer has acknowledged taking. */
  received: number;
  acked: number;
  pulling: boolean;
  /** Its place in the thread's order once sent (until the thread ends it). */
  sent: SentCall | null;
  /** The caller's wait for it on the caller's timeline row (`call`), while recording. */
  span: OpenSpan | null;
}

/** A call the thread has and has not ended: it runs them in sending order, maxConcurrency at a time. */
interface SentCall {
  seq: number;
  method: string;
  /** When its thread began to run it (ms since the epoch); 0 while it waits for a slot or the constructor. */
  sinceMs: number;
  /** Its run on the actor's timeline row, while recording. */
  span: OpenSpan | null;
}

const isRef = (a: unknown): a is ObjectRef => a instanceof ObjectRef;

/** Thread actors alive in each runtime, ended when it shuts down. */
const liveActors = new WeakMap<Runtime, Set<ThreadActor>>();
/** The last THREAD_ACTORS_DEAD_LISTED thread actors of each runtime that died, oldest first (for its report). */
const deadActors = new WeakMap<Runtime, ThreadActor[]>();

/** The thread actors of `rt`'s process, alive and recently dead, for its report. */
export function threadActorReports(rt: Runtime): ThreadActorReport[] {
  return [...(liveActors.get(rt) ?? []), ...(deadActors.get(rt) ?? [])].map((a) => a.report());
}

export class ThreadActor {
  readonly actorId: string;
  state: ActorState = "PENDING";
  private worker: Worker | null = null;
  /**
   * `remote.call`, taken once: each property read on a comlink proxy makes a new proxy. Holding it also
   * keeps the thread's end open (comlink releases an endpoint once every proxy of it is collected).
   */
  private remoteCall: Remote<ThreadActorHost>["call"] | null = null;
  private remoteNext: Remote<ThreadActorHost>["next"] | null = null;
  private remoteCancel: Remote<ThreadActorHost>["cancel"] | null = null;
  private readonly window: number;
  private incarnation = 0;
  private lastError: Error | null = null;
  private readonly inflight = new Map<number, PendingCall>();
  private death: ActorDiedError | null = null;
  private restartsLeft: number;
  private readonly retries: number;
  /** Sends wait here (in call order) while an earlier call's ObjectRef arguments are being resolved. */
  private tail: Promise<void> = Promise.resolve();
  private waitingSends = 0;
  /** The calls the current thread has, in the order it got them (it runs the first maxConcurrency). */
  private sent: SentCall[] = [];
  /** The current thread's constructor has finished. */
  private constructed = false;
  private restarts = 0;
  private readonly maxConcurrency: number;
  /** Calls the thread ran to their end, by method: [total, failed]. */
  private readonly counts = new Map<string, [number, number]>();

  constructor(
    private readonly rt: Runtime,
    private readonly module: string,
    private readonly className: string,
    private readonly ctorArgs: unknown[],
    private readonly opts: ThreadActorOptions,
  ) {
    this.actorId = `${className.slice(0, 16)}-${randomId(5)}`;
    this.restartsLeft = opts.maxRestarts ?? 0;
    this.maxConcurrency = opts.maxConcurrency ?? 1;
    this.retries = opts.maxTaskRetries ?? 0;
    this.window = streamWindowOf(opts.streamBackpressure, `actor ${className}`);
    let live = liveActors.get(rt);
    if (!live) {
      const actors = new Set<ThreadActor>();
      liveActors.set(rt, (live = actors));
      rt.cancellers.push({ cancel: (seq, force) => [...actors].some((a) => a.cancel(seq, force)) });
      rt.onShutdown.push(() => {
        for (const a of actors)
          a.die({ kind: "shutdown", message: "the runtime that created it shut down" }, false);
      });
    }
    live.add(this);
    this.spawn();
  }

  private spawn(): void {
    const inc = ++this.incarnation;
    const entry = threadEntry(siblingModule(import.meta.url, "./thread-actor-host"), [this.module]);
    const worker = new Worker(entry, {
      ...(this.opts.env ? { env: { ...process.env, ...this.opts.env } } : {}),
      stdout: true,
      stderr: true,
    });
    worker.unref();
    // what it prints, each line after Ray's prefix as a worker's (its process is this one)
    const prefix = prefixOf({ className: this.className, name: "thread", pid: process.pid });
    for (const [from, to] of [
      [worker.stdout, process.stdout],
      [worker.stderr, process.stderr],
    ] as const)
      createInterface({ input: from, crlfDelay: Number.POSITIVE_INFINITY }).on("line", (line) =>
        to.write(`${prefix} ${line}\n`),
      );
    worker.on("error", (e) => {
      if (inc === this.incarnation) this.lastError = e;
    });
    worker.on("exit", (code) => this.onExit(inc, code));
    this.worker = worker;
    this.lastError = null;
    const remote = wrap<ThreadActorHost>(nodeEndpoint(worker));
    this.remoteCall = remote.call;
    this.remoteNext = remote.next;
    this.remoteCancel = remote.cancel;
    const hasRefs = this.ctorArgs.some(isRef);
    const resolved = hasRefs
      ? Promise.all(this.ctorArgs.map((a) => (isRef(a) ? this.rt.getOne(a) : a)))
      : null;
    this.inOrder(
      resolved,
      (values) => {
        const args = values
          ? prepareValue(values, "args", `cannot be sent to ${this.className}`)
          : this.ctorArgs;
        this.start(inc, remote, CodecPacket.forThread(args));
      },
      (err) =>
        this.die(
          { kind: "creation_failed", message: `a constructor argument could not be sent: ${err.message}` },
          false,
        ),
    );
  }

  private start(inc: number, remote: Remote<ThreadActorHost>, args: CodecPacket): void {
    const started = remote.start(
      { module: this.module, className: this.className, maxConcurrency: this.opts.maxConcurrency ?? 1 },
      args,
    );
    started.then(
      () => {
        if (inc !== this.incarnation || this.state === "DEAD") return;
        this.state = "ALIVE";
        this.constructed = true;
        this.markRunning();
      },
      (e: unknown) => {
        if (inc !== this.incarnation) return;
        const wire = isThreadCallFailure(e) && e.kind === "threw" ? e.error : undefined;
        this.die(
          {
            kind: "creation_failed",
            message: wire
              ? `its constructor threw ${wire.name}: ${wire.message}${wire.stack ? `\n${wire.stack}` : ""}`
              : `its constructor could not run: ${(e as Error)?.message ?? String(e)}`,
            creationError: wire,
          },
          false,
        );
      },
    );
  }

  /** Sends a call; throws SerializationError at once for arguments that cannot travel. */
  call(method: string, args: unknown[]): ObjectRef {
    const sendable = prepareValue(args, "args", `cannot be sent to an actor (${this.describe(method)})`);
    const hasRefs = sendable.some(isRef);
    // a call without refs is encoded here, so a ref nested inside it is refused at the call site
    const packet = hasRefs ? null : CodecPacket.forThread(sendable);
    const seq = this.rt.nextSeq();
    const ref = this.rt.newOwnedRef(seq);
    if (this.death) {
      this.rt.store.settle(seq, FAILED, this.death);
      return ref;
    }
    const call: PendingCall = {
      seq,
      method,
      packet,
      retriesLeft: this.retries,
      received: 0,
      acked: 0,
      pulling: false,
      sent: null,
      span: method === READY_METHOD ? null : traceRecorder.start("call", `actor ${this.actorId}.${method}`),
    };
    this.inflight.set(seq, call);
    if (packet) this.inOrder(null, () => this.send(call));
    else {
      const resolved = Promise.all(sendable.map((a) => (isRef(a) ? this.rt.getOne(a) : a)));
      this.inOrder(
        resolved,
        (values) => {
          call.packet = CodecPacket.forThread(
            prepareValue(values, "args", `cannot be sent to ${this.describe(method)}`),
          );
          this.send(call);
        },
        (err) => this.fail(call, err),
      );
    }
    return ref;
  }

  /**
   * Runs `send` after every earlier send, once `wait` (if any) has resolved; a call with nothing to
   * wait for and nothing before it is sent at once.
   */
  private inOrder<T>(wait: Promise<T> | null, send: (value: T) => void, failed?: (err: Error) => void): void {
    if (!wait && this.waitingSends === 0) {
      send(undefined as T);
      return;
    }
    this.waitingSends++;
    const ready = wait ?? Promise.resolve(undefined as T);
    this.tail = this.tail
      .then(() => ready)
      .then(
        (v) => {
          this.waitingSends--;
          try {
            send(v);
          } catch (e) {
            failed?.(e as Error);
          }
        },
        (e: Error) => {
          this.waitingSends--;
          failed?.(e);
        },
      );
  }

  private send(call: PendingCall): void {
    if (!this.inflight.has(call.seq) || !call.packet) return;
    const remoteCall = this.remoteCall;
    if (!remoteCall || this.state === "DEAD") return;
    const inc = this.incarnation;
    let reply: Promise<CodecPacket | { stream: true }>;
    try {
      reply = remoteCall(call.seq, call.method, call.packet);
    } catch (e) {
      this.fail(call, this.failureOf(call.method, e));
      return;
    }
    const sent: SentCall = { seq: call.seq, method: call.method, sinceMs: 0, span: null };
    call.sent = sent;
    this.sent.push(sent);
    this.markRunning();
    reply.then(
      (result) => {
        if (inc !== this.incarnation) return;
        // a stream holds its slot in the thread until its generator ends
        if (!(result instanceof CodecPacket) && this.inflight.get(call.seq) === call) {
          call.stream = this.rt.streams.opened(call.seq, `actor ${this.describe(call.method)}`, this.window, {
            ack: (consumed) => {
              call.acked = consumed;
              this.pull(call, inc);
            },
            cancel: () => this.stop(call, new TaskCancelledError(`actor ${this.describe(call.method)}`)),
          });
          this.pull(call, inc);
          return;
        }
        this.ended(sent, true, undefined, result instanceof CodecPacket ? result.ranUs : undefined);
        if (this.inflight.get(call.seq) !== call || !(result instanceof CodecPacket)) return;
        this.leave(call, true);
        let value: unknown;
        try {
          value = result.decode();
        } catch (e) {
          this.finishSpan(call, false);
          this.rt.store.settle(
            call.seq,
            FAILED,
            new MessageDecodeError(
              `call ${this.describe(call.method)}: its result arrived but could not be decoded: ${(e as Error).message}`,
            ),
          );
          return;
        }
        this.rt.store.settle(call.seq, READY, value);
      },
      (e: unknown) => {
        if (inc !== this.incarnation) return;
        this.ended(sent, false, undefined, isThreadCallFailure(e) ? e.ranUs : undefined);
        if (this.inflight.get(call.seq) !== call) return;
        this.fail(call, this.failureOf(call.method, e));
      },
    );
  }

  /** Starts the calls the thread runs now: the first maxConcurrency it has, once it is constructed. */
  private markRunning(): void {
    if (!this.constructed) return;
    const n = Math.min(this.sent.length, this.maxConcurrency);
    for (let i = 0; i < n; i++) {
      const s = this.sent[i]!;
      if (s.sinceMs !== 0) continue;
      s.sinceMs = Date.now();
      if (s.method !== READY_METHOD)
        s.span = traceRecorder.startOn(this.actorId, "actor_call", `${this.className}.${s.method}`);
    }
  }

  /** The thread ended call `s` (its answer came, or its stream ended): counted, and its slot goes to the next. */
  private ended(
    s: SentCall,
    ok: boolean,
    args?: Record<string, unknown>,
    ranUs?: readonly [number, number],
  ): void {
    const i = this.sent.indexOf(s);
    if (i < 0) return;
    this.sent.splice(i, 1);
    if (s.method !== READY_METHOD) {
      let c = this.counts.get(s.method);
      if (!c) this.counts.set(s.method, (c = [0, 0]));
      c[0]++;
      if (!ok) c[1]++;
      // timed by the thread where it told (a result, an error), else from this side's view
      traceRecorder.end(s.span, args ?? (ok ? undefined : { failed: true }), ranUs);
    }
    this.markRunning();
  }

  /** A call leaves this side with its answer settled: its caller's wait ends. */
  private leave(call: PendingCall, ok: boolean, args?: Record<string, unknown>): void {
    this.inflight.delete(call.seq);
    this.finishSpan(call, ok, args);
  }

  private finishSpan(call: PendingCall, ok: boolean, args?: Record<string, unknown>): void {
    traceRecorder.end(call.span, args ?? (ok ? undefined : { failed: true }));
    call.span = null;
  }

  /** What this actor is doing, for its process's report. */
  report(): ThreadActorReport {
    const running: RunningCall[] = [];
    const runningSeqs = new Set<number>();
    for (const s of this.sent)
      if (s.sinceMs !== 0 && s.method !== READY_METHOD) {
        running.push({ name: s.method, kind: "actor_call", sinceMs: s.sinceMs });
        runningSeqs.add(s.seq);
      }
    let queued = 0;
    for (const c of this.inflight.values())
      if (c.method !== READY_METHOD && !runningSeqs.has(c.seq)) queued++;
    return {
      actorId: this.actorId,
      className: this.className,
      state: this.state,
      restarts: this.restarts,
      running,
      queued,
      calls: [...this.counts].map(([method, [total, failed]]) => ({ method, total, failed })),
      ...(this.death ? { cause: this.death.message } : {}),
    };
  }

  /** Asks the thread for the next item while the consumer holds fewer than `window` unacknowledged ones. */
  private pull(call: PendingCall, inc: number): void {
    const next = this.remoteNext;
    const stream = call.stream;
    if (call.pulling || !next || !stream?.live || inc !== this.incarnation) return;
    if (call.received - call.acked >= this.window) return;
    call.pulling = true;
    const current = () => inc === this.incarnation && this.inflight.get(call.seq) === call;
    next(call.seq).then(
      (packet) => {
        call.pulling = false;
        if (!current()) return;
        if (packet === null) {
          if (call.sent) this.ended(call.sent, true);
          this.leave(call, true);
          stream.end(call.received);
          return;
        }
        let value: unknown;
        try {
          value = packet.decode();
        } catch (e) {
          const why = `stream item ${call.received} arrived but could not be decoded: ${(e as Error).message}`;
          this.stop(call, new MessageDecodeError(`call ${this.describe(call.method)}: ${why}`));
          return;
        }
        stream.push(call.received++, value);
        this.pull(call, inc);
      },
      (e: unknown) => {
        call.pulling = false;
        if (!current()) return;
        if (call.sent) this.ended(call.sent, false);
        this.fail(call, this.failureOf(call.method, e));
      },
    );
  }

  /** cancel(ref) of one of this actor's calls: true if it was in flight here. */
  cancel(seq: number, force: boolean): boolean {
    const call = this.inflight.get(seq);
    if (!call) return false;
    if (force)
      throw new TypeError(
        `cancel(ref, { force: true }) kills a task's worker process; actor ${this.describe(call.method)} is an actor call: cancel it without force, or kill(handle)`,
      );
    this.stop(call, new TaskCancelledError(`actor ${this.describe(call.method)}`));
    return true;
  }

  /** Ends a call here with `err` and tells the thread (which drops it, aborts it or returns its generator). */
  private stop(call: PendingCall, err: Error): void {
    if (this.inflight.get(call.seq) !== call) return;
    this.fail(call, err);
    // a stream's generator is returned in the thread: its slot is free (a running method's when it returns)
    if (call.stream && call.sent) this.ended(call.sent, true, { cancelled: true });
    void this.remoteCancel?.(call.seq).catch(() => {});
  }

  private failureOf(method: string, e: unknown): Error {
    if (isThreadCallFailure(e)) {
      if (e.kind === "unsendable") return new SerializationError(...e.serialization);
      return new RemoteError(e.error, { actorId: this.actorId, method });
    }
    return new MessageDecodeError(`call ${this.describe(method)}: ${(e as Error)?.message ?? String(e)}`);
  }

  private fail(call: PendingCall, err: Error): void {
    this.leave(
      call,
      false,
      err instanceof ActorDiedError
        ? { died: true }
        : err instanceof TaskCancelledError
          ? { cancelled: true }
          : undefined,
    );
    this.rt.settleCall(call.seq, FAILED, err);
  }

  private onExit(inc: number, code: number): void {
    if (inc !== this.incarnation || this.state === "DEAD") return;
    const why = this.lastError
      ? `its thread ended on an uncaught ${this.lastError.name}: ${this.lastError.message}`
      : `its thread exited with code ${code}`;
    this.die({ kind: "exited", message: why, exitCode: code }, true);
  }

  /** kill(): ends the thread at once; with `noRestart: false` it restarts if maxRestarts allows. */
  kill(noRestart: boolean): void {
    this.die({ kind: "killed", message: "it was killed by kill()" }, !noRestart);
  }

  private die(cause: DeathCause, mayRestart: boolean): void {
    if (this.state === "DEAD") return;
    const err = new ActorDiedError(this.actorId, undefined, cause);
    const worker = this.worker;
    this.worker = null;
    this.remoteCall = null;
    this.remoteNext = null;
    this.remoteCancel = null;
    // ignore the old thread's exit and late replies
    this.incarnation++;
    void worker?.terminate();
    // the thread is gone with the calls it had (a call sent again starts over in the next one)
    for (const s of this.sent.splice(0)) traceRecorder.end(s.span, { died: true });
    this.constructed = false;
    for (const call of this.inflight.values()) call.sent = null;
    const restart = mayRestart && this.restartsLeft !== 0;
    const calls = [...this.inflight.values()].sort((a, b) => a.seq - b.seq);
    const again: PendingCall[] = [];
    for (const call of calls) {
      // a stream that has begun cannot be run again: its reader has its first items
      if (restart && call.retriesLeft > 0 && call.packet && !call.stream) {
        call.retriesLeft--;
        again.push(call);
      } else this.fail(call, err);
    }
    if (!restart) {
      this.state = "DEAD";
      this.death = err;
      liveActors.get(this.rt)?.delete(this);
      let dead = deadActors.get(this.rt);
      if (!dead) deadActors.set(this.rt, (dead = []));
      dead.push(this);
      if (dead.length > THREAD_ACTORS_DEAD_LISTED) dead.shift();
      return;
    }
    this.restarts++;
    if (this.restartsLeft > 0) this.restartsLeft--;
    this.state = "RESTARTING";
    this.spawn();
    for (const call of again) this.inOrder(null, () => this.send(call));
  }

  private describe(method: string): string {
    return `${this.className} ${this.actorId}.${method}`;
  }
}

/** The handle of a thread actor: the same shape (and type, ActorHandle<T>) as a process actor's. */
export class ThreadActorHandle {
  /** @internal */
  readonly _methods = new Map<string, (...args: unknown[]) => ObjectRef>();
  constructor(/** @internal */ readonly _actor: ThreadActor) {}

  get actorId(): string {
    return this._actor.actorId;
  }

  get actorName(): string | undefined {
    return undefined;
  }

  /** Resolves once the constructor has finished (rejects if it failed or the actor died). */
  ready(): ObjectRef<null> {
    return this._actor.call(READY_METHOD, []) as ObjectRef<null>;
  }

  toString(): string {
    return `ThreadActorHandle(${this._actor.actorId})`;
  }
}

/** Starts a thread actor; returns its handle at once (calls wait in the thread until it is constructed). */
export function createThreadActor<T>(
  module: string,
  className: string,
  args: unknown[],
  opts: object,
): ActorHandle<T> {
  const options = checkThreadActorOptions(opts);
  const rt = currentRuntime();
  const sendable = prepareValue(args, "args", `cannot be sent to an actor (constructor of ${className})`);
  // refused at the call site, as for a process actor: a ref nested inside a constructor argument
  if (!sendable.some(isRef)) CodecPacket.forThread(sendable);
  const actor = new ThreadActor(rt, module, className, sendable, options);
  return methodProxy<T>(new ThreadActorHandle(actor), (method, callArgs) => actor.call(method, callArgs));
}

export function isThreadActorHandle(handle: unknown): handle is ThreadActorHandle {
  return handle instanceof ThreadActorHandle;
}
