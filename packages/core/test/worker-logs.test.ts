// Worker output: printed at the driver after Ray's prefix, kept in the node's log files, read back
// with workerLogs() and `torl logs`; switched off with logToDriver: false.

import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import test from "ava";
import { MAX_LINE_CHARS, WorkerLogs } from "../src/cluster/worker-logs.js";

const DRIVER = new URL("./fixtures/log-driver.ts", import.meta.url).pathname;

/** Runs the fixture driver; resolves to its stdout and stderr. */
function runDriver(env: Record<string, string>): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import=tsx", DRIVER], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (c) => {
      out += c;
    });
    child.stderr.on("data", (c) => {
      err += c;
    });
    child.on("exit", (code) => resolve({ code, out, err }));
  });
}

test("an actor's lines reach the driver after (Class name pid=N), stdout to stdout and stderr to stderr; its files hold them; torl logs-style reads by name, id and node", async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), "torl-logs-"));
  try {
    const r = await runDriver({ TORL_LOG_DIR: logDir });
    t.is(r.code, 0, r.err);
    const pid = /^actor pid (\d+)$/m.exec(r.out)?.[1];
    t.truthy(pid, r.out);
    t.regex(r.out, new RegExp(`^\\(Counter loud pid=${pid}\\) hello from the actor$`, "m"));
    t.regex(r.out, new RegExp(`^\\(Counter loud pid=${pid}\\) second line$`, "m"));
    t.regex(r.err, new RegExp(`^\\(Counter loud pid=${pid}\\) an error line$`, "m"));
    t.notRegex(r.out, /^\(Counter loud pid=\d+\) an error line$/m);
    // a thread actor prints from a thread of the driver: the same prefix, with its process's pid
    const driverPid = /^driver pid (\d+)$/m.exec(r.out)?.[1];
    t.regex(r.out, new RegExp(`^\\(Counter thread pid=${driverPid}\\) from a thread actor$`, "m"));
    t.regex(r.out, new RegExp(`^\\(Counter thread pid=${driverPid}\\) its second line$`, "m"));
    t.regex(r.err, new RegExp(`^\\(Counter thread pid=${driverPid}\\) a thread error line$`, "m"));
    // the task executor has no class: Ray's prefix names the task instead
    t.regex(r.out, /^\(task pid=\d+\) from a task$/m);
    // an actor created inside another actor's worker prints at the driver that owns the chain
    const innerPid = /^inner pid (\d+)$/m.exec(r.out)?.[1];
    t.regex(r.out, new RegExp(`^\\(Counter inner pid=${innerPid}\\) from the nested actor$`, "m"));
    // read back through the head, by name, by id and by node
    const byName = JSON.parse(/^byName (.*)$/m.exec(r.out)![1]!);
    const out = byName.files.find((f: { name: string }) => f.name.endsWith(`-${pid}.out`));
    t.is(out.text, "hello from the actor\nsecond line\n");
    t.is(byName.files.find((f: { name: string }) => f.name.endsWith(`-${pid}.err`)).text, "an error line\n");
    const byId = JSON.parse(/^byId (.*)$/m.exec(r.out)![1]!);
    t.deepEqual(
      byId.files.map((f: { name: string }) => f.name),
      byName.files.map((f: { name: string }) => f.name),
    );
    const byNode = JSON.parse(/^byNode (.*)$/m.exec(r.out)![1]!);
    t.true(byNode.files.some((f: { text: string }) => f.text.includes("from a task")));
    t.true(byNode.files.some((f: { text: string }) => f.text.includes("hello from the actor")));
    // a short tail starts at a whole line
    t.is(JSON.parse(/^tail (.*)$/m.exec(r.out)![1]!), "second line\n");
    t.regex(r.out, /^unknown ActorNotFoundError: no actor or node 'nobody'/m);
    t.true(readdirSync(join(logDir)).length > 0);
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
});

test("logToDriver: false (or TORL_LOG_TO_DRIVER=0) keeps the lines out of the driver's output, not out of the files", async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), "torl-logs-"));
  try {
    const r = await runDriver({ TORL_LOG_DIR: logDir, TORL_LOG_TO_DRIVER: "0" });
    t.is(r.code, 0, r.err);
    t.notRegex(r.out, /^\(Counter loud pid=\d+\)/m);
    t.notRegex(r.out, /^\(task pid=\d+\)/m);
    t.notRegex(r.out, /^\(Counter inner pid=\d+\)/m);
    t.notRegex(r.err, /^\(Counter loud pid=\d+\)/m);
    // a thread actor's lines are the driver's own output (its thread is the driver's): still printed, prefixed
    t.regex(r.out, /^\(Counter thread pid=\d+\) from a thread actor$/m);
    const byName = JSON.parse(/^byName (.*)$/m.exec(r.out)![1]!);
    t.true(byName.files.some((f: { text: string }) => f.text === "hello from the actor\nsecond line\n"));
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
});

test("a bad TORL_LOG_TO_DRIVER is refused by name", async (t) => {
  const r = await runDriver({ TORL_LOG_TO_DRIVER: "maybe" });
  t.not(r.code, 0);
  t.regex(r.err, /TORL_LOG_TO_DRIVER must be 1 or 0 \(true or false\), got 'maybe'/);
});

test("lines are split at newlines across chunks, cut when too long, and batches past the cap are counted as dropped", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-logs-unit-"));
  const sent: { stream: string; lines: string[] }[][] = [];
  const logs = new WorkerLogs(dir, (b) => sent.push(b));
  const out = new PassThrough();
  const err = new PassThrough();
  logs.attach(out, err, () => ({ actorId: "A-1", className: "A", name: undefined, pid: 7, nodeId: "n" }));
  out.write("par");
  out.write("tial\r\nnext\n");
  out.write("x".repeat(MAX_LINE_CHARS + 5));
  out.end("\n");
  err.end("no newline at the end");
  await new Promise((r) => setTimeout(r, 100));
  logs.flush();
  const lines = sent.flat().flatMap((b) => b.lines);
  t.deepEqual(lines.slice(0, 2), ["partial", "next"]);
  t.is(lines[2]!.length, MAX_LINE_CHARS);
  t.is(lines[3], "xxxxx");
  t.true(lines.includes("no newline at the end"));
  t.deepEqual(readdirSync(dir).sort(), ["A-1-7.err", "A-1-7.out"]);
  // 10,000 pending lines at most: the oldest batches are counted and said
  const flood = new WorkerLogs(dir, (b) => sent.push(b));
  const s = new PassThrough();
  flood.attach(s, null, () => ({ actorId: "B-1", className: "B", name: undefined, pid: 8, nodeId: "n" }));
  sent.length = 0;
  for (let i = 0; i < 30; i++) s.write(`${"line\n".repeat(1000)}`);
  await new Promise((r) => setImmediate(r));
  flood.flush();
  const said = sent.flat().find((b) => b.lines[0]!.startsWith("[torl]"));
  t.truthy(said);
  t.regex(
    said!.lines[0]!,
    /^\[torl\] \d+ line\(s\) of worker output were printed faster than they could be sent/,
  );
  flood.close();
  logs.close();
  rmSync(dir, { recursive: true, force: true });
});

test("a log directory removed under a live worker: the node keeps going and says the file is lost, once", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-logs-gone-"));
  const sent: { stream: string; lines: string[] }[][] = [];
  const logs = new WorkerLogs(dir, (b) => sent.push(b));
  rmSync(dir, { recursive: true, force: true });
  const out = new PassThrough();
  logs.attach(out, null, () => ({ actorId: "C-1", className: "C", name: undefined, pid: 9, nodeId: "n" }));
  out.write("first\n");
  await new Promise((r) => setTimeout(r, 100));
  out.write("second\n");
  await new Promise((r) => setTimeout(r, 100));
  logs.flush();
  const lines = sent.flat().flatMap((b) => b.lines);
  t.deepEqual(
    lines.filter((l) => !l.startsWith("[torl]")),
    ["first", "second"],
  );
  const said = lines.filter((l) => l.startsWith("[torl] worker log file"));
  t.is(said.length, 1);
  t.regex(said[0]!, /C-1-9\.out could not be written \(ENOENT/);
  logs.close();
});
