/**
 * One worker, so consecutive runs share the warm interpreter: nothing may carry over. Plus the
 * service surviving the death of a worker, and control runs with protections switched off, which
 * show that the attacks in isolation.test.ts do succeed where a protection is missing.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { metricFamilies } from "@torl-ts/core";
import test from "ava";
import {
  normalizeRequest,
  RunRequestError,
  SandboxClosedError,
  SandboxConfigError,
  SandboxExecutor,
  SandboxInternalError,
  SandboxWorker,
} from "../src/index.js";
import { eventually, flakyPython, leftovers } from "./helpers.js";

let ex: SandboxExecutor;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
});

test.after.always(async () => {
  await ex?.close();
});

test.serial(
  "each run is counted by its outcome, and its latency observed (the /metrics families)",
  async (t) => {
    const count = (family: string, name: string, status: string) =>
      metricFamilies()
        .find((f) => f.name === family)
        ?.samples.find((s) => s.name === name && s.labels.status === status && s.labels.le === undefined)
        ?.value ?? 0;
    const before = {
      success: count("torl_sandbox_runs_total", "torl_sandbox_runs_total", "Success"),
      failed: count("torl_sandbox_runs_total", "torl_sandbox_runs_total", "Failed"),
      observed: count("torl_sandbox_run_seconds", "torl_sandbox_run_seconds_count", "Success"),
    };
    t.is((await ex.run("print(1)")).status, "Success");
    t.is((await ex.run("import time; time.sleep(0.2); print(2)")).status, "Success");
    t.is((await ex.run("raise ValueError('no')")).status, "Failed");
    t.is(count("torl_sandbox_runs_total", "torl_sandbox_runs_total", "Success"), before.success + 2);
    t.is(count("torl_sandbox_runs_total", "torl_sandbox_runs_total", "Failed"), before.failed + 1);
    t.is(count("torl_sandbox_run_seconds", "torl_sandbox_run_seconds_count", "Success"), before.observed + 2);
    const family = metricFamilies().find((f) => f.name === "torl_sandbox_run_seconds")!;
    t.is(family.type, "histogram");
    const sum = family.samples.find(
      (s) => s.name === "torl_sandbox_run_seconds_sum" && s.labels.status === "Success",
    )!;
    t.true(sum.value >= 0.2, `${sum.value} s`);
  },
);

test.serial(
  "nothing carries from one run to the next (files, module state, processes, /dev/shm)",
  async (t) => {
    const first = await ex.run(`
import os, sys, sympy, subprocess
open("/tmp/left.txt", "w").write("x")
open("left-in-scratch.txt", "w").write("x")
open("/dev/shm/left", "w").write("x")
sympy.LEFT_BEHIND = 1
sys.modules["left_module"] = sys
subprocess.Popen(["sleep", "100"])
print(os.getpid())
`);
    t.is(first.status, "Success", JSON.stringify(first));
    const second = await ex.run(`
import os, sys, sympy
print(os.path.exists("/tmp/left.txt"), os.path.exists("left-in-scratch.txt"), os.path.exists("/dev/shm/left"))
print(hasattr(sympy, "LEFT_BEHIND"), "left_module" in sys.modules)
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
print(others)
print(sorted(os.listdir(".")))
`);
    t.is(second.run_result?.stdout, "False False False\nFalse False\n[]\n['main.py']\n");
  },
);

test.serial(
  "a worker killed from outside is replaced; its run answers SandboxError; the service stays up",
  async (t) => {
    const [pid] = ex.workerPids();
    t.truthy(pid);
    const running = ex.run({ code: "import time\ntime.sleep(30)", run_timeout: 60 });
    await new Promise((r) => setTimeout(r, 300));
    process.kill(pid!, "SIGKILL");
    const r = await running;
    t.is(r.status, "SandboxError");
    t.regex(r.message, /died/);
    const next = await ex.run("print('back')");
    t.is(next.run_result?.stdout, "back\n");
    t.is(ex.health().restarts, 1);
    t.false(ex.workerPids().includes(pid!));
  },
);

test.serial(
  "control: with the network and mount namespaces switched off, the same attacks succeed",
  async (t) => {
    const open = await new SandboxExecutor({
      workers: 1,
      disable: ["net_ns", "mount_ns"],
      log: () => {},
    }).start();
    const hostFile = `/tmp/torl-control-${randomBytes(6).toString("hex")}`;
    writeFileSync(hostFile, "visible");
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const h = open.health();
      t.is(h.status, "degraded");
      t.false(h.protections.network_namespace!.active);
      t.true(h.warnings.some((w) => /filesystem isolation off/.test(w)));
      const r = await open.run(`
import socket
print(open("${hostFile}").read())
socket.create_connection(("127.0.0.1", ${port}), timeout=5).close()
print("connected")
`);
      t.is(r.run_result?.stdout, "visible\nconnected\n", JSON.stringify(r));
      // the accept may be handled a loop turn after the run's answer arrives
      t.true(await eventually(() => connections === 1), `connections: ${connections}`);
    } finally {
      server.close();
      rmSync(hostFile, { force: true });
      await open.close();
    }
    t.false(existsSync(hostFile));
  },
);

test("limits a request asks for are checked on every path: <= 0 or over the executor's maximum is refused", async (t) => {
  const small = new SandboxExecutor({
    workers: 1,
    limits: { maxMemoryMB: 512, maxRunTimeout: 20 },
    log: () => {},
  });
  // refused before any worker is needed: nothing is started
  for (const [request, reason] of [
    [{ code: "print(1)", memory_limit_MB: 0 }, /memory_limit_MB: must be > 0 MB, got 0/],
    [{ code: "print(1)", memory_limit_MB: -5 }, /memory_limit_MB: must be > 0 MB, got -5/],
    [
      { code: "print(1)", memory_limit_MB: 513 },
      /memory_limit_MB: 513 MB is over this server's limit of 512 MB/,
    ],
    [{ code: "print(1)", run_timeout: 0 }, /run_timeout: must be > 0 s, got 0/],
    [{ code: "print(1)", run_timeout: 21 }, /run_timeout: 21 s is over this server's limit of 20 s/],
  ] as const) {
    await t.throwsAsync(small.run(request), { instanceOf: RunRequestError, message: reason });
  }
  // a request validated elsewhere (a server with looser limits) is checked again by the executor
  const loose = normalizeRequest({ code: "print(1)", memory_limit_MB: 4096 });
  await t.throwsAsync(small.runNormalized(loose), {
    instanceOf: RunRequestError,
    message: /over this server's limit of 512 MB/,
  });
  await t.throwsAsync(small.runNormalized({ ...loose, memory_limit_MB: -1 }), {
    instanceOf: RunRequestError,
  });
  t.throws(() => new SandboxExecutor({ limits: { maxMemoryMB: 0 } }), {
    instanceOf: SandboxConfigError,
    message: /limits.maxMemoryMB/,
  });
  t.throws(() => new SandboxExecutor({ maxProcesses: 0 }), {
    instanceOf: SandboxConfigError,
    message: /maxProcesses/,
  });
  // a value JavaScript callers could pass that would otherwise read as "on"
  for (const hugePages of ["yes", 1, null, "Auto"])
    for (const make of [
      () => new SandboxExecutor({ hugePages: hugePages as never }),
      () => new SandboxWorker({ name: "unused", hugePages: hugePages as never }),
    ])
      t.throws(make, {
        instanceOf: SandboxConfigError,
        message: /hugePages: must be true, false or "auto", got /,
      });
});

test("the fork server refuses a limit that would be off, whatever reaches it", async (t) => {
  const worker = new SandboxWorker({ name: `torl-${process.pid}-limits`, hugePages: false });
  await worker.start();
  try {
    const base = normalizeRequest({ code: "print(1)" });
    for (const bad of [{ memory_limit_MB: 0 }, { memory_limit_MB: -1 }, { run_timeout: 0 }]) {
      await t.throwsAsync(worker.run({ ...base, ...bad, max_processes: 8 }), {
        instanceOf: SandboxInternalError,
        message: /must be a finite number > 0/,
      });
    }
    t.is((await worker.run({ ...base, max_processes: 8 })).stdout, "1\n");
  } finally {
    await worker.close();
  }
});

test("run before start starts the pool; start twice is one pool; workers must be a count", async (t) => {
  const lazy = new SandboxExecutor({ workers: 1, log: () => {}, hugePages: false });
  try {
    const [a, b] = await Promise.all([lazy.run("print(6*7)"), lazy.run("print(2)")]);
    t.is(a.run_result?.stdout, "42\n");
    t.is(b.run_result?.stdout, "2\n");
    await lazy.start();
    await lazy.start();
    t.is(lazy.workerPids().length, 1);
  } finally {
    await lazy.close();
  }
  for (const workers of [0, -1, 1.5, Number.NaN])
    t.throws(() => new SandboxExecutor({ workers }), { instanceOf: SandboxConfigError, message: /workers/ });
});

test("a pool that cannot bring up a worker answers SandboxError with the reason, then recovers", async (t) => {
  const { python, broken, dispose } = flakyPython();
  broken(true);
  const pool = new SandboxExecutor({ workers: 1, python, log: () => {}, hugePages: false });
  try {
    // never started, and starting fails: the request is answered, not left waiting
    const first = await pool.run("print(1)");
    t.is(first.status, "SandboxError");
    t.regex(first.message, /no sandbox worker could be started: .*python is broken/s);
    broken(false);
    const second = await pool.run("print(1)");
    t.is(second.run_result?.stdout, "1\n", JSON.stringify(second));
    // the only worker dies and its replacement fails: waiting requests are told why
    broken(true);
    const [pid] = pool.workerPids();
    process.kill(pid!, "SIGKILL");
    t.true(await eventually(() => !pool.workerPids().includes(pid!)));
    const orphaned = await pool.run("print(2)");
    t.is(orphaned.status, "SandboxError");
    t.regex(
      orphaned.message,
      /^(every sandbox worker has died and the replacement failed|no sandbox worker could be started): .*python is broken/s,
    );
    // once python works again the next request brings the pool back
    broken(false);
    t.is((await pool.run("print(3)")).run_result?.stdout, "3\n");
  } finally {
    await pool.close();
    dispose();
  }
});

test.serial("close while start runs leaves no worker behind; start and run after it refuse", async (t) => {
  const ours = () => leftovers(`"name":"torl-${process.pid}-`).length;
  const before = ours();
  t.true(before >= 1, "the marker finds this file's own worker"); // test.before's
  const racing = new SandboxExecutor({ workers: 1, log: () => {}, hugePages: false });
  const started = racing.start();
  const closed = racing.close();
  await t.throwsAsync(started, { instanceOf: SandboxClosedError });
  await closed;
  t.true(
    await eventually(() => ours() === before),
    `${ours()} worker processes of this test left, ${before} before`,
  );
  await t.throwsAsync(racing.start(), { instanceOf: SandboxClosedError });
  await t.throwsAsync(racing.run("print(1)"), { instanceOf: SandboxClosedError });
});

test.serial("a run in flight when the executor closes is answered that the executor closed", async (t) => {
  const closing = await new SandboxExecutor({ workers: 1, log: () => {}, hugePages: false }).start();
  const running = closing.run("import time; time.sleep(30)");
  await new Promise((r) => setTimeout(r, 300));
  await closing.close();
  const answer = await running;
  t.is(answer.status, "SandboxError");
  t.regex(answer.message, /^the sandbox executor closed while this request ran/);
});

test("executor options are checked: no output budget, /tmp size or limit that cannot work is taken", (t) => {
  for (const [options, message] of [
    [{ maxOutputBytes: 0 }, /maxOutputBytes: must be a whole number >= 1, got 0/],
    [{ maxOutputBytes: -1 }, /maxOutputBytes/],
    [{ tmpfsMb: 0.5 }, /tmpfsMb: must be a whole number >= 1, got 0.5/],
    [{ tmpfsMb: "64" }, /tmpfsMb: must be a whole number >= 1, got "64"/],
    [{ tmpfsMb: Number.NaN }, /tmpfsMb/],
    [{ workers: "2" }, /workers: must be a whole number >= 1, got "2"/],
    [{ limits: { bogusKey: 1 } }, /limits.bogusKey: no such limit; limits are maxRunTimeout/],
    [{ limits: { maxRunTimeout: "2" } }, /limits.maxRunTimeout: must be a number > 0, got "2"/],
  ] as const)
    t.throws(() => new SandboxExecutor(options as never), { instanceOf: SandboxConfigError, message });
});

test("the sandbox's processes carry the names of their roles (ps, top and perf tell them apart)", async (t) => {
  const r = await ex.run({ code: "print(open('/proc/self/comm').read().strip())" });
  t.is(r.run_result?.stdout, "sandbox-run\n");
  const comm = (pid: number) => readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  const children = (pid: number) =>
    readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  const [started] = ex.workerPids();
  // in its own pid namespace (as root) the server is the started process's child, else the same process
  const server = ex.health().protections.pid_namespace?.active ? children(started!)[0]! : started!;
  if (server !== started) t.is(comm(started!), "torl-sandbox");
  t.is(comm(server), "sandbox-server");
  t.true(
    children(server).some((pid) => comm(pid) === "sandbox-tmpl"),
    "the template is the server's child",
  );
});
