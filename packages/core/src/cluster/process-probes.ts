/**
 * The head's part in observing processes: it probes every client runtime (drivers and workers) for
 * its report (running calls, objects, metrics, timeline events) and answers with all of them once
 * each answered or the deadline passed (the silent ones are named, never waited on forever), and it
 * keeps timeline recording on while anyone holds it: a `torl timeline` window, or a driver writing a
 * run's trace (let go of when that driver is gone). Every probe carries the recording state, so a
 * holder's request is answered only after every process heard it; a client that says hello later
 * learns it from the hello's answer.
 */
import type { ProcessesReport, ProcessReport } from "../observe/process-report.js";
import { nowUs } from "../observe/timeline.js";
import type { ClientTable } from "./clients.js";
import type { Outbox } from "./outbox.js";

/** How long a probe waits for the processes' reports; a trace, which may be large, longer. */
export const PROBE_TIMEOUT_MS = 3000;
export const TRACE_PROBE_TIMEOUT_MS = 15_000;

/** The longest window `torl timeline --seconds` records. */
export const MAX_TIMELINE_SECONDS = 3600;

interface Query {
  waiting: Map<string, { pid: number; actorId?: string }>;
  reports: ProcessReport[];
  window?: { fromUs: number; toUs: number };
  answer: (v: ProcessesReport) => void;
  timer: NodeJS.Timeout;
}

export class ProcessProbes {
  private qid = 0;
  private queries = new Map<number, Query>();
  /** Who holds recording on: a client (its id, or its id and `/` and a name of its own), or a window. */
  private holders = new Set<string>();

  constructor(
    private clients: ClientTable,
    private out: Outbox,
  ) {}

  get recording(): boolean {
    return this.holders.size > 0;
  }

  /** Asks every client for its report (and, with a window, its events that ended in it). */
  probe(window: { fromUs: number; toUs: number } | undefined, answer: (v: ProcessesReport) => void): void {
    const qid = ++this.qid;
    const clients = this.clients.all();
    const timeoutMs = window ? TRACE_PROBE_TIMEOUT_MS : PROBE_TIMEOUT_MS;
    const q: Query = {
      waiting: new Map(clients.map((c) => [c.clientId, { pid: c.pid, actorId: c.actorId }])),
      reports: [],
      window,
      answer,
      timer: setTimeout(() => this.finish(qid), timeoutMs),
    };
    q.timer.unref();
    this.queries.set(qid, q);
    for (const c of clients)
      this.out.sendTo(c.peerKey, {
        t: "probe",
        qid,
        recording: this.recording,
        ...(window ? { traceFromUs: window.fromUs, traceToUs: window.toUs } : {}),
      });
    if (clients.length === 0) this.finish(qid);
  }

  answered(qid: number, report: ProcessReport): void {
    const q = this.queries.get(qid);
    if (!q) return; // answered after its deadline
    if (!q.waiting.delete(report.clientId)) return; // not asked, or answered twice
    q.reports.push(report);
    if (q.waiting.size === 0) this.finish(qid);
  }

  /** A client left or died: no probe waits for it. */
  gone(clientId: string): void {
    let letGo = false;
    for (const h of [...this.holders.keys()])
      if (h === clientId || h.startsWith(`${clientId}/`)) letGo = this.holders.delete(h) || letGo;
    if (letGo && !this.recording) this.probe(undefined, () => {});
    for (const [qid, q] of this.queries)
      if (q.waiting.delete(clientId) && q.waiting.size === 0) this.finish(qid);
  }

  private finish(qid: number): void {
    const q = this.queries.get(qid);
    if (!q) return;
    this.queries.delete(qid);
    clearTimeout(q.timer);
    q.answer({
      processes: q.reports,
      silent: [...q.waiting].map(([clientId, c]) => ({ clientId, ...c })),
      ...(q.window ? { window: q.window } : {}),
    });
  }

  /** `holder` holds recording on (or lets go); answered once every process heard the new state. */
  record(holder: string, on: boolean, answer: (v: { recording: boolean; nowUs: number }) => void): void {
    if (on) this.holders.add(holder);
    else this.holders.delete(holder);
    this.probe(undefined, () => answer({ recording: this.recording, nowUs: nowUs() }));
  }

  /** Records for `seconds` everywhere, then answers every process's events of that window. */
  window(seconds: number, answer: (v: ProcessesReport) => void): void {
    const holder = `window-${++this.qid}`;
    this.record(holder, true, ({ nowUs: fromUs }) => {
      setTimeout(() => {
        const toUs = nowUs();
        this.holders.delete(holder);
        // the probe turns recording off (unless held by others) and collects the window
        this.probe({ fromUs, toUs }, answer);
      }, seconds * 1000).unref();
    });
  }
}
