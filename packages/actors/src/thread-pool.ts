/**
 * ThreadPool: worker threads for CPU-heavy work inside one process (typically inside an actor),
 * a thin wrapper over a pool library (tinypool by default, or piscina) with explicit sizing and
 * back-pressure.
 *
 *   // tasks.ts: export default function (x: number) { ...; return y; }   (or named exports)
 *   const pool = new ThreadPool<number, number>({ filename: new URL("./tasks.ts", import.meta.url), size: 2 });
 *   const y = await pool.run(21);
 *   const z = await pool.run(data, { name: "otherExport", transfer: [data.buffer] });
 *   await pool.close();
 *
 * Capacity = `size` running + `maxQueue` waiting. When full, `run` either rejects at once with
 * ThreadPoolQueueFullError (`whenFull: "reject"`, the default) or waits for a slot (`"wait"`),
 * which gives a producer natural back-pressure.
 */
import os from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { Transferable } from "node:worker_threads";
import { isTypeScriptModule, threadEntry } from "@torl-ts/core";
import {
  DEFAULT_THREAD_POOL_LIBRARY,
  openPoolEngine,
  type PoolEngine,
  type ThreadPoolLibrary,
} from "./thread-pool-library.js";

export interface ThreadPoolOptions {
  /** Module run in the threads: a path or file URL; `.ts` modules work (tsx is registered in each thread). */
  filename: string | URL;
  /** Threads kept ready. Default: available parallelism - 1 (at least 1). */
  size?: number;
  /** Tasks that may wait beyond the running ones. Default Infinity. */
  maxQueue?: number;
  /** With the queue full: "reject" (ThreadPoolQueueFullError, default) or "wait" for a slot. */
  whenFull?: "reject" | "wait";
  /**
   * Value for the threads; a task reads it as `workerData[1]` of node:worker_threads (index 0 is the
   * pool library's). SharedArrayBuffers are shared, not copied.
   */
  workerData?: unknown;
  /** The pool library under the threads (default tinypool; see thread-pool-library.ts). */
  library?: ThreadPoolLibrary;
  /** V8 heap limits per thread. */
  resourceLimits?: {
    maxOldGenerationSizeMb?: number;
    maxYoungGenerationSizeMb?: number;
    stackSizeMb?: number;
  };
}

export interface ThreadPoolRunOptions {
  /** Export to call; default: the module's default export. */
  name?: string;
  /** ArrayBuffers (etc.) moved to the thread instead of copied. */
  transfer?: Transferable[];
  /** Aborts the task (a queued one is dropped, a running one's thread is terminated). */
  signal?: AbortSignal;
}

export interface ThreadPoolStats {
  threads: number;
  running: number;
  waiting: number;
  completed: number;
}

/** `run` found the pool at capacity with `whenFull: "reject"`. */
export class ThreadPoolQueueFullError extends Error {
  constructor(
    readonly size: number,
    readonly maxQueue: number,
  ) {
    super(`thread pool is full (${size} running, ${maxQueue} queued); retry later or use whenFull: "wait"`);
    this.name = "ThreadPoolQueueFullError";
  }
}

/** `run` was called after `close()`. */
export class ThreadPoolClosedError extends Error {
  constructor() {
    super("thread pool is closed");
    this.name = "ThreadPoolClosedError";
  }
}

/** The task threw in its thread (the original error is in `cause`). */
export class ThreadPoolTaskError extends Error {
  constructor(
    readonly filename: string,
    readonly exportName: string,
    override readonly cause: unknown,
  ) {
    super(
      `task ${exportName} of ${filename} failed: ${cause instanceof Error ? cause.message : String(cause)}`,
    );
    this.name = "ThreadPoolTaskError";
  }
}

export class ThreadPool<T = unknown, R = unknown> {
  readonly size: number;
  readonly maxQueue: number;
  readonly filename: string;
  private readonly whenFull: "reject" | "wait";
  readonly library: ThreadPoolLibrary;
  private readonly pool: PoolEngine;
  private readonly viaBootstrap: boolean;
  /** Tasks admitted (running or in the library's queue). */
  private outstanding = 0;
  private readonly slotWaiters: (() => void)[] = [];
  private closed = false;

  constructor(options: ThreadPoolOptions) {
    if (!options || options.filename === undefined) throw new TypeError("ThreadPool needs options.filename");
    this.filename =
      options.filename instanceof URL || options.filename.startsWith("file:")
        ? fileURLToPath(options.filename)
        : options.filename;
    const size = options.size ?? Math.max(1, (os.availableParallelism?.() ?? os.cpus().length) - 1);
    if (!Number.isInteger(size) || size < 1)
      throw new RangeError(`ThreadPool size must be an integer >= 1, got ${size}`);
    const maxQueue = options.maxQueue ?? Number.POSITIVE_INFINITY;
    if (!(maxQueue >= 0)) throw new RangeError(`ThreadPool maxQueue must be >= 0, got ${maxQueue}`);
    const whenFull = options.whenFull ?? "reject";
    if (whenFull !== "reject" && whenFull !== "wait") {
      throw new RangeError(`ThreadPool whenFull must be "reject" or "wait", got ${String(whenFull)}`);
    }
    this.size = size;
    this.maxQueue = maxQueue;
    this.whenFull = whenFull;
    this.viaBootstrap = isTypeScriptModule(this.filename);
    this.library = options.library ?? DEFAULT_THREAD_POOL_LIBRARY;
    if (this.library !== "tinypool" && this.library !== "piscina") {
      throw new RangeError(`ThreadPool library must be "tinypool" or "piscina", got ${String(this.library)}`);
    }
    this.pool = openPoolEngine(this.library, {
      filename: this.viaBootstrap ? fileURLToPath(threadEntry(pathToFileURL(this.filename))) : this.filename,
      threads: size,
      workerData: options.workerData,
      resourceLimits: options.resourceLimits,
    });
  }

  /** Runs the task in a thread; resolves to its (awaited) return value. */
  async run(task: T, options: ThreadPoolRunOptions = {}): Promise<R> {
    if (this.closed) throw new ThreadPoolClosedError();
    const capacity = this.size + this.maxQueue;
    if (this.outstanding >= capacity || this.slotWaiters.length > 0) {
      if (this.whenFull === "reject") throw new ThreadPoolQueueFullError(this.size, this.maxQueue);
      // A finishing task hands its slot straight to the oldest waiter (FIFO, no overtaking).
      await new Promise<void>((resolve) => this.slotWaiters.push(resolve));
      if (this.closed) throw new ThreadPoolClosedError();
    } else {
      this.outstanding++;
    }
    const exportName = options.name ?? "default";
    try {
      const payload = this.viaBootstrap ? { name: exportName, task } : task;
      return (await this.pool.run(payload, {
        name: this.viaBootstrap ? "default" : exportName,
        transferList: options.transfer,
        signal: options.signal ?? null,
      })) as R;
    } catch (err) {
      if (this.closed) throw new ThreadPoolClosedError();
      if ((err as Error)?.name === "AbortError") throw err;
      throw new ThreadPoolTaskError(this.filename, exportName, err);
    } finally {
      const next = this.slotWaiters.shift();
      if (next) next();
      else this.outstanding--;
    }
  }

  get stats(): ThreadPoolStats {
    return {
      threads: this.pool.threads.length,
      running: Math.min(this.size, this.outstanding),
      waiting: Math.max(0, this.outstanding - this.size) + this.slotWaiters.length,
      completed: this.pool.completed,
    };
  }

  /** Stops the threads; tasks still waiting for a slot reject with ThreadPoolClosedError. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.slotWaiters.splice(0)) w();
    await this.pool.destroy();
  }
}
