import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { readMetrics } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";

// A training driver killed with SIGKILL mid-run and rerun with trainer.resume_mode=auto ends exactly
// where an uninterrupted run ends: same metrics (timings aside) and bit-identical checkpoint shards.

const DRIVER = new URL("./fixtures/driver.ts", import.meta.url).pathname;
const modelPath = tinyModelDir(5);

function startDriver(ckptDir: string, runsDir: string) {
  const args = { modelPath, ckptDir, runsDir, workers: 2, steps: 4, saveFreq: 1, testFreq: 2 };
  const child = spawn(process.execPath, ["--import", "tsx", DRIVER, JSON.stringify(args)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (d) => {
    out += String(d);
  });
  child.stderr!.on("data", (d) => {
    out += String(d);
  });
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );
  return { child, exited, output: () => out };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function latest(ckptDir: string): number {
  const f = join(ckptDir, "latest_checkpointed_iteration.txt");
  return existsSync(f) ? Number(readFileSync(f, "utf8")) : 0;
}

/** Metrics less the wall-clock ones (timings and what is derived from them); token counts stay. */
const strip = (m: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(m).filter(
      ([k]) =>
        !/^(timing_s|timing_per_token_ms)\//.test(k) && k !== "perf/time_per_step" && k !== "perf/throughput",
    ),
  );

test("SIGKILL of the driver mid-run, then resume_mode=auto: same metrics and parameters as an uninterrupted run", async (t) => {
  const [ckA, runsA, ckB, runsB] = [0, 1, 2, 3].map(() => mkdtempSync(join(tmpdir(), "torl-resume-")));
  const a = startDriver(ckA!, runsA!);
  const b = startDriver(ckB!, runsB!);
  let children: ChildProcess[] = [a.child, b.child];
  t.teardown(() => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  });
  // Kill B once its second checkpoint is complete.
  while (latest(ckB!) < 2) {
    if (b.child.exitCode !== null) t.fail(`driver B exited early:\n${b.output()}`);
    await sleep(100);
  }
  b.child.kill("SIGKILL");
  const killed = await b.exited;
  t.is(killed.signal, "SIGKILL");
  const stepAtKill = latest(ckB!);
  t.true(stepAtKill >= 2 && stepAtKill < 4, `killed mid-run (last checkpoint ${stepAtKill})`);
  const pids = JSON.parse(/PIDS (\[.*\])/.exec(b.output())?.[1] ?? "[]") as number[];
  t.is(pids.length, 2);
  // The worker processes do not outlive their driver for long.
  for (let i = 0; i < 100 && pids.some(alive); i++) await sleep(200);
  const orphans = pids.filter(alive);
  for (const p of orphans) process.kill(p, "SIGKILL");
  t.deepEqual(orphans, [], "the killed driver's workers exited");

  const b2 = startDriver(ckB!, runsB!);
  children = [a.child, b2.child];
  const [ra, rb] = await Promise.all([a.exited, b2.exited]);
  t.is(ra.code, 0, a.output());
  t.is(rb.code, 0, b2.output());
  t.regex(b2.output(), new RegExp(`resumed from .*global_step_${stepAtKill} \\(step ${stepAtKill}\\)`));
  t.is(b2.output().trim().split("\n").at(-1), join(runsB!, "tiny"), "run dir printed last");

  const mA = readMetrics(join(runsA!, "tiny", "metrics.jsonl"));
  const mB = readMetrics(join(runsB!, "tiny", "metrics.jsonl"));
  t.deepEqual(
    mB.map((m) => m.step),
    [0, 1, 2, 3, 4],
  );
  t.deepEqual(mB.map(strip), mA.map(strip), "identical metrics step by step");
  const sA = JSON.parse(readFileSync(join(runsA!, "tiny", "summary.json"), "utf8"));
  const sB = JSON.parse(readFileSync(join(runsB!, "tiny", "summary.json"), "utf8"));
  t.is(sB.resumed_from_step, stepAtKill);
  t.is(sA.val_acc_initial, sB.val_acc_initial);
  t.is(sA.code_ratio_final, sB.code_ratio_final);
  const dirA = join(ckA!, "global_step_4", "actor");
  const dirB = join(ckB!, "global_step_4", "actor");
  const files = readdirSync(dirA).filter((f) => f.endsWith(".bin"));
  t.is(files.length, 2);
  for (const f of files)
    t.true(readFileSync(join(dirA, f)).equals(readFileSync(join(dirB, f))), `${f} identical`);
});
