/**
 * Entry of a thread actor's worker thread: exposes a ThreadActorHost with comlink on the parent port,
 * constructs the actor when told to, and runs its methods in arrival order, at most maxConcurrency at
 * a time (what a process actor's executor does).
 */
import { parentPort } from "node:worker_threads";
import { expose } from "comlink";
import nodeEndpoint from "comlink/dist/umd/node-adapter.js";
import { SerializationError, TaskCancelledError } from "../errors.js";
import { nowUs } from "../observe/timeline.js";
import { errorToWire, thrownMessage } from "../wire/codec.js";
import { runInCall } from "./call-context.js";
import { constructActor, ExecutorError, isGenerator } from "./executor.js";
import {
  CodecPacket,
  READY_METHOD,
  type ThreadActorHost,
  type ThreadActorStart,
  type ThreadCallFailure,
} from "./thread-actor-wire.js";

if (!parentPort) throw new Error("thread-actor-host runs only as a worker thread");

let instance: Record<string, unknown> | null = null;
let started: Promise<void> | null = null;
let maxConcurrency = 1;
let running = 0;
const waiting: Array<() => void> = [];

/** A call from its start to its end (a generator's until it returns), by the driver's seq. */
interface HostCall {
  method: string;
  controller: AbortController;
  cancelled: boolean;
  gen: Generator | AsyncGenerator | null;
  items: number;
  /** When the method began to run (its slot taken, the constructor done), in µs since the epoch. */
  startUs: number;
}
const calls = new Map<number, HostCall>();

/** The call ends: its slot goes to the next waiting call. */
function end(seq: number, c: HostCall): void {
  if (calls.get(seq) !== c) return;
  calls.delete(seq);
  release();
}

/** A value that cannot be sent back, as the failure a process actor's executor answers. */
function unsendable(e: unknown, what: string, method: string): ThreadCallFailure {
  if (e instanceof SerializationError)
    return { kind: "unsendable", serialization: [e.path, e.found, e.message] };
  return threw(
    new ExecutorError(`the ${what} of method '${method}' cannot be serialized: ${thrownMessage(e)}`),
  );
}

/** When call `c` ran, ending now (nothing if it never began). */
function ran(c: HostCall): { ranUs?: [number, number] } {
  return c.startUs > 0 ? { ranUs: [c.startUs, nowUs()] } : {};
}

function threw(error: unknown): ThreadCallFailure {
  return { kind: "threw", error: errorToWire(error) };
}

async function construct(spec: ThreadActorStart, args: CodecPacket): Promise<void> {
  instance = await constructActor(spec.module, spec.className, () => args.decode() as unknown[]);
}

/** Waits for a free slot (FIFO); the caller must call `release` when its call ends. */
function acquire(): Promise<void> | undefined {
  if (running < maxConcurrency && waiting.length === 0) {
    running++;
    return undefined;
  }
  return new Promise((resolve) => waiting.push(resolve));
}

function release(): void {
  const next = waiting.shift();
  if (next) next();
  else running--;
}

async function invoke(method: string, packet: CodecPacket, c: HostCall): Promise<unknown> {
  if (!started) throw new Error(`call of '${method}' reached the thread before its actor was started`);
  await started;
  // cancelled while it waited for its slot or for the constructor: it never runs
  if (c.cancelled) throw new TaskCancelledError(`method '${method}'`);
  c.startUs = nowUs();
  if (method === READY_METHOD) return null;
  const args = packet.decode() as unknown[];
  const f = instance?.[method];
  if (typeof f !== "function") {
    throw new Error(`actor class ${instance?.constructor?.name} has no method '${method}'`);
  }
  return await f.apply(instance, args);
}

const host: ThreadActorHost = {
  async start(spec, args) {
    maxConcurrency = Math.max(1, spec.maxConcurrency);
    started = construct(spec, args);
    try {
      await started;
    } catch (e) {
      throw threw(e);
    }
    return null;
  },

  async call(seq, method, packet) {
    const c: HostCall = {
      method,
      controller: new AbortController(),
      cancelled: false,
      gen: null,
      items: 0,
      startUs: 0,
    };
    calls.set(seq, c);
    const slot = acquire();
    if (slot) await slot;
    let value: unknown;
    try {
      value = await runInCall(c.controller.signal, () => invoke(method, packet, c));
    } catch (e) {
      end(seq, c);
      throw { ...threw(e), ...ran(c) };
    }
    if (isGenerator(value) && !c.cancelled) {
      c.gen = value;
      return { stream: true };
    }
    end(seq, c);
    const times = ran(c);
    if (isGenerator(value)) void Promise.resolve(value.return(undefined)).catch(() => {});
    try {
      const packet = CodecPacket.pack(value, "result", `cannot be returned from method '${method}'`);
      if (times.ranUs) packet.ranUs = times.ranUs;
      return packet;
    } catch (e) {
      throw { ...unsendable(e, "result", method), ...times };
    }
  },

  async next(seq) {
    const c = calls.get(seq);
    const gen = c?.gen;
    if (!c || !gen) throw threw(new ExecutorError(`call ${seq} has no stream open in this thread`));
    let step: IteratorResult<unknown>;
    try {
      step = await runInCall(c.controller.signal, () => gen.next());
    } catch (e) {
      end(seq, c);
      throw threw(e);
    }
    if (step.done) {
      end(seq, c);
      return null;
    }
    const index = c.items++;
    try {
      return CodecPacket.pack(step.value, `item ${index}`, `cannot be yielded from method '${c.method}'`);
    } catch (e) {
      await Promise.resolve(runInCall(c.controller.signal, () => gen.return(undefined))).catch(() => {});
      end(seq, c);
      throw unsendable(e, `item ${index}`, c.method);
    }
  },

  cancel(seq) {
    const c = calls.get(seq);
    if (!c || c.cancelled) return;
    c.cancelled = true;
    c.controller.abort(new TaskCancelledError(`method '${c.method}'`));
    const gen = c.gen;
    if (!gen) return; // a running method ends by itself (its result is discarded by the driver)
    c.gen = null;
    // returned after a step in progress, if any; its finally blocks run, then its slot is free
    void Promise.resolve(runInCall(c.controller.signal, () => gen.return(undefined)))
      .catch(() => {})
      .finally(() => end(seq, c));
  },
};

expose(host, nodeEndpoint(parentPort));
