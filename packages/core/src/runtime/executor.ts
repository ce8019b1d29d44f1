/**
 * The worker's side of calls: runs methods of the actor instance (or exported functions, for tasks
 * and invokeInActor) in arrival order, at most `maxConcurrency` at a time, and replies to the caller.
 */
import { SerializationError } from "../errors.js";
import { encode, errorToWire } from "../wire/codec.js";
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

export class Executor {
  private running = 0;
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
    if ((m[4] ?? 0) & FLAG_IMMEDIATE) {
      this.run(job, false);
      return;
    }
    if (this.running < this.maxConcurrency && this.queue.length === 0) this.run(job, true);
    else this.queue.push(job);
  }

  private reply(job: Job, ok: boolean, value: unknown): void {
    if (ok) {
      try {
        const sendable = prepareValue(value, "result", `cannot be returned from ${describe(job.target)}`);
        this.rt.server.sendEncoded(job.peer, encode([RESULT, job.seq, RESULT_OK, sendable]));
        return;
      } catch (e) {
        if (e instanceof SerializationError) {
          // the caller rebuilds a SerializationError: the same error a bad argument gives
          this.rt.server.send(job.peer, [RESULT, job.seq, RESULT_UNSENDABLE, [e.path, e.found, e.message]]);
          return;
        }
        value = new ExecutorError(
          `the result of ${describe(job.target)} cannot be serialized: ${(e as Error).message}`,
        );
      }
    }
    this.rt.server.sendEncoded(job.peer, encode([RESULT, job.seq, RESULT_THREW, errorToWire(value)]));
  }

  private run(job: Job, counted: boolean): void {
    if (counted) this.running++;
    let result: any;
    try {
      const needsAsync = job.args.some((a) => a instanceof ObjectRef) || this.needsImport(job.target);
      result = needsAsync ? this.invokeAsync(job) : this.invoke(job);
    } catch (e) {
      this.reply(job, false, e);
      if (counted) this.done();
      return;
    }
    if (
      result !== null &&
      typeof result === "object" &&
      typeof result.then === "function" &&
      !(result instanceof ObjectRef)
    ) {
      result.then(
        (v: unknown) => {
          this.reply(job, true, v);
          if (counted) this.done();
        },
        (e: unknown) => {
          this.reply(job, false, e);
          if (counted) this.done();
        },
      );
    } else {
      this.reply(job, true, result);
      if (counted) this.done();
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

function describe(t: unknown): string {
  return typeof t === "string" ? `method '${t}'` : Array.isArray(t) ? `function '${t[1]}'` : "call";
}
