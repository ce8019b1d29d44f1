/**
 * The worker's side of calls: runs methods of the actor instance (or exported functions, for tasks
 * and invokeInActor) in arrival order, at most `maxConcurrency` at a time, and replies to the caller.
 */
import { SerializationError } from "../errors.js";
import { logWarn } from "../log.js";
import { type Encoded, encode, encodeError, errorToWire, printable, thrownMessage } from "../wire/codec.js";
import { prepareValue } from "../wire/sendable.js";
import { ObjectRef } from "./object-ref.js";
import { FLAG_IMMEDIATE, RESULT, RESULT_OK, RESULT_THREW, RESULT_UNSENDABLE } from "./protocol.js";
import type { Runtime } from "./runtime.js";

interface Job {
  peer: Buffer;
  seq: number;
  target: unknown;
  args: unknown[];
}

export class ExecutorError extends Error {
  override name = "ExecutorError";
}

/** Replies kept for calls that a caller may send again after its connection broke. */
const KEPT_REPLIES = 4096;
const KEPT_REPLY_BYTES = 1 << 20;
const KEPT_TOTAL_BYTES = 64 << 20;
const RUNNING = Symbol("running");
const TOO_LARGE = Symbol("too large to keep");

type Kept = typeof RUNNING | typeof TOO_LARGE | { enc: Encoded; bytes: number };

export class Executor {
  private running = 0;
  /**
   * At most once across broken connections: a caller re-sends the calls it has no answer for when
   * its connection comes back; one already running is not run again, one done gets its kept reply.
   * Keyed by caller identity (stable across reconnections) and sequence number; oldest dropped first.
   */
  private seen = new Map<string, Kept>();
  private keptBytes = 0;
  private queue: Job[] = [];
  private modules = new Map<string, any>();

  constructor(
    private rt: Runtime,
    private instance: any,
    private maxConcurrency: number,
  ) {}

  /** Runs a decoded CALL (its seq was checked by the caller of this method). */
  onCall(peer: Buffer, m: any[]): void {
    const job: Job = { peer, seq: m[1], target: m[2], args: Array.isArray(m[3]) ? m[3] : [] };
    const key = keyOf(job);
    const seen = this.seen.get(key);
    if (seen === RUNNING) return; // its reply goes out when it ends
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
    if (this.running < this.maxConcurrency && this.queue.length === 0) this.run(job, true);
    else this.queue.push(job);
  }

  private reply(job: Job, ok: boolean, value: unknown): void {
    let enc: Encoded | null = null;
    if (ok) {
      try {
        const sendable = prepareValue(value, "result", `cannot be returned from ${describe(job.target)}`);
        enc = encode([RESULT, job.seq, RESULT_OK, sendable]);
      } catch (e) {
        if (e instanceof SerializationError) {
          // the caller rebuilds a SerializationError: the same error a bad argument gives
          enc = encode([RESULT, job.seq, RESULT_UNSENDABLE, [e.path, e.found, e.message]]);
        } else
          value = new ExecutorError(
            `the result of ${describe(job.target)} cannot be serialized: ${thrownMessage(e)}`,
          );
      }
    }
    // any thrown value, whatever it holds, is encoded as far as it can be: every call gets its answer
    enc ??= encodeError(value, (w) => [RESULT, job.seq, RESULT_THREW, w]);
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
    if (counted) this.running++;
    let settled = false;
    const finish = (ok: boolean, value: unknown): void => {
      if (settled) return;
      settled = true;
      try {
        this.reply(job, ok, value);
      } catch (e) {
        logWarn(`the reply to ${describe(job.target)} could not be sent: ${printable(e)}`);
      } finally {
        if (counted) this.done();
      }
    };
    try {
      const needsAsync = job.args.some((a) => a instanceof ObjectRef) || this.needsImport(job.target);
      const result: any = needsAsync ? this.invokeAsync(job) : this.invoke(job);
      // a returned object's `then` may be a getter that throws: that too ends the call with its error
      const then =
        result !== null && typeof result === "object" && !(result instanceof ObjectRef)
          ? result.then
          : undefined;
      if (typeof then === "function") {
        then.call(
          result,
          (v: unknown) => finish(true, v),
          (e: unknown) => finish(false, e),
        );
      } else finish(true, result);
    } catch (e) {
      finish(false, e);
    }
  }

  private done(): void {
    this.running--;
    while (this.running < this.maxConcurrency && this.queue.length > 0) this.run(this.queue.shift()!, true);
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

function keyOf(job: Job): string {
  return `${job.peer.toString("latin1")}|${job.seq}`;
}

function describe(t: unknown): string {
  return typeof t === "string" ? `method '${t}'` : Array.isArray(t) ? `function '${t[1]}'` : "call";
}
