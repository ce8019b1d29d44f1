/**
 * The worker's side of calls: runs methods of the actor instance (or exported functions, for tasks
 * and invokeInActor) in arrival order, at most `maxConcurrency` at a time, and replies to the caller.
 * A generator's call streams its items (see STREAM_OPEN in protocol.ts) and holds its slot until the
 * generator ends; a cancelled call is dropped from the queue, or has its AbortSignal aborted.
 */
import { SerializationError, TaskCancelledError } from "../errors.js";
import { logWarn } from "../log.js";
import { CALL_FAMILIES } from "../observe/call-metrics.js";
import { metricCounter } from "../observe/metrics.js";
import type { RunningCall } from "../observe/process-report.js";
import { type OpenSpan, traceRecorder } from "../observe/timeline.js";
import { type Encoded, encode, encodeError, errorToWire, printable, thrownMessage } from "../wire/codec.js";
import { prepareValue } from "../wire/sendable.js";
import { runInCall } from "./call-context.js";
import { ObjectRef } from "./object-ref.js";
import {
  CALL,
  CANCEL,
  FLAG_IMMEDIATE,
  RESULT,
  RESULT_OK,
  RESULT_STREAM_END,
  RESULT_THREW,
  RESULT_UNDECODABLE,
  RESULT_UNSENDABLE,
  STREAM_ACK,
  STREAM_ITEM,
  STREAM_OPEN,
  STREAM_WINDOW_DEFAULT,
  STREAM_WINDOW_MAX,
} from "./protocol.js";
import type { Runtime } from "./runtime.js";

interface Job {
  peer: Buffer;
  seq: number;
  target: unknown;
  args: unknown[];
  /** The items a generator may run ahead of its caller's acknowledgements. */
  window: number;
  /** Aborted when the caller cancels the call (made when it starts to run). */
  controller: AbortController | null;
  cancelled: boolean;
  /** A stream's count of items the caller took, and the resume of a producer paused for it. */
  acked: number;
  wake: (() => void) | null;
  /** When it started to run (ms since the epoch), and its timeline span. */
  startedMs: number;
  span: OpenSpan | null;
  /** Its result (or an item) could not be encoded: it is answered with the error that says why. */
  unsendable: boolean;
}

const callsTotal = metricCounter(CALL_FAMILIES.total.name, CALL_FAMILIES.total.help, ["class", "method"]);
const callsFailed = metricCounter(CALL_FAMILIES.failed.name, CALL_FAMILIES.failed.help, ["class", "method"]);

export class ExecutorError extends Error {
  override name = "ExecutorError";
}

/**
 * Imports `module` and constructs its export `className` with the arguments `args()` gives once the
 * module is imported (it may register the serializers they need): the actor instance of a worker
 * process or thread. A constructor that returns a Promise (or any thenable) is refused: taken as the
 * instance, it would have none of the class's methods and the set-up it awaits would go unwatched.
 */
export async function constructActor(
  module: string,
  className: string,
  args: () => unknown[] | Promise<unknown[]>,
): Promise<Record<string, unknown>> {
  const mod = await import(module);
  const Cls = mod[className];
  if (typeof Cls !== "function") {
    throw new Error(
      `module ${module} has no exported class '${className}' (exports: ${Object.keys(mod).join(", ")})`,
    );
  }
  const instance = new Cls(...(await args()));
  if (instance !== null && typeof instance === "object" && typeof instance.then === "function") {
    // its outcome no longer matters: a rejection must not end the worker as unhandled
    instance.then(undefined, () => {});
    throw new TypeError(
      `the constructor of ${className} returned a Promise (a thenable), not the instance: a constructor ` +
        "must return synchronously; async set-up belongs in a method (e.g. an async init() called after creation)",
    );
  }
  return instance;
}

/** Replies kept for calls that a caller may send again after its connection broke. */
const KEPT_REPLIES = 4096;
const KEPT_REPLY_BYTES = 1 << 20;
const KEPT_TOTAL_BYTES = 64 << 20;
const RUNNING = Symbol("running");
const TOO_LARGE = Symbol("too large to keep");
const CANCELLED = Symbol("cancelled");

type Kept = typeof RUNNING | typeof TOO_LARGE | typeof CANCELLED | { enc: Encoded; bytes: number };

export class Executor {
  private busy = 0;
  /**
   * At most once across broken connections: a caller re-sends the calls it has no answer for when
   * its connection comes back; one already running is not run again, one done gets its kept reply.
   * Keyed by caller identity (stable across reconnections) and sequence number; oldest dropped first.
   */
  private seen = new Map<string, Kept>();
  private keptBytes = 0;
  private queue: Job[] = [];
  /** Calls running now (at most maxConcurrency, plus immediate ones), for cancel and stream acks. */
  private active = new Map<string, Job>();
  private modules = new Map<string, any>();

  /** The actor's class as metrics and the timeline name it ("(task)" for a task executor). */
  readonly className: string;

  constructor(
    private rt: Runtime,
    private instance: any,
    private maxConcurrency: number,
  ) {
    this.className = instance ? (instance.constructor?.name ?? "(actor)") : "(task)";
  }

  /** The calls running now (the `__ready__` probe left out). */
  running(): RunningCall[] {
    return [...this.active.values()]
      .filter((j) => j.target !== "__ready__")
      .map((j) => ({
        name: targetName(j.target),
        kind: typeof j.target === "string" ? "actor_call" : "task",
        sinceMs: j.startedMs,
      }));
  }

  queued(): number {
    return this.queue.length;
  }

  /** Runs a decoded CALL, STREAM_ACK or CANCEL (its seq was checked by the caller of this method). */
  onMessage(peer: Buffer, m: any[]): void {
    if (m[0] === CALL) this.onCall(peer, m);
    else if (m[0] === STREAM_ACK) {
      const job = this.active.get(keyFor(peer, m[1]));
      if (job && m[2] > job.acked) {
        job.acked = m[2];
        job.wake?.();
      }
    } else if (m[0] === CANCEL) this.cancel(keyFor(peer, m[1]));
  }

  private onCall(peer: Buffer, m: any[]): void {
    const window = m[5] ?? STREAM_WINDOW_DEFAULT;
    if (!(Number.isInteger(window) && window >= 1 && window <= STREAM_WINDOW_MAX)) {
      const why = `its stream window must be a whole number from 1 to ${STREAM_WINDOW_MAX}, got ${String(window)}`;
      this.rt.server.send(peer, [RESULT, m[1], RESULT_UNDECODABLE, why]);
      return;
    }
    const job: Job = {
      peer,
      seq: m[1],
      target: m[2],
      args: Array.isArray(m[3]) ? m[3] : [],
      window,
      controller: null,
      cancelled: false,
      acked: 0,
      wake: null,
      startedMs: 0,
      span: null,
      unsendable: false,
    };
    const key = keyOf(job);
    const seen = this.seen.get(key);
    if (seen === RUNNING || seen === CANCELLED) return; // its reply goes out when it ends; or nobody waits for one
    if (seen === TOO_LARGE) {
      this.rt.server.send(peer, [
        RESULT,
        job.seq,
        RESULT_THREW,
        errorToWire(
          new ExecutorError(
            `${describe(job.target)} ran once already; its result was too large to keep for re-sending after the connection broke, and it is not run twice`,
          ),
        ),
      ]);
      return;
    }
    if (seen) {
      this.rt.server.sendEncoded(peer, seen.enc);
      return;
    }
    this.seen.set(key, RUNNING);
    this.evict();
    if ((m[4] ?? 0) & FLAG_IMMEDIATE) {
      this.run(job, false);
      return;
    }
    if (this.busy < this.maxConcurrency && this.queue.length === 0) this.run(job, true);
    else this.queue.push(job);
  }

  /**
   * The caller cancelled a call (its ref is rejected there already): a queued one never runs; a
   * running one sees its signal aborted, a stream's generator is returned, and nothing is replied.
   */
  private cancel(key: string): void {
    const i = this.queue.findIndex((j) => keyOf(j) === key);
    if (i >= 0) {
      this.queue.splice(i, 1);
      this.seen.set(key, CANCELLED);
      return;
    }
    const job = this.active.get(key);
    if (job) {
      job.cancelled = true;
      job.controller?.abort(new TaskCancelledError(describe(job.target)));
      job.wake?.();
    } else if (!this.seen.has(key)) {
      // not here yet (a call re-sent after a broken connection): it must not run when it comes
      this.seen.set(key, CANCELLED);
      this.evict();
    }
  }

  /** The RESULT of a value: a value that cannot travel is answered with the error that says why. */
  private valueResult(job: Job, value: unknown): Encoded {
    try {
      const sendable = prepareValue(value, "result", `cannot be returned from ${describe(job.target)}`);
      return encode([RESULT, job.seq, RESULT_OK, sendable]);
    } catch (e) {
      return this.unsendableResult(job, e, "result");
    }
  }

  /** The RESULT of `what` (a result, a stream item) that could not be encoded. */
  private unsendableResult(job: Job, e: unknown, what: string): Encoded {
    job.unsendable = true;
    // the caller rebuilds a SerializationError: the same error a bad argument gives
    if (e instanceof SerializationError)
      return encode([RESULT, job.seq, RESULT_UNSENDABLE, [e.path, e.found, e.message]]);
    return threwResult(
      job,
      new ExecutorError(`the ${what} of ${describe(job.target)} cannot be serialized: ${thrownMessage(e)}`),
    );
  }

  /** Sends a call's RESULT, kept for a re-send after a broken connection if it is small enough. */
  private reply(job: Job, enc: Encoded): void {
    const key = keyOf(job);
    if (this.seen.get(key) === RUNNING) {
      const bytes = enc.head.byteLength + enc.frames.reduce((n, f) => n + f.byteLength, 0);
      if (bytes <= KEPT_REPLY_BYTES) {
        this.seen.set(key, { enc, bytes });
        this.keptBytes += bytes;
        this.evict();
      } else this.seen.set(key, TOO_LARGE);
    }
    this.rt.server.sendEncoded(job.peer, enc);
  }

  /** Drops the oldest kept calls beyond the count and byte limits. */
  private evict(): void {
    while (this.seen.size > KEPT_REPLIES || this.keptBytes > KEPT_TOTAL_BYTES) {
      const [oldest, kept] = this.seen.entries().next().value!;
      this.seen.delete(oldest);
      if (typeof kept === "object") this.keptBytes -= kept.bytes;
    }
  }

  private run(job: Job, counted: boolean): void {
    if (counted) this.busy++;
    const key = keyOf(job);
    const controller = new AbortController();
    job.controller = controller;
    this.active.set(key, job);
    const counts = job.target !== "__ready__";
    const labels = { class: this.className, method: targetName(job.target) };
    job.startedMs = Date.now();
    if (counts)
      job.span = traceRecorder.start(
        typeof job.target === "string" ? "actor_call" : "task",
        typeof job.target === "string" ? `${this.className}.${labels.method}` : labels.method,
      );
    let settled = false;
    const finish = (result: () => Encoded, threw = false): void => {
      if (settled) return;
      settled = true;
      this.active.delete(key);
      let failed = threw;
      // the span ends before its reply leaves: a caller that has the result and then collects the
      // timeline up to its own clock finds the span ended within the window (not a moment after it)
      const endSpan = (): void => {
        if (!counts) return;
        const span = job.span;
        job.span = null;
        traceRecorder.end(span, failed ? { failed: true } : job.cancelled ? { cancelled: true } : undefined);
      };
      try {
        // a cancelled call's caller has its answer (TaskCancelledError): its result is discarded
        if (job.cancelled) this.seen.set(key, CANCELLED);
        else {
          const enc = result();
          failed ||= job.unsendable; // a result that could not be encoded is answered with its error
          endSpan();
          this.reply(job, enc);
        }
      } catch (e) {
        failed = true;
        logWarn(`the reply to ${describe(job.target)} could not be sent: ${printable(e)}`);
      } finally {
        if (counts) {
          callsTotal.inc(labels);
          if (failed) callsFailed.inc(labels);
          endSpan();
        }
        if (counted) this.done();
      }
    };
    const ended = (ok: boolean, value: unknown): void => {
      if (ok && isGenerator(value)) void this.stream(job, value, finish);
      else finish(() => (ok ? this.valueResult(job, value) : threwResult(job, value)), !ok);
    };
    try {
      const result: any = runInCall(controller.signal, () =>
        traceRecorder.within(job.span, () => {
          const needsAsync = job.args.some((a) => a instanceof ObjectRef) || this.needsImport(job.target);
          return needsAsync ? this.invokeAsync(job) : this.invoke(job);
        }),
      );
      // a returned object's `then` may be a getter that throws: that too ends the call with its error
      const then =
        result !== null && typeof result === "object" && !(result instanceof ObjectRef)
          ? result.then
          : undefined;
      if (typeof then === "function") {
        then.call(
          result,
          (v: unknown) => ended(true, v),
          (e: unknown) => ended(false, e),
        );
      } else ended(true, result);
    } catch (e) {
      ended(false, e);
    }
  }

  /**
   * Sends a generator's items as they are produced, asking for the next one only while the caller
   * holds fewer than `window` unacknowledged items; ends with RESULT_STREAM_END (the count) or the
   * error of the item that failed. A cancelled stream's generator is returned (its finally blocks run).
   */
  private async stream(
    job: Job,
    gen: Generator | AsyncGenerator,
    finish: (result: () => Encoded, threw?: boolean) => void,
  ): Promise<void> {
    const signal = job.controller!.signal;
    const what = describe(job.target);
    this.rt.server.send(job.peer, [STREAM_OPEN, job.seq]);
    let index = 0;
    try {
      for (;;) {
        while (!job.cancelled && index - job.acked >= job.window)
          await new Promise<void>((resume) => {
            job.wake = resume;
          });
        job.wake = null;
        if (job.cancelled) break;
        const step = await runInCall(signal, () => gen.next());
        if (step.done || job.cancelled) break;
        let enc: Encoded;
        try {
          const item = prepareValue(step.value, `item ${index}`, `cannot be yielded from ${what}`);
          enc = encode([STREAM_ITEM, job.seq, index, item]);
        } catch (e) {
          // the item is lost either way: a generator that throws while returning adds nothing to say
          await Promise.resolve(runInCall(signal, () => gen.return(undefined))).catch(() => {});
          finish(() => this.unsendableResult(job, e, `item ${index}`));
          return;
        }
        this.rt.server.sendEncoded(job.peer, enc);
        index++;
      }
    } catch (e) {
      finish(() => threwResult(job, e), true);
      return;
    }
    if (job.cancelled) {
      try {
        await runInCall(signal, () => gen.return(undefined));
      } catch (e) {
        logWarn(`cancelled stream ${what}: its generator threw while returning: ${printable(e)}`);
      }
    }
    const count = index;
    finish(() => encode([RESULT, job.seq, RESULT_STREAM_END, count]));
  }

  private done(): void {
    this.busy--;
    while (this.busy < this.maxConcurrency && this.queue.length > 0) this.run(this.queue.shift()!, true);
  }

  private needsImport(target: unknown): boolean {
    return Array.isArray(target) && !this.modules.has(target[0]);
  }

  private async invokeAsync(job: Job): Promise<unknown> {
    if (Array.isArray(job.target) && !this.modules.has(job.target[0])) {
      this.modules.set(job.target[0], await import(job.target[0]));
    }
    job.args = await Promise.all(job.args.map((a) => (a instanceof ObjectRef ? this.rt.getOne(a) : a)));
    return this.invoke(job);
  }

  private invoke(job: Job): unknown {
    const t = job.target;
    if (typeof t === "string") {
      if (t === "__ready__") return null;
      if (!this.instance) throw new ExecutorError(`this worker hosts no actor; cannot call method '${t}'`);
      const f = this.instance[t];
      if (typeof f !== "function") {
        throw new ExecutorError(`actor class ${this.instance.constructor?.name} has no method '${t}'`);
      }
      return f.apply(this.instance, job.args);
    }
    if (Array.isArray(t) && typeof t[0] === "string" && typeof t[1] === "string") {
      const mod = this.modules.get(t[0]);
      const f = mod?.[t[1]];
      if (typeof f !== "function")
        throw new ExecutorError(`module ${t[0]} has no exported function '${t[1]}'`);
      return f(...job.args);
    }
    throw new ExecutorError(`bad call target ${JSON.stringify(t)}`);
  }
}

/** The RESULT of a thrown value: any value, whatever it holds, is encoded as far as it can be. */
function threwResult(job: Job, thrown: unknown): Encoded {
  return encodeError(thrown, (w) => [RESULT, job.seq, RESULT_THREW, w]);
}

/** A generator object (of a `function*` or `async function*`): its call streams its items. */
export function isGenerator(v: unknown): v is Generator | AsyncGenerator {
  const tag = Object.prototype.toString.call(v);
  return tag === "[object AsyncGenerator]" || tag === "[object Generator]";
}

function keyFor(peer: Buffer, seq: number): string {
  return `${peer.toString("latin1")}|${seq}`;
}

function keyOf(job: Job): string {
  return keyFor(job.peer, job.seq);
}

/** A call's method or function name, as metrics and the dashboard show it. */
function targetName(t: unknown): string {
  return typeof t === "string" ? t : Array.isArray(t) ? String(t[1]) : "call";
}

function describe(t: unknown): string {
  return typeof t === "string" ? `method '${t}'` : Array.isArray(t) ? `function '${t[1]}'` : "call";
}
