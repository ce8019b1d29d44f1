/**
 * Chrome trace files (the JSON object format: `{"traceEvents": [...]}`) that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: one process row (pid) per driver or worker, named by
 * `process_name` metadata (`Counter 'c1' pid=123 node=ab12`), its lanes (tids, see timeline.ts)
 * named by `thread_name`. A thread actor's calls get a row of their own, as a process actor's do
 * (`Counter thread actor Counter-ab12 in driver pid=99`), its pid made up (the process's plus
 * 1,000,000s). Events come from the processes' reports; a pid seen twice (two machines) gets a new
 * one in the file.
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
      const own = this.rowOf(p);
      for (const e of p.trace?.events ?? []) {
        const { track, ...event } = e;
        const pid = track ? this.trackRowOf(p, track) : own;
        this.names.get(pid)!.tids.add(e.tid);
        out.push({ ...event, pid });
      }
      if (p.trace) this.dropped.set(p.clientId, Math.max(this.dropped.get(p.clientId) ?? 0, p.trace.dropped));
    }
    for (const s of report.silent) this.silent.add(`pid ${s.pid}${s.actorId ? ` (actor ${s.actorId})` : ""}`);
    return out;
  }

  private rowOf(p: ProcessReport): number {
    return this.row(p.clientId, p.pid, `${whoIs(p)} pid=${p.pid}${p.nodeId ? ` node=${p.nodeId}` : ""}`, p);
  }

  /** The row of thread actor `actorId`, living in process `p`. */
  private trackRowOf(p: ProcessReport, actorId: string): number {
    const className = p.threadActors?.find((a) => a.actorId === actorId)?.className;
    const name = `${className ? `${className} ` : ""}thread actor ${actorId} in ${whoIs(p)} pid=${p.pid}${p.nodeId ? ` node=${p.nodeId}` : ""}`;
    return this.row(`${p.clientId}/${actorId}`, p.pid, name, p);
  }

  private row(key: string, wanted: number, name: string, p: ProcessReport): number {
    let pid = this.pids.get(key);
    if (pid !== undefined) return pid;
    pid = wanted;
    while (this.used.has(pid)) pid += 1_000_000;
    this.used.add(pid);
    this.pids.set(key, pid);
    this.names.set(pid, { name, sort: p.role === "driver" ? 0 : 1, tids: new Set() });
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

/** A process as its row is named: `driver`, `task executor`, `Counter 'c1'`. */
function whoIs(p: ProcessReport): string {
  if (p.role === "driver") return "driver";
  const cls = p.className === "(task)" ? "task executor" : (p.className ?? "worker");
  return `${cls}${p.actorName ? ` '${p.actorName}'` : ""}`;
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
