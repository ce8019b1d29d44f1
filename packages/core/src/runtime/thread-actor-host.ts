/**
 * Entry of a thread actor's worker thread: exposes a ThreadActorHost with comlink on the parent port,
 * constructs the actor when told to, and runs its methods in arrival order, at most maxConcurrency at
 * a time (what a process actor's executor does).
 */
import { parentPort } from "node:worker_threads";
import { expose } from "comlink";
import nodeEndpoint from "comlink/dist/umd/node-adapter.js";
import { SerializationError } from "../errors.js";
import { errorToWire, thrownMessage } from "../wire/codec.js";
import { ExecutorError } from "./executor.js";
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

function threw(error: unknown): ThreadCallFailure {
  return { kind: "threw", error: errorToWire(error) };
}

async function construct(spec: ThreadActorStart, args: CodecPacket): Promise<void> {
  const mod = await import(spec.module);
  const Cls = mod[spec.className];
  if (typeof Cls !== "function") {
    throw new Error(
      `module ${spec.module} has no exported class '${spec.className}' (exports: ${Object.keys(mod).join(", ")})`,
    );
  }
  instance = new Cls(...(args.decode() as unknown[]));
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

async function invoke(method: string, packet: CodecPacket): Promise<unknown> {
  if (!started) throw new Error(`call of '${method}' reached the thread before its actor was started`);
  await started;
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

  async call(method, packet) {
    const slot = acquire();
    if (slot) await slot;
    let value: unknown;
    try {
      value = await invoke(method, packet);
    } catch (e) {
      throw threw(e);
    } finally {
      release();
    }
    try {
      return CodecPacket.pack(value, "result", `cannot be returned from method '${method}'`);
    } catch (e) {
      if (e instanceof SerializationError)
        throw { kind: "unsendable", serialization: [e.path, e.found, e.message] } satisfies ThreadCallFailure;
      // what a process actor's executor answers for the same result
      throw threw(
        new ExecutorError(`the result of method '${method}' cannot be serialized: ${thrownMessage(e)}`),
      );
    }
  },
};

expose(host, nodeEndpoint(parentPort));
