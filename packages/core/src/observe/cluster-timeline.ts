/**
 * The cluster's processes and timeline from a driver: every process's report (calls running,
 * objects, metrics), a Chrome trace of a window (Ray's `ray.timeline()`), and a trace file that a
 * training run writes as it goes.
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { InputError } from "../errors.js";
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

/**
 * A run's timeline (`trainer.timeline`): recording stays on across the cluster from `open` to
 * `close`, and `flush` appends what every process recorded since the last flush to the file (call
 * it often enough that no process's ring buffer wraps: once per step). A driver that dies lets go of
 * the recording with it.
 */
export class TimelineWriter {
  private rows = new TraceRows();
  private closed = false;

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
    await rt.head.request("record", { holder, on: true });
    const now = nowUs();
    return new TimelineWriter(file, holder, now, now);
  }

  /** Appends every process's events that ended since the last flush. */
  async flush(): Promise<void> {
    if (this.closed) return;
    const toUs = nowUs();
    const report = await clusterProcesses({ traceFromUs: this.fromUs, traceToUs: toUs });
    this.fromUs = toUs;
    this.file.append(this.rows.take(report));
  }

  /** Flushes, lets go of the recording and finishes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    try {
      await this.flush();
    } finally {
      this.closed = true;
      this.file.end(this.rows, { fromUs: this.startUs, toUs: this.fromUs });
      await currentRuntime().head.request("record", { holder: this.holder, on: false });
    }
  }
}
