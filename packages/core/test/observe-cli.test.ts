// The observability commands from the outside, against a live cluster: `torl dashboard` serves the
// page's JSON and /metrics of the cluster it is pointed at (and ends on SIGTERM); `torl logs` prints
// what an actor's worker printed, read from its node's files through the head.

import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { clusterStatus, createActor, init, shutdown } from "../src/index.js";
import type { Counter } from "./fixtures/counter.js";

const FIXTURE = new URL("./fixtures/counter.ts", import.meta.url).href;
const CLI = ["--import", "tsx", "examples/torl/src/cli.ts"];

let address = "";
let logDir = "";
let counter: ReturnType<typeof createActor<Counter>>;
let counterPid = 0;

test.before(async () => {
  logDir = mkdtempSync(join(tmpdir(), "torl-observe-cli-"));
  process.env.TORL_LOG_DIR = logDir;
  ({ address } = await init({ numCpus: 2, logToDriver: false }));
  counter = createActor<Counter>(FIXTURE, "Counter", [0], { name: "cli-loud" });
  counterPid = await counter.say("a line for torl logs");
});

test.after.always(async () => {
  await shutdown();
  rmSync(logDir, { recursive: true, force: true });
});

function torl(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [...CLI, ...args], { timeout: 120_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

test.serial(
  "`torl logs <actor>` prints what the actor's worker printed; an unknown name fails by name",
  async (t) => {
    // the lines reach the node's files in batches
    let r = await torl(["logs", "cli-loud", "--address", address]);
    for (let i = 0; i < 20 && !r.stdout.includes("a line for torl logs"); i++) {
      await new Promise((res) => setTimeout(res, 250));
      r = await torl(["logs", "cli-loud", "--address", address]);
    }
    t.is(r.code, 0, r.stderr);
    t.regex(r.stdout, new RegExp(`-${counterPid}\\.out[^\\n]*\\n(.*\\n)*a line for torl logs`));
    const id = (await clusterStatus()).actors.find((a) => a.name === "cli-loud")!.actorId;
    const byId = await torl(["logs", id, "--address", address]);
    t.regex(byId.stdout, /a line for torl logs/);
    const none = await torl(["logs", "nobody-here", "--address", address]);
    t.not(none.code, 0);
    t.regex(none.stderr, /nobody-here/);
  },
);

test.serial(
  "`torl dashboard` serves the cluster's status, every process's calls and /metrics, and ends on SIGTERM",
  async (t) => {
    const child = spawn(process.execPath, [...CLI, "dashboard", "--address", address, "--port", "0"], {
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
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no URL printed: ${out}\n${err}`)), 120_000);
        child.stdout.on("data", () => {
          const m = /^dashboard of the head at [^:]+:\d+: (http:\/\/\S+\/)\nPrometheus metrics: /m.exec(out);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        child.on("exit", () => reject(new Error(`torl dashboard exited: ${out}\n${err}`)));
      });
      t.regex(out, /^Prometheus metrics: http:\/\/127\.0\.0\.1:\d+\/metrics$/m);
      const slow = counter.slowInc(1, 60_000);
      slow.catch(() => {});
      await new Promise((r) => setTimeout(r, 300));
      const s = (await (await fetch(`${url}api/status`)).json()) as {
        status: { actors: { name?: string; state: string; actorId: string }[]; nodes: unknown[] };
        processes: { processes: { actorId?: string; running: { name: string }[] }[] };
      };
      const actor = s.status.actors.find((a) => a.name === "cli-loud");
      t.is(actor?.state, "ALIVE");
      t.is(s.status.nodes.length, 1);
      const report = s.processes.processes.find((p) => p.actorId === actor!.actorId);
      t.deepEqual(
        report?.running.map((c) => c.name),
        ["slowInc"],
      );
      const metrics = await (await fetch(`${url}metrics`)).text();
      t.regex(metrics, /^torl_head_up 1$/m);
      t.regex(
        metrics,
        new RegExp(
          `^torl_calls_total\\{[^}]*actor_id="${actor!.actorId}",class="Counter",method="say"\\} 1$`,
          "m",
        ),
      );
      t.regex(metrics, new RegExp(`^torl_calls_running\\{[^}]*actor_id="${actor!.actorId}"\\} 1$`, "m"));
    } finally {
      child.kill("SIGTERM");
    }
    t.is(await exited, 0, err);
  },
);
