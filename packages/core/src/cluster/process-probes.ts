/**
 * The head's part in observing processes: it probes every client runtime (drivers and workers) for
 * its report (running calls, objects, metrics, timeline events) and answers with all of them once
 * each answered or the deadline passed (the silent ones are named, never waited on forever), and it
 * keeps timeline recording on while anyone holds it: a `torl timeline` window, or a driver writing a
 * run's trace (let go of when that driver is gone). Every probe carries the recording state, so a
 * holder's request is answered only after every process heard it (or, past RECORD_TIMEOUT_MS, with
 * those that did not named); a client that says hello later learns it from the hello's answer. Each
 * change is numbered (epoch), and a client keeps the latest it heard, whatever order it reads them in.
 * A worker killed while recording is held has its events collected first: they would die with it.
 */
import type { ProcessesReport, ProcessReport } from "../observe/process-report.js";
import { DEFAULT_TIMELINE_CAPACITY, nowUs, type TraceEvent } from "../observe/timeline.js";
import type { ClientTable } from "./clients.js";
import type { HeadReplies } from "./messages.js";
import type { Outbox } from "./outbox.js";

/** How long a probe waits for the processes' reports; a trace, which may be large, longer. */
export const PROBE_TIMEOUT_MS = 3000;
export const TRACE_PROBE_TIMEOUT_MS = 15_000;
/**
 * How long a change of recording waits for every process to hear it. A process that has not heard
 * that recording is on may run work that a holder started since without recording it: the holder is
 * answered only once all heard it, and told which did not within this time.
 */
export const RECORD_TIMEOUT_MS = 30_000;

/** The most events kept of processes killed while recording. */
const DEPARTED_EVENTS = DEFAULT_TIMELINE_CAPACITY;

function endsIn(e: TraceEvent, w: { fromUs: number; toUs: number }): boolean {
  const end = e.ts! + e.dur!;
  return end > w.fromUs && end <= w.toUs;
}

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
  /** Changes of recording so far: a client keeps the state of the latest change it heard. */
  epoch = 0;
  /**
   * The reports (all their events) of processes killed while recording was held, collected just
   * before they were killed: the windows asked for later include their events. Dropped once nobody
   * holds recording; at most DEPARTED_EVENTS events, the oldest reports dropped first.
   */
  private departed: ProcessReport[] = [];

  constructor(
    private clients: ClientTable,
    private out: Outbox,
  ) {}

  get recording(): boolean {
    return this.holders.size > 0;
  }

  /**
   * Asks every client (or those of `only`) for its report (and, with a window, its events that ended
   * in it), waiting for them at most `timeoutMs`.
   */
  probe(
    window: { fromUs: number; toUs: number } | undefined,
    answer: (v: ProcessesReport) => void,
    opts: { only?: string; timeoutMs?: number } = {},
  ): void {
    const qid = ++this.qid;
    const clients = this.clients.all().filter((c) => opts.only === undefined || c.clientId === opts.only);
    const timeoutMs = opts.timeoutMs ?? (window ? TRACE_PROBE_TIMEOUT_MS : PROBE_TIMEOUT_MS);
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
        epoch: this.epoch,
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
    if (letGo) {
      this.epoch++;
      if (!this.recording) {
        this.departed = [];
        this.probe(undefined, () => {});
      }
    }
    for (const [qid, q] of this.queries)
      if (q.waiting.delete(clientId) && q.waiting.size === 0) this.finish(qid);
  }

  private finish(qid: number): void {
    const q = this.queries.get(qid);
    if (!q) return;
    this.queries.delete(qid);
    clearTimeout(q.timer);
    const { window } = q;
    // a process killed since may have answered too (its report holds all it kept): not twice
    const answered = new Set(q.reports.map((r) => r.clientId));
    const departed = window
      ? this.departed
          .filter((r) => !answered.has(r.clientId))
          .map((r) => ({
            ...r,
            trace: {
              ...r.trace!,
              events: r.trace!.events.filter((e) => endsIn(e, window)),
              toUs: Math.min(r.trace!.toUs, window.toUs),
            },
          }))
      : [];
    q.answer({
      processes: [...q.reports, ...departed],
      silent: [...q.waiting].map(([clientId, c]) => ({ clientId, ...c })),
      ...(q.window ? { window: q.window } : {}),
    });
  }

  /**
   * `holder` holds recording on (or lets go); answered once every process heard the new state, or
   * RECORD_TIMEOUT_MS passed (PROBE_TIMEOUT_MS letting go), naming the processes that had not heard.
   */
  record(holder: string, on: boolean, answer: (v: HeadReplies["record"]) => void): void {
    if (on) this.holders.add(holder);
    else this.holders.delete(holder);
    this.epoch++;
    if (!this.recording) this.departed = [];
    // off, a process that hears it late only records a while longer: no need to wait as long
    this.probe(undefined, (v) => answer({ recording: this.recording, nowUs: nowUs(), silent: v.silent }), {
      timeoutMs: on ? RECORD_TIMEOUT_MS : PROBE_TIMEOUT_MS,
    });
  }

  /**
   * The process of `clientId` is about to be killed: while recording is held, its events are
   * collected first (it is given PROBE_TIMEOUT_MS to answer) and kept for the windows asked for
   * later; then `kill` runs.
   */
  beforeKill(clientId: string | undefined, kill: () => void): void {
    if (clientId === undefined || !this.recording || !this.clients.has(clientId)) {
      kill();
      return;
    }
    this.probe(
      { fromUs: 0, toUs: Number.MAX_SAFE_INTEGER },
      (v) => {
        // (a window's answer also lists the reports kept of processes killed before: not again)
        for (const r of v.processes)
          if (r.clientId === clientId && r.trace && r.trace.events.length > 0) this.keep(r);
        kill();
      },
      { only: clientId, timeoutMs: PROBE_TIMEOUT_MS },
    );
  }

  private keep(report: ProcessReport): void {
    // killed twice in a row: its later report holds all the earlier one did
    this.departed = this.departed.filter((r) => r.clientId !== report.clientId);
    this.departed.push(report);
    let events = this.departed.reduce((n, r) => n + r.trace!.events.length, 0);
    while (events > DEPARTED_EVENTS && this.departed.length > 1)
      events -= this.departed.shift()!.trace!.events.length;
  }

  /** Records for `seconds` everywhere, then answers every process's events of that window. */
  window(seconds: number, answer: (v: ProcessesReport) => void): void {
    const holder = `window-${++this.qid}`;
    this.record(holder, true, ({ nowUs: fromUs, silent: deaf }) => {
      setTimeout(() => {
        const toUs = nowUs();
        this.holders.delete(holder);
        this.epoch++;
        // the probe turns recording off (unless held by others) and collects the window
        this.probe({ fromUs, toUs }, (v) => {
          if (!this.recording) this.departed = [];
          // those that did not hear recording was on miss events too: named as silent
          const silent = new Set(v.silent.map((s) => s.clientId));
          answer({ ...v, silent: [...v.silent, ...deaf.filter((d) => !silent.has(d.clientId))] });
        });
      }, seconds * 1000).unref();
    });
  }
}
