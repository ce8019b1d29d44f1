/**
 * The cluster's processes and timeline from a driver: every process's report (calls running,
 * objects, metrics), a Chrome trace of a window (Ray's `ray.timeline()`), and a trace file that a
 * training run writes as it goes.
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { RECORD_TIMEOUT_MS } from "../cluster/process-probes.js";
import { HeadError, InputError } from "../errors.js";
import { currentRuntime } from "../runtime/current.js";
import { type ChromeTrace, chromeTrace, TraceFile, TraceRows } from "./chrome-trace.js";
import type { ProcessesReport } from "./process-report.js";
import { nowUs } from "./timeline.js";

/**
 * Every process's report, gathered by the head (processes that do not answer within a few seconds
 * are listed as silent). With `traceFromUs`/`traceToUs` (microseconds since the epoch), each report
 * carries its timeline events that ended in that window.
 */
export function clusterProcesses(
  window: { traceFromUs?: number; traceToUs?: number } = {},
): Promise<ProcessesReport> {
  return currentRuntime().head.request("processes", window);
}

/**
 * Records every task, actor call, object transfer, collective, trainer phase and user span of the
 * whole cluster for `seconds`, then returns them as a Chrome trace (write it as JSON and open it in
 * ui.perfetto.dev or chrome://tracing).
 */
export async function timeline(opts: { seconds: number }): Promise<ChromeTrace> {
  if (!(opts.seconds > 0)) throw new InputError(`timeline: seconds must be > 0, got ${opts.seconds}`);
  const report = await currentRuntime().head.request("timeline", { seconds: opts.seconds });
  return chromeTrace(report);
}

let writers = 0;

/** How far a process's clock may run behind the driver's (microseconds): clocks of one machine agree to about a millisecond. */
const CLOCK_SKEW_MARGIN_US = 1_000_000;

/** How a process that did not answer is named in errors: `pid 123 (actor ab12)`. */
function named(s: ProcessesReport["silent"][number]): string {
  return `pid ${s.pid}${s.actorId ? ` (actor ${s.actorId})` : ""}`;
}

/**
 * A run's timeline (`trainer.timeline`): recording stays on across the cluster from `open` to
 * `close`, and `flush` appends what every process recorded since the last flush to the file (call
 * it often enough that no process's ring buffer wraps: once per step). A driver that dies lets go of
 * the recording with it.
 *
 * `open` returns once every process heard that recording is on (processes that join later hear it as
 * they join), and fails naming those that did not within RECORD_TIMEOUT_MS (an event loop blocked
 * that long), whose work would go unrecorded. A process that does not answer a flush has its events
 * collected by a later one; `close` fails naming any that still did not answer, after finishing the
 * file (which names them too). The events of a worker killed meanwhile (an idle task executor, a
 * killed actor) are collected by the head before it dies.
 */
export class TimelineWriter {
  private rows = new TraceRows();
  private closed = false;
  /**
   * Per process, the end (by its own clock) of what was collected from it: the next flush takes its
   * events that ended after that. The driver's clock would do for all only if the clocks agreed; they
   * differ by up to a millisecond on one machine, and a span that ended just before its reply reached
   * the driver could be stamped after the driver's now.
   */
  private collectedTo = new Map<string, number>();
  /** Processes that did not answer a flush, by name: their events since are collected by a later one. */
  private behind = new Map<string, string>();

  private constructor(
    private file: TraceFile,
    private holder: string,
    private readonly startUs: number,
    private fromUs: number,
  ) {}

  static async open(path: string): Promise<TimelineWriter> {
    const rt = currentRuntime();
    mkdirSync(dirname(resolve(path)), { recursive: true });
    const file = new TraceFile(path);
    const holder = `${rt.clientId}/timeline-${++writers}`;
    const { silent } = await rt.head.request("record", { holder, on: true });
    if (silent.length > 0) {
      await rt.head.request("record", { holder, on: false });
      file.end(new TraceRows());
      throw new HeadError(
        `timeline ${path}: ${silent.map(named).join(", ")} did not hear within ${RECORD_TIMEOUT_MS / 1000} s that recording is on (event loop blocked?); their work would go unrecorded`,
      );
    }
    const now = nowUs();
    return new TimelineWriter(file, holder, now, now);
  }

  /** Appends every process's events that ended since the last flush (since the last one it answered). */
  async flush(): Promise<void> {
    if (this.closed) return;
    const toUs = nowUs();
    // a process first seen now joined since the last flush; its clock may run behind the driver's
    const firstSeenFrom = Math.max(this.startUs, this.fromUs - CLOCK_SKEW_MARGIN_US);
    const fromUs = Math.min(firstSeenFrom, ...this.collectedTo.values());
    // each process answers up to its own now (trace.toUs), which may be later than the driver's
    const report = await clusterProcesses({ traceFromUs: fromUs, traceToUs: Number.MAX_SAFE_INTEGER });
    const seen = new Set<string>();
    for (const p of report.processes) {
      seen.add(p.clientId);
      this.behind.delete(p.clientId);
      if (!p.trace) continue;
      const since = this.collectedTo.get(p.clientId) ?? firstSeenFrom;
      if (since > fromUs) p.trace.events = p.trace.events.filter((e) => e.ts! + e.dur! > since);
      this.collectedTo.set(p.clientId, Math.max(since, p.trace.toUs));
    }
    for (const s of report.silent) {
      seen.add(s.clientId);
      if (!this.behind.has(s.clientId)) this.behind.set(s.clientId, named(s));
      if (!this.collectedTo.has(s.clientId)) this.collectedTo.set(s.clientId, firstSeenFrom);
    }
    // a process gone (and its events, kept by the head, collected) is not asked for again
    for (const id of this.collectedTo.keys()) if (!seen.has(id)) this.collectedTo.delete(id);
    this.fromUs = toUs;
    this.file.append(this.rows.take(report));
  }

  /**
   * Flushes, lets go of the recording and finishes the file; fails (the file finished) naming the
   * processes whose events since some flush are missing because they did not answer.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    try {
      await this.flush();
    } finally {
      this.closed = true;
      this.file.end(this.rows, { fromUs: this.startUs, toUs: this.fromUs });
      await currentRuntime().head.request("record", { holder: this.holder, on: false });
    }
    if (this.behind.size > 0)
      throw new HeadError(
        `timeline ${this.file.path}: ${[...this.behind.values()].join(", ")} did not answer (or died before answering); their events since then are missing from the file`,
      );
  }
}
