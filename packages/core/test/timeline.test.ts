// The cluster timeline through the public API: a known workload (an actor method that sleeps 200 ms
// and then waits for another actor's 50 ms method, a task, a large object fetched from its owner, a
// thread actor's overlapping and queued calls) recorded across every process, checked for rows, nesting and durations (bounds generous: the
// machine may be loaded).

import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  type ChromeTrace,
  clusterProcesses,
  get,
  shutdown,
  submitTask,
  TimelineWriter,
  type TraceEvent,
  timeline,
  traceSpan,
} from "../src/index.js";
import {
  WORKLOAD as FIXTURE,
  startTimelineCluster,
  type TimelineCluster,
} from "./fixtures/timeline-cluster.js";

const N = 1 << 20; // float64s of the large object: 8 MiB

let address = "";
let dir = "";
let napper: TimelineCluster["napper"];
let boss: TimelineCluster["boss"];
let sleeper: TimelineCluster["sleeper"];

test.before(async () => {
  ({ address, napper, boss, sleeper } = await startTimelineCluster());
  dir = mkdtempSync(join(tmpdir(), "torl-timeline-"));
});

test.after.always(async () => {
  await shutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const ms = (e: TraceEvent) => e.dur! / 1000;
const end = (e: TraceEvent) => e.ts! + e.dur!;
const within = (inner: TraceEvent, outer: TraceEvent) => inner.ts! >= outer.ts! && end(inner) <= end(outer);

/** Every two complete events of one row's lane either nest or do not overlap (what Chrome's viewer needs). */
function assertLanesNest(events: TraceEvent[]): void {
  const lanes = new Map<string, TraceEvent[]>();
  for (const e of events.filter((x) => x.ph === "X")) {
    const k = `${e.pid}/${e.tid}`;
    lanes.set(k, [...(lanes.get(k) ?? []), e]);
  }
  for (const [k, list] of lanes) {
    for (const a of list)
      for (const b of list) {
        if (a === b) continue;
        const disjoint = end(a) <= b.ts! || end(b) <= a.ts!;
        if (!(disjoint || within(a, b) || within(b, a)))
          throw new Error(`lane ${k}: ${a.name} and ${b.name} overlap without nesting`);
      }
  }
}

function rowName(trace: { traceEvents: TraceEvent[] }, pid: number): string {
  const m = trace.traceEvents.find((e) => e.ph === "M" && e.name === "process_name" && e.pid === pid);
  return String(m?.args?.name ?? "");
}

test.serial(
  "a run's trace file holds every process's calls, tasks and transfers, nested, with their durations",
  async (t) => {
    const file = join(dir, "run.json");
    const writer = await TimelineWriter.open(file);
    const [result, squared] = await traceSpan("workload", () =>
      Promise.all([boss.work(napper), submitTask<number>(FIXTURE, "square", [7])]),
    );
    t.is(result, 50);
    t.is(squared, 49);
    const [inner] = await napper.stash(N);
    const big = await get(inner);
    t.is(big.length, N);
    await writer.close();

    const trace = JSON.parse(readFileSync(file, "utf8")) as ChromeTrace;
    const events = trace.traceEvents;
    const x = events.filter((e) => e.ph === "X");
    for (const e of x) {
      t.true(Number.isFinite(e.ts) && e.dur! >= 0, `${e.name}: ts and dur`);
      t.truthy(rowName(trace, e.pid), `${e.name}: its row (pid ${e.pid}) is named`);
    }
    assertLanesNest(events);

    // what a failure shows: each row's events (category and name), and what the file says of the run
    const byRow = new Map<string, string[]>();
    for (const e of x) {
      const row = rowName(trace, e.pid) || `unnamed pid ${e.pid}`;
      byRow.set(row, [...(byRow.get(row) ?? []), `${e.cat}:${e.name}`]);
    }
    const seen = `events by row: ${JSON.stringify(Object.fromEntries(byRow))}; otherData: ${JSON.stringify(trace.otherData)}`;
    const one = (pred: (e: TraceEvent) => boolean, what: string): TraceEvent => {
      const found = x.filter(pred);
      t.is(
        found.length,
        1,
        `${what}: found ${found.length} (${found.map((e) => e.name).join(", ")}); ${seen}`,
      );
      return found[0]!;
    };
    // the boss's method runs 200 ms + the nap; inside it, on its row and lane, the call it made
    const work = one((e) => e.cat === "actor_call" && e.name === "Boss.work", "Boss.work");
    t.regex(rowName(trace, work.pid), /^Boss 'boss' pid=\d+ node=/);
    t.true(ms(work) >= 240 && ms(work) < 5000, `Boss.work took ${ms(work)} ms`);
    const call = one((e) => e.cat === "call" && e.name === "actor napper.nap", "the call to napper.nap");
    t.is(call.pid, work.pid);
    t.is(call.tid, work.tid);
    t.true(within(call, work));
    t.true(call.ts! - work.ts! >= 190_000, "the call is made after the 200 ms sleep");
    // the nap runs on the napper's row, inside the boss's call
    const nap = one((e) => e.cat === "actor_call" && e.name === "Napper.nap", "Napper.nap");
    t.not(nap.pid, work.pid);
    t.regex(rowName(trace, nap.pid), /^Napper 'napper' pid=\d+/);
    t.true(ms(nap) >= 45 && ms(nap) < 3000, `Napper.nap took ${ms(nap)} ms`);
    t.true(within(nap, call), "the nap lies within the call that asked for it");
    // the task: run by an executor, inside the driver's span of its call, inside the user's span
    const task = one((e) => e.cat === "task" && e.name === "square", "the task");
    t.regex(rowName(trace, task.pid), /^task executor pid=\d+/);
    const taskCall = one((e) => e.cat === "call" && e.name === "task square", "the driver's task call");
    t.regex(rowName(trace, taskCall.pid), /^driver pid=\d+/);
    t.true(within(task, taskCall));
    const span = one((e) => e.cat === "user" && e.name === "workload", "the user's span");
    t.is(span.pid, taskCall.pid);
    t.true(within(taskCall, span));
    const bossCall = one(
      (e) => e.cat === "call" && e.name === "actor boss.work",
      "the driver's call of boss.work",
    );
    t.true(within(bossCall, span) && within(work, bossCall));
    // the large object: fetched by the driver from the napper, which served it
    const fetch = one((e) => e.cat === "transfer" && e.name === `fetch ${inner.id}`, "the fetch");
    t.is(fetch.pid, taskCall.pid);
    t.is(fetch.args?.bytes, 8 * N);
    const serve = one((e) => e.cat === "transfer" && e.name === `serve ${inner.id}`, "the serve");
    t.is(serve.pid, nap.pid);
    t.true((serve.args?.bytes as number) >= 8 * N);
    t.true(serve.ts! >= fetch.ts! && serve.ts! <= end(fetch));
  },
);

test.serial(
  "a thread actor's calls are spans on a row of their own, timed from when its thread runs them, inside the caller's waits",
  async (t) => {
    // two slots: the third nap waits for the first to end, and its span starts then, not when it was called
    const file = join(dir, "thread.json");
    const writer = await TimelineWriter.open(file);
    const naps = await traceSpan("threads", () =>
      Promise.all([sleeper.nap(150), sleeper.nap(400), sleeper.nap(100)]),
    );
    t.deepEqual(naps, [150, 400, 100]);
    await writer.close();
    const trace = JSON.parse(readFileSync(file, "utf8")) as ChromeTrace;
    assertLanesNest(trace.traceEvents);
    const x = trace.traceEvents.filter((e) => e.ph === "X");
    t.false(JSON.stringify(trace).includes('"track"'), "the internal track field is not written");
    const runs = x
      .filter((e) => e.cat === "actor_call" && e.name === "Napper.nap")
      .sort((a, b) => a.ts! - b.ts!);
    t.is(runs.length, 3, runs.map((e) => `${e.name}@${e.pid}`).join(", "));
    const row = runs[0]!.pid;
    t.true(
      runs.every((e) => e.pid === row),
      "one row for the thread actor",
    );
    t.regex(
      rowName(trace, row),
      new RegExp(`^Napper thread actor ${sleeper.actorId} in driver pid=${process.pid}`),
    );
    const calls = x.filter((e) => e.cat === "call" && e.name === `actor ${sleeper.actorId}.nap`);
    t.is(calls.length, 3);
    t.not(row, calls[0]!.pid, "not on the caller's row");
    t.regex(rowName(trace, calls[0]!.pid), /^driver pid=/);
    // by duration: 100 (the third call), 150, 400
    const [late, short, long] = [...runs].sort((a, b) => a.dur! - b.dur!) as [
      TraceEvent,
      TraceEvent,
      TraceEvent,
    ];
    t.true(ms(late) >= 95 && ms(short) >= 145 && ms(long) >= 395 && ms(long) < 3000, runs.map(ms).join(", "));
    t.true(late.ts! > short.ts! && late.ts! > long.ts!, "the third call ran last");
    t.not(short.tid, long.tid, "two calls at once: two lanes");
    // the third ran once the 150 ms nap freed its slot: it starts at that nap's end, and on its lane
    t.true(
      late.ts! >= end(short) - 1000,
      `the queued nap started ${(late.ts! - end(short)) / 1000} ms after the slot freed`,
    );
    t.is(late.tid, short.tid);
    t.true(late.ts! < end(long), "while the long nap still ran");
    // each run lies inside the caller's wait for it, inside the user's span
    const span = x.find((e) => e.cat === "user" && e.name === "threads")!;
    for (const r of [short, long, late]) t.true(calls.some((c) => within(r, c) && within(c, span)));
  },
);

test.serial("timeline({ seconds }) records a window of the live cluster; off, nothing is kept", async (t) => {
  // off: calls leave no events behind
  const before = Date.now() * 1000;
  await napper.nap(5);
  const now = Date.now() * 1000;
  const idle = await clusterProcesses({ traceFromUs: now - 60e6, traceToUs: now + 1e6 });
  t.true(idle.processes.length >= 3);
  t.deepEqual(
    idle.processes
      .flatMap((p) => p.trace?.events ?? [])
      .filter((e) => e.name === "Napper.nap" && end(e) > before),
    [],
  );
  let stop = false;
  const load = (async () => {
    let n = 0;
    while (!stop) n += await napper.nap(30);
    return n;
  })();
  const trace = await timeline({ seconds: 1.5 });
  stop = true;
  await load;
  const naps = trace.traceEvents.filter((e) => e.ph === "X" && e.name === "Napper.nap");
  t.true(naps.length >= 5, `${naps.length} naps in 1.5 s`);
  for (const n of naps) t.true(ms(n) >= 25 && ms(n) < 3000, `a nap of ${ms(n)} ms`);
  assertLanesNest(trace.traceEvents);
  t.regex(trace.otherData.window!, /^\d{4}-.*Z to \d{4}-.*Z$/);
});

test.serial("`torl timeline --out` writes the trace file of a live cluster; bad flags exit 2", async (t) => {
  const out = join(dir, "cli.json");
  let stop = false;
  const load = (async () => {
    while (!stop) await napper.nap(20);
  })();
  const run = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ["--import", "tsx", "examples/torl/src/cli.ts", "timeline", ...args],
        { timeout: 120_000 },
        (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
      );
    });
  const ok = await run(["--out", out, "--seconds", "2", "--address", address]);
  stop = true;
  await load;
  t.is(ok.code, 0, ok.stderr);
  t.regex(ok.stdout, /wrote \d+ events of \d+ processes to .*cli\.json/);
  const trace = JSON.parse(readFileSync(out, "utf8")) as ChromeTrace;
  t.true(trace.traceEvents.some((e) => e.ph === "X" && e.name === "Napper.nap"));
  t.true(trace.traceEvents.some((e) => e.ph === "M" && e.name === "process_name"));
  const bad = await run(["--seconds", "2", "--address", address]);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /^error: .*--out/m);
});
