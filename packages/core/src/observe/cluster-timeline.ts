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
  /** Processes that did not answer a flush: the end of the window they were last collected to, and their name. */
  private behind = new Map<string, { since: number; who: string }>();

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
    const fromUs = Math.min(this.fromUs, ...[...this.behind.values()].map((b) => b.since));
    const report = await clusterProcesses({ traceFromUs: fromUs, traceToUs: toUs });
    for (const p of report.processes) {
      const since = this.behind.get(p.clientId)?.since ?? this.fromUs;
      this.behind.delete(p.clientId);
      if (p.trace && since > fromUs) p.trace.events = p.trace.events.filter((e) => e.ts! + e.dur! > since);
    }
    for (const s of report.silent)
      if (!this.behind.has(s.clientId)) this.behind.set(s.clientId, { since: this.fromUs, who: named(s) });
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
        `timeline ${this.file.path}: ${[...this.behind.values()].map((b) => b.who).join(", ")} did not answer (or died before answering); their events since then are missing from the file`,
      );
  }
}
