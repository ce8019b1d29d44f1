/**
 * This process's part of the cluster timeline: spans (actor calls run and made, tasks, object
 * transfers, collectives, trainer phases, sandbox runs, user spans) kept as Chrome trace "complete"
 * events in a bounded ring buffer, while the head has recording on (`torl timeline`, a run's
 * `trainer.timeline`). Off, each would-be span costs one boolean test and nothing is kept.
 *
 * Rows. A Chrome trace draws complete events of one thread (tid) as a stack, so the events of one
 * tid must nest. Spans here overlap freely (concurrent calls), so each goes to a lane, and the lane
 * is its tid: a span started inside another (the AsyncLocalStorage parent: a call an actor method
 * makes, a phase's worker calls) goes on its parent's lane when the parent is the innermost span open
 * there; any other span takes the lowest lane with nothing open. So one lane holds properly nested
 * spans, and a process with no concurrency draws as one row.
 *
 * Tracks. A thread actor (`createActor(..., { thread: true })`) runs in a thread of this process, but
 * its calls are drawn on a row of their own, as a process actor's are on its worker's: its spans go
 * on the track named by its actor id (lanes of their own, nothing nested from the process's spans),
 * and TraceRows (chrome-trace.ts) gives each track its own row.
 *
 * Times are microseconds since the Unix epoch (performance.timeOrigin + now()), so the rows of
 * processes on one machine line up; machines line up as well as their clocks do.
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** What a span is: the `cat` of its trace event. */
export type TraceCategory =
  /** An actor method run by its worker. */
  | "actor_call"
  /** A task run by its executor. */
  | "task"
  /** A call made, from its submission to its result (on the caller's row). */
  | "call"
  /** An object fetched from its owner, or served to a borrower. */
  | "transfer"
  | "collective"
  | "trainer"
  | "sandbox"
  /** A span of the user's (`traceSpan`). */
  | "user";

/** One Chrome trace event: a complete event ("X"), or metadata ("M") naming a row. */
export interface TraceEvent {
  name: string;
  cat?: TraceCategory;
  ph: "X" | "M";
  /** Start, in microseconds since the epoch (complete events). */
  ts?: number;
  /** Duration in microseconds (complete events). */
  dur?: number;
  pid: number;
  tid: number;
  args?: Record<string, unknown>;
  /**
   * In a process's report only: the thread actor (its id) whose row the event goes on. TraceRows
   * moves the event to that row and drops the field.
   */
  track?: string;
}

/** A span started and not yet ended. */
export interface OpenSpan {
  readonly cat: TraceCategory;
  readonly name: string;
  readonly start: number;
  readonly lane: number;
  /** "" for the process's own row, else a thread actor's id. */
  readonly track: string;
  args: Record<string, unknown> | undefined;
}

/** Events kept per process (the oldest are overwritten); TORL_TIMELINE_EVENTS overrides. */
export const DEFAULT_TIMELINE_CAPACITY = 100_000;

export function nowUs(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

class TimelineRecorder {
  private on = false;
  private ring: TraceEvent[] = [];
  private next = 0;
  private full = false;
  /** Events overwritten since the process started recording. */
  dropped = 0;
  private readonly capacity: number;
  /** Open spans per track and lane, innermost last ("" is the process's own track). */
  private tracks = new Map<string, OpenSpan[][]>();
  private readonly parent = new AsyncLocalStorage<OpenSpan>();

  constructor() {
    const env = Number(process.env.TORL_TIMELINE_EVENTS);
    this.capacity = Number.isInteger(env) && env > 0 ? env : DEFAULT_TIMELINE_CAPACITY;
  }

  get recording(): boolean {
    return this.on;
  }

  /** The head's count of recording changes this process heard last. */
  private epoch = -1;

  /**
   * The head turned recording on or off for the cluster, as its `epoch`-th change. Off keeps what was
   * recorded for collection. A change older than one heard already is ignored: a hello's answer and a
   * probe sent after it may be read in one batch, and the answer's continuation runs after the probe.
   */
  /** A runtime joins a (new) head: whatever an earlier head said no longer counts. */
  joining(): void {
    this.epoch = -1;
    this.on = false;
    this.tracks.clear();
  }

  setRecording(on: boolean, epoch: number): void {
    if (epoch < this.epoch) return;
    this.epoch = epoch;
    this.on = on;
    if (!on) this.tracks.clear();
  }

  /** A span starting now, or null when not recording (end(null) does nothing). */
  start(cat: TraceCategory, name: string, args?: Record<string, unknown>): OpenSpan | null {
    if (!this.on) return null;
    const parent = this.parent.getStore();
    const lanes = this.lanesOf("");
    let lane = -1;
    if (parent && parent.track === "") {
      const stack = lanes[parent.lane];
      if (stack && stack[stack.length - 1] === parent) lane = parent.lane;
    }
    return this.open(lanes, lane, "", cat, name, args);
  }

  /**
   * A span starting now on `track` (a thread actor's id: its own row), on the lowest lane of that
   * track with nothing open; null when not recording.
   */
  startOn(track: string, cat: TraceCategory, name: string, args?: Record<string, unknown>): OpenSpan | null {
    if (!this.on) return null;
    return this.open(this.lanesOf(track), -1, track, cat, name, args);
  }

  private lanesOf(track: string): OpenSpan[][] {
    let lanes = this.tracks.get(track);
    if (!lanes) this.tracks.set(track, (lanes = []));
    return lanes;
  }

  private open(
    lanes: OpenSpan[][],
    lane: number,
    track: string,
    cat: TraceCategory,
    name: string,
    args: Record<string, unknown> | undefined,
  ): OpenSpan {
    if (lane < 0) {
      lane = lanes.findIndex((s) => s.length === 0);
      if (lane < 0) lane = lanes.push([]) - 1;
    }
    const span: OpenSpan = { cat, name, start: nowUs(), lane, track, args };
    lanes[lane]!.push(span);
    return span;
  }

  /** Runs `f` with `span` as the parent of the spans it starts (synchronously or after its awaits). */
  within<T>(span: OpenSpan | null, f: () => T): T {
    return span ? this.parent.run(span, f) : f();
  }

  /**
   * Ends `span` now, adding `args` to its own. `measured` ([start, end] in µs since the epoch) is when
   * the work really ran, where it ran (a thread actor's call, timed by its thread): the event then has
   * those times, and the span's lane (whose spans this side opened and closed in the same order).
   */
  end(span: OpenSpan | null, args?: Record<string, unknown>, measured?: readonly [number, number]): void {
    if (!span) return;
    const stack = this.tracks.get(span.track)?.[span.lane];
    if (stack) {
      const i = stack.lastIndexOf(span);
      if (i >= 0) stack.splice(i, 1);
    }
    if (!this.on && !stack) return; // recording was turned off meanwhile
    const ts = measured?.[0] ?? span.start;
    const all = span.args || args ? { ...span.args, ...args } : undefined;
    this.push({
      name: span.name,
      cat: span.cat,
      ph: "X",
      ts,
      dur: Math.max(0, (measured?.[1] ?? nowUs()) - ts),
      pid: process.pid,
      tid: span.lane + 1,
      ...(all ? { args: all } : {}),
      ...(span.track ? { track: span.track } : {}),
    });
  }

  private push(e: TraceEvent): void {
    if (this.full) this.dropped++;
    this.ring[this.next] = e;
    this.next = (this.next + 1) % this.capacity;
    if (this.next === 0) this.full = true;
  }

  /** The events that ended in (fromUs, toUs], oldest first; the buffer keeps them. */
  endingIn(fromUs: number, toUs: number): TraceEvent[] {
    const ordered = this.full ? [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)] : this.ring;
    return ordered.filter((e) => {
      const end = e.ts! + e.dur!;
      return end > fromUs && end <= toUs;
    });
  }
}

/** The recorder of this process. */
export const traceRecorder = new TimelineRecorder();

/**
 * Runs `f` (sync or async) as a span of this process's timeline row, named `name` (category "user"
 * unless given): it shows in `torl timeline` and in a run's `trainer.timeline` trace. Costs nothing
 * measurable while the cluster is not recording.
 */
export function traceSpan<T>(
  name: string,
  f: () => T,
  options: { cat?: TraceCategory; args?: Record<string, unknown> } = {},
): T {
  const span = traceRecorder.start(options.cat ?? "user", name, options.args);
  if (!span) return f();
  let result: T;
  try {
    result = traceRecorder.within(span, f);
  } catch (e) {
    traceRecorder.end(span, { error: (e as Error)?.name ?? "thrown" });
    throw e;
  }
  if (result instanceof Promise) {
    result.then(
      () => traceRecorder.end(span),
      (e: unknown) => traceRecorder.end(span, { error: (e as Error)?.name ?? "rejected" }),
    );
  } else traceRecorder.end(span);
  return result;
}
