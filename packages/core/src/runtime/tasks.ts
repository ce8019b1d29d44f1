/**
 * Remote functions (tasks): run on pooled executor workers leased per resource shape. A task goes
 * to the least busy executor; new executors start while work queues up (up to what the cluster's
 * CPUs allow); a task whose executor dies is retried elsewhere up to `maxRetries` times.
 */
import {
  type ActorDiedError,
  InfeasibleResourceError,
  TaskCancelledError,
  TaskFailedError,
} from "../errors.js";
import { prepareValue } from "../wire/sendable.js";
import type { ActorRecord, CallInfo } from "./actor-calls.js";
import type { ObjectRef } from "./object-ref.js";
import { FAILED } from "./object-store.js";
import type { Runtime } from "./runtime.js";

interface QueuedTask {
  seq: number;
  target: [string, string];
  args: unknown[];
  retriesLeft: number;
  /** The items its stream may run ahead of the caller, should the function be a generator. */
  window: number;
}

const PIPELINE = 256;
const IDLE_MS = 30_000;

export class TaskPool {
  private execs: ActorRecord[] = [];
  private queue: QueuedTask[] = [];
  private idleTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private rt: Runtime,
    private resources: Record<string, number>,
    private maxExecs: number,
    private spawn: (resources: Record<string, number>) => ActorRecord,
  ) {
    rt.cancellers.push(this);
  }

  /** Queues a task; throws SerializationError at once for arguments that cannot travel. */
  submit(target: [string, string], args: unknown[], maxRetries: number, window: number): ObjectRef {
    const sendable = prepareValue(args, "args", `cannot be sent to a task (${target[1]})`);
    const seq = this.rt.nextSeq();
    const ref = this.rt.newOwnedRef(seq);
    this.queue.push({ seq, target, args: sendable, retriesLeft: maxRetries, window });
    this.pump();
    return ref;
  }

  /**
   * Ends the pool (shutdown): queued tasks fail with TaskFailedError, and nothing is dispatched or
   * started from now on (the runtime that would run it is going away).
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const i = this.rt.cancellers.indexOf(this);
    if (i >= 0) this.rt.cancellers.splice(i, 1);
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    for (const t of this.queue.splice(0)) {
      const err = new TaskFailedError(
        `task ${t.target[1]} had not started when shutdown() ended the runtime that would run it`,
      );
      this.rt.store.settle(t.seq, FAILED, err);
    }
  }

  /** cancel(ref) of a task still waiting for an executor: it never runs. */
  cancel(seq: number): boolean {
    const i = this.queue.findIndex((t) => t.seq === seq);
    if (i < 0) return false;
    const [t] = this.queue.splice(i, 1);
    this.rt.settleCall(seq, FAILED, new TaskCancelledError(`task ${t!.target[1]}`));
    return true;
  }

  /** An executor that cancel(ref, { force: true }) is killing: it gets no more tasks. */
  retire(rec: ActorRecord): void {
    this.execs = this.execs.filter((e) => e !== rec);
    this.pump();
  }

  private pump(): void {
    if (this.closed) return;
    while (this.queue.length > 0) {
      let best: ActorRecord | null = null;
      for (const e of this.execs) {
        if (e.state !== "ALIVE") continue;
        if (!best || e.inflight.size < best.inflight.size) best = e;
      }
      const full = this.execs.length >= this.maxExecs;
      if (best && (best.inflight.size === 0 || (full && best.inflight.size < PIPELINE))) {
        const t = this.queue.shift()!;
        this.dispatch(best, t);
        continue;
      }
      if (!full && !this.execs.some((e) => e.state === "PENDING")) {
        const rec = this.spawn(this.resources);
        rec.pool = this;
        this.execs.push(rec);
      }
      break;
    }
    this.armIdle();
  }

  private dispatch(rec: ActorRecord, t: QueuedTask): void {
    const extra: Partial<CallInfo> = {
      window: t.window,
      done: () => this.pump(),
      onDied: (info: CallInfo, err: Error) => {
        if (t.retriesLeft > 0 && !this.closed) {
          t.retriesLeft--;
          this.queue.unshift(t);
          setImmediate(() => this.pump());
          return true;
        }
        void info;
        this.rt.settleCall(t.seq, FAILED, err as ActorDiedError);
        return true;
      },
    };
    this.rt.actors.send(rec, t.seq, t.target, t.args, 0, 0, extra);
  }

  onIdle(_rec: ActorRecord): void {
    this.pump();
  }

  onState(rec: ActorRecord): void {
    if (rec.state === "DEAD") {
      this.execs = this.execs.filter((e) => e !== rec);
      if (rec.death instanceof InfeasibleResourceError) {
        for (const t of this.queue.splice(0)) this.rt.settleCall(t.seq, FAILED, rec.death);
      }
    }
    this.pump();
  }

  private armIdle(): void {
    if (this.idleTimer) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.queue.length === 0 && this.execs.every((e) => e.inflight.size === 0)) {
        for (const e of this.execs) this.rt.head.notify("kill", { actorId: e.actorId, noRestart: true });
        this.execs = [];
      } else this.armIdle();
    }, IDLE_MS);
    this.idleTimer.unref();
  }
}
