/**
 * What one process (a driver, or the runtime inside a worker) tells the head when probed: the calls
 * it is running and queueing, the objects it owns and borrows, its metrics and, when asked, the
 * timeline events of a window. The head gathers one from every process (ProcessesReport) for the
 * dashboard, /metrics and `torl timeline`.
 */
import type { Activity } from "./activity.js";
import type { MetricFamily } from "./metrics.js";
import type { TraceEvent } from "./timeline.js";

/** A call a worker is running now. */
export interface RunningCall {
  /** The method (actor calls) or exported function (tasks). */
  name: string;
  kind: "actor_call" | "task";
  /** When it started, in ms since the epoch. */
  sinceMs: number;
}

/** An object this process owns. */
export interface OwnedObject {
  /** `<owner client id>:<seq>`, as ObjectRef.id. */
  id: string;
  state: "PENDING" | "READY" | "FAILED";
  /** Bytes of its value: typed arrays exactly, other values estimated (strings, nested arrays). */
  bytes: number;
  /** ObjectRefs to it alive in the owner. */
  localRefs: number;
  /** Copies of its ref sent to other processes and not released yet. */
  copiesOut: number;
}

/**
 * A thread actor (`createActor(..., { thread: true })`) living in a thread of the reporting process:
 * what a worker's report says of its actor, for an actor that has no worker of its own. Dead ones
 * stay listed (the last THREAD_ACTORS_DEAD_LISTED of them).
 */
export interface ThreadActorReport {
  actorId: string;
  className: string;
  state: "PENDING" | "ALIVE" | "RESTARTING" | "DEAD";
  /** Times its thread was started again after it died (maxRestarts). */
  restarts: number;
  /** Calls its thread is running now (its constructor done, a slot free), oldest first. */
  running: RunningCall[];
  /** Calls made to it that wait: for a free slot, for its constructor, or for their ObjectRef arguments. */
  queued: number;
  /** Calls its thread ran to their end, by method, and how many of those threw or could not be returned. */
  calls: { method: string; total: number; failed: number }[];
  /** Why it died (a dead one). */
  cause?: string;
}

export const THREAD_ACTORS_DEAD_LISTED = 100;

export interface ProcessReport {
  clientId: string;
  pid: number;
  role: "driver" | "worker";
  nodeId?: string;
  actorId?: string;
  actorName?: string;
  /** The actor's class (a worker hosting one); "(task executor)" for a task executor. */
  className?: string;
  /** Calls running now (workers). */
  running: RunningCall[];
  /** Calls received and waiting for a free slot (workers). */
  queued: number;
  /** The thread actors this process created (they run in its threads). */
  threadActors: ThreadActorReport[];
  /** The largest objects this process owns (at most OWNED_OBJECTS_LISTED). */
  objects: OwnedObject[];
  /** All objects it owns, and their bytes. */
  objectCount: number;
  objectBytes: number;
  /** Ids of objects owned elsewhere that this process holds refs to (at most BORROWED_LISTED). */
  borrowed: string[];
  metrics: MetricFamily[];
  /** What the process says it is doing, by topic (setProcessActivity), e.g. a trainer's step and phase. */
  activity: Record<string, Activity>;
  /**
   * Asked for: the events that ended in the window, how many the ring buffer overwrote so far, and
   * the end of the window as this process covered it, by its own clock: the earlier of the window's
   * end and its now. Clocks of processes differ (by about a millisecond on one machine, more between
   * machines): a reader that collects again should ask this process from `toUs` on, not from the
   * window's end by its own clock, or an event that ended just before the answer may be missed.
   */
  trace?: { events: TraceEvent[]; dropped: number; toUs: number };
}

export const OWNED_OBJECTS_LISTED = 100;
export const BORROWED_LISTED = 200;

/** The answer to a probe of every process. */
export interface ProcessesReport {
  processes: ProcessReport[];
  /** Processes that did not answer within the deadline (an event loop blocked by a long synchronous call, or a hung process). */
  silent: { clientId: string; pid: number; actorId?: string }[];
  /** The trace window asked for, in microseconds since the epoch. */
  window?: { fromUs: number; toUs: number };
}

/** Bytes of a value as the store holds it: exact for typed arrays and buffers, estimated otherwise. */
export function approxBytes(v: unknown, depth = 0): number {
  if (v === null || v === undefined) return 0;
  if (ArrayBuffer.isView(v)) return v.byteLength;
  if (v instanceof ArrayBuffer) return v.byteLength;
  switch (typeof v) {
    case "string":
      return v.length;
    case "number":
    case "bigint":
      return 8;
    case "boolean":
      return 1;
    case "object": {
      if (depth > 4) return 0;
      let n = 0;
      let k = 0;
      const values = Array.isArray(v) ? v : v instanceof Map ? [...v.values()] : Object.values(v);
      for (const x of values) {
        n += approxBytes(x, depth + 1);
        // a huge array of small values: estimate from its first elements
        if (++k === 1000 && values.length > 1000) return Math.round((n / 1000) * values.length);
      }
      return n;
    }
    default:
      return 0;
  }
}
