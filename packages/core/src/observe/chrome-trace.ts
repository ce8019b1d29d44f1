/**
 * Chrome trace files (the JSON object format: `{"traceEvents": [...]}`) that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: one process row (pid) per driver or worker, named by
 * `process_name` metadata (`Counter 'c1' pid=123 node=ab12`), its lanes (tids, see timeline.ts)
 * named by `thread_name`. Events come from the processes' reports; a pid seen twice (two machines)
 * gets a new one in the file.
 */
import { closeSync, openSync, writeSync } from "node:fs";
import type { ProcessesReport, ProcessReport } from "./process-report.js";
import type { TraceEvent } from "./timeline.js";

export interface ChromeTrace {
  traceEvents: TraceEvent[];
  displayTimeUnit: "ms";
  /** What the viewer shows as the trace's metadata: the window, processes that did not answer. */
  otherData: Record<string, string>;
}

/** Assigns each process its row and names it; remembers rows across several reports (a run's flushes). */
export class TraceRows {
  private pids = new Map<string, number>();
  private used = new Set<number>();
  private names = new Map<number, { name: string; sort: number; tids: Set<number> }>();
  /** Events the processes' ring buffers overwrote (the highest count each reported). */
  private dropped = new Map<string, number>();
  private silent = new Set<string>();

  /** The events of `report`, moved to their processes' rows. */
  take(report: ProcessesReport): TraceEvent[] {
    const out: TraceEvent[] = [];
    for (const p of report.processes) {
      const pid = this.rowOf(p);
      const row = this.names.get(pid)!;
      for (const e of p.trace?.events ?? []) {
        row.tids.add(e.tid);
        out.push({ ...e, pid });
      }
      if (p.trace) this.dropped.set(p.clientId, Math.max(this.dropped.get(p.clientId) ?? 0, p.trace.dropped));
    }
    for (const s of report.silent) this.silent.add(`pid ${s.pid}${s.actorId ? ` (actor ${s.actorId})` : ""}`);
    return out;
  }

  private rowOf(p: ProcessReport): number {
    let pid = this.pids.get(p.clientId);
    if (pid !== undefined) return pid;
    pid = p.pid;
    while (this.used.has(pid)) pid += 1_000_000;
    this.used.add(pid);
    this.pids.set(p.clientId, pid);
    const who =
      p.role === "driver"
        ? "driver"
        : `${p.className === "(task)" ? "task executor" : (p.className ?? "worker")}${p.actorName ? ` '${p.actorName}'` : ""}`;
    this.names.set(pid, {
      name: `${who} pid=${p.pid}${p.nodeId ? ` node=${p.nodeId}` : ""}`,
      sort: p.role === "driver" ? 0 : 1,
      tids: new Set(),
    });
    return pid;
  }

  /** The metadata events naming every row and lane seen so far. */
  metadata(): TraceEvent[] {
    const out: TraceEvent[] = [];
    for (const [pid, row] of this.names) {
      out.push({ name: "process_name", ph: "M", pid, tid: 0, args: { name: row.name } });
      out.push({ name: "process_sort_index", ph: "M", pid, tid: 0, args: { sort_index: row.sort } });
      for (const tid of [...row.tids].sort((a, b) => a - b))
        out.push({ name: "thread_name", ph: "M", pid, tid, args: { name: `lane ${tid}` } });
    }
    return out;
  }

  otherData(window?: { fromUs: number; toUs: number }): Record<string, string> {
    const data: Record<string, string> = {};
    if (window)
      data.window = `${new Date(window.fromUs / 1000).toISOString()} to ${new Date(window.toUs / 1000).toISOString()}`;
    const dropped = [...this.dropped.values()].reduce((a, b) => a + b, 0);
    if (dropped > 0)
      data.dropped_events = `${dropped} (ring buffers full: TORL_TIMELINE_EVENTS raises their size)`;
    if (this.silent.size > 0) data.silent_processes = [...this.silent].join(", ");
    return data;
  }
}

/** The whole trace of one report (`torl timeline`, `timeline()`). */
export function chromeTrace(report: ProcessesReport): ChromeTrace {
  const rows = new TraceRows();
  const events = rows.take(report);
  return {
    traceEvents: [...rows.metadata(), ...events],
    displayTimeUnit: "ms",
    otherData: rows.otherData(report.window),
  };
}

/**
 * A trace file written as it grows: events appended as they are collected, the rows' names and the
 * closing bracket written by `end` (a file whose writer died lacks them; Perfetto still opens it).
 */
export class TraceFile {
  private fd: number;
  private first = true;

  constructor(readonly path: string) {
    this.fd = openSync(path, "w");
    writeSync(this.fd, '{"displayTimeUnit":"ms","traceEvents":[\n');
  }

  append(events: readonly TraceEvent[]): void {
    if (events.length === 0) return;
    const text = events.map((e) => JSON.stringify(e)).join(",\n");
    writeSync(this.fd, this.first ? text : `,\n${text}`);
    this.first = false;
  }

  end(rows: TraceRows, window?: { fromUs: number; toUs: number }): void {
    this.append(rows.metadata());
    writeSync(this.fd, `\n],"otherData":${JSON.stringify(rows.otherData(window))}}\n`);
    closeSync(this.fd);
  }
}
