// A run's trace file keeps the work of task executors that come and go while it records: one started
// after the file was opened records from its start, and one killed before the file is closed (as an
// idle executor is reaped, or a task cancelled with force) keeps what it ran in the file. A process whose
// clock runs ahead of the driver's keeps the call it answered just before close.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  type ChromeTrace,
  cancel,
  clusterProcesses,
  createActor,
  get,
  init,
  shutdown,
  submitTask,
  TaskCancelledError,
  TimelineWriter,
} from "../src/index.js";
import type { ClockAhead } from "./fixtures/clock-ahead.js";
import { WORKLOAD } from "./fixtures/timeline-cluster.js";

let dir = "";

/** The first value `f` gives that is not undefined, asking every 50 ms (the test's timeout bounds it). */
async function until<T>(f: () => Promise<T | undefined>): Promise<T> {
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

test.before(async () => {
  await init({ numCpus: 2, logToDriver: false });
  dir = mkdtempSync(join(tmpdir(), "torl-timeline-rec-"));
});

test.after.always(async () => {
  await shutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a task run by an executor killed before close, and one by an executor started after open, are in the file", async (t) => {
  t.is(await get(submitTask<number>(WORKLOAD, "square", [2])), 4); // an executor, started before recording
  const file = join(dir, "run.json");
  const writer = await TimelineWriter.open(file);
  t.is(await get(submitTask<number>(WORKLOAD, "square", [7])), 49);
  // another resource shape: an executor started now, after open
  t.is(await get(submitTask<number>(WORKLOAD, "square", [5], { numCpus: 0.5 })), 25);
  // the first executor is killed (a task of it cancelled with force) while the file records
  const doze = submitTask<number>(WORKLOAD, "doze", [60_000]);
  const dozing = await until(async () =>
    (await clusterProcesses()).processes.find((p) => p.running.some((r) => r.name === "doze")),
  );
  cancel(doze, { force: true });
  await t.throwsAsync(get(doze), { instanceOf: TaskCancelledError });
  // closed once its worker is gone for sure: what it recorded cannot be asked of it any more
  await until(async () =>
    (await clusterProcesses()).processes.every((p) => p.clientId !== dozing.clientId) ? true : undefined,
  );
  await writer.close();

  const trace = JSON.parse(readFileSync(file, "utf8")) as ChromeTrace;
  const rows = new Map(
    trace.traceEvents
      .filter((e) => e.ph === "M" && e.name === "process_name")
      .map((e) => [e.pid, String(e.args?.name)]),
  );
  const tasks = trace.traceEvents
    .filter((e) => e.ph === "X" && e.cat === "task")
    .map((e) => ({ row: rows.get(e.pid) ?? `unnamed pid ${e.pid}`, square: e.name, dur: e.dur }));
  const what = JSON.stringify({ tasks, otherData: trace.otherData });
  t.is(tasks.filter((e) => e.square === "square").length, 2, what);
  const squareRows = new Set(tasks.filter((e) => e.square === "square").map((e) => e.row));
  t.is(squareRows.size, 2, `two executors: ${what}`);
  for (const row of squareRows) t.regex(row, /^task executor pid=\d+/);
  t.is(trace.otherData.silent_processes, undefined);
});

test("a call answered just before close is in the file though its process's clock runs ahead of the driver's", async (t) => {
  const ahead = createActor<ClockAhead>(
    new URL("./fixtures/clock-ahead.ts", import.meta.url).href,
    "ClockAhead",
    [200],
  );
  // started, but no work before open: the other test may hold recording on meanwhile, and a call
  // stamped by the clock ahead could end after this file's start
  await get(ahead.ready());
  const file = join(dir, "ahead.json");
  const writer = await TimelineWriter.open(file);
  for (let i = 0; i < 3; i++) {
    t.is(await ahead.work(i), 2 * i);
    // its span ended, by its clock, after the driver's now: collected by the next flush all the same
    if (i < 2) await writer.flush();
  }
  await writer.close();
  const trace = JSON.parse(readFileSync(file, "utf8")) as ChromeTrace;
  const calls = trace.traceEvents.filter((e) => e.ph === "X" && e.name === "ClockAhead.work");
  t.is(calls.length, 3, "each call once, the last one too");
  t.is(new Set(calls.map((e) => e.ts)).size, 3, "none twice");
});
