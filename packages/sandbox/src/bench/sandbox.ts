import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { cpus } from "node:os";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { defineBench } from "@torl-ts/core/cli";
import { SandboxExecutor } from "../executor.js";
import { BENCH_FORK_LOOP_PATH, forkServerEnv, resolvePython } from "../python.js";
import { normalizeRequest } from "../request.js";
import { serveSandbox } from "../server.js";
import { SandboxWorker } from "../worker.js";

export const BENCH_CODE = "import sympy\nx = sympy.symbols('x')\nprint(sympy.factor(x**2-1))";
const EXPECTED = "(x - 1)*(x + 1)\n";

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

/** Runs `fn` `total` times with `concurrency` in flight; returns runs per second. */
async function throughput(
  total: number,
  concurrency: number,
  fn: (i: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        await fn(i);
      }
    }),
  );
  return total / ((performance.now() - t0) / 1000);
}

const FAULT_PROBE = `
import mmap, time
n = 4000
m = mmap.mmap(-1, n * 4096)
t = time.perf_counter()
for i in range(0, n * 4096, 4096):
    m[i] = 1
print((time.perf_counter() - t) / n * 1e6)
`;

/** Linux reports process CPU times in clock ticks of 1/100 s (USER_HZ on every architecture it runs on). */
const USER_HZ = 100;

/**
 * CPU seconds used so far by the live process trees under `roots`, by depth below the root: each
 * process's own user and system time counts at its depth, what its reaped children used (the kernel
 * adds a child's times to its parent's when it is reaped) one level deeper. Process CPU time, unlike
 * throughput, barely moves with the machine's load, so the pool's cost per run can be compared with
 * the bare loop's on a busy machine.
 */
function treeCpuSeconds(roots: number[]): number[] {
  const procs = new Map<number, { ppid: number; self: number; reaped: number }>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // after "pid (comm) ": state ppid ... utime(14) stime(15) cutime(16) cstime(17)
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const self = Number(f[11]) + Number(f[12]);
      procs.set(Number(entry), { ppid: Number(f[1]), self, reaped: Number(f[13]) + Number(f[14]) });
    } catch {
      // gone meanwhile: what it used is in its parent's cutime once reaped
    }
  }
  const depthBelowRoot = (pid: number): number => {
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      if (roots.includes(p)) return hops;
      p = procs.get(p)?.ppid ?? 0;
    }
    return -1;
  };
  const ticks: number[] = [];
  const add = (depth: number, n: number) => {
    while (ticks.length <= depth) ticks.push(0);
    ticks[depth]! += n;
  };
  for (const [pid, p] of procs) {
    const depth = depthBelowRoot(pid);
    if (depth < 0) continue;
    add(depth, p.self);
    add(depth + 1, p.reaped);
  }
  return ticks.map((n) => n / USER_HZ);
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/**
 * The pool's CPU seconds so far, by process: this one (Node), each worker's fork server (with the
 * process that started it in its own pid namespace), the template, and the runs (the template's
 * children, live and reaped).
 */
function poolCpuSeconds(workerPids: number[]): {
  node: number;
  server: number;
  template: number;
  runs: number;
} {
  const usage = process.cpuUsage();
  const d = treeCpuSeconds(workerPids);
  return {
    node: (usage.user + usage.system) / 1e6,
    server: (d[0] ?? 0) + (d[1] ?? 0),
    template: d[2] ?? 0,
    runs: sum(d.slice(3)),
  };
}

/** Microseconds per first-touch page fault on this machine (~0.1-1 us on bare metal, 20-40 us under shadow paging). */
function pageFaultMicros(python: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const p = spawn(python, ["-c", FAULT_PROBE], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    p.stdout.on("data", (c: Buffer) => {
      out += c.toString();
    });
    p.on("error", reject);
    p.on("exit", () => resolve(Number(out.trim())));
  });
}

/** One plain `python3 -c CODE` per run, as an executor without a warm pool does. */
function naiveRun(python: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(python, ["-c", BENCH_CODE], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    p.stdout.on("data", (c: Buffer) => {
      out += c.toString();
    });
    p.on("error", reject);
    p.on("exit", (code) =>
      code === 0 && out === EXPECTED ? resolve() : reject(new Error(`naive run failed: ${code} ${out}`)),
    );
  });
}

/**
 * The machine's ceiling for a fork-per-run pool: `processes` warm interpreters (the pool's heap, no
 * isolation, no IPC) each fork `runs` children in a plain loop, all at once. Mode "exit": the child
 * exits at once (the price of fork and exit alone); "code": it runs the benchmark code first.
 * Returns runs per second over all processes.
 */
async function bareForkLoop(
  python: string,
  processes: number,
  runs: number,
): Promise<{ exit: number; code: number; codeCpuMsPerRun: number; parentCpuMsPerRun: number }> {
  const config = JSON.stringify({ huge_pages: true, code: BENCH_CODE });
  const procs = Array.from({ length: processes }, () => {
    const proc = spawn(python, [BENCH_FORK_LOOP_PATH, config], {
      stdio: ["pipe", "pipe", "inherit"],
      env: forkServerEnv(true),
    });
    const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const line = await lines.next();
      if (line.done) throw new Error(`bare fork loop ended (exit code ${proc.exitCode})`);
      return line.value;
    };
    return { proc, next };
  });
  try {
    await Promise.all(
      procs.map(async (p) => (await p.next()) === "ready" || Promise.reject(new Error("no ready line"))),
    );
    const pids = procs.map((p) => p.proc.pid!);
    let cpuMsPerRun = 0;
    let parentMsPerRun = 0;
    const rate = async (mode: "exit" | "code") => {
      const cpu0 = treeCpuSeconds(pids);
      for (const p of procs) p.proc.stdin.write(`go ${mode} ${runs}\n`);
      const answers = await Promise.all(
        procs.map(async (p) => JSON.parse(await p.next()) as { seconds: number }),
      );
      const cpu1 = treeCpuSeconds(pids);
      cpuMsPerRun = ((sum(cpu1) - sum(cpu0)) * 1000) / (processes * runs);
      parentMsPerRun = (((cpu1[0] ?? 0) - (cpu0[0] ?? 0)) * 1000) / (processes * runs);
      return (processes * runs) / Math.max(...answers.map((a) => a.seconds));
    };
    const exit = await rate("exit");
    const code = await rate("code");
    return { exit, code, codeCpuMsPerRun: cpuMsPerRun, parentCpuMsPerRun: parentMsPerRun };
  } finally {
    for (const p of procs) p.proc.kill("SIGKILL");
  }
}

export interface SandboxBenchResult {
  workers: number;
  /** Cost of one page fault on this machine (context: the pool's floor is page-table work). */
  machine_page_fault_us: number;
  isolation: string;
  naive_spawn_per_s: number;
  pool_per_s: number;
  pool_speedup_vs_naive: number;
  /** Ceiling context, same run: warm interpreters forking children in a bare loop (no isolation, no IPC). */
  bare_fork_exit_per_s: number;
  /** The same bare loop running the benchmark code in each child: no fork-per-run pool can beat it. */
  bare_fork_code_per_s: number;
  bare_fork_code_speedup_vs_naive: number;
  /** pool_per_s / bare_fork_code_per_s, same run: the share of the ceiling the isolated pool reaches. */
  pool_vs_bare_fork: number;
  /** CPU per run (ms) of the bare loop running the code: its processes and their children. */
  bare_fork_code_cpu_ms_per_run: number;
  /** The same, split: the forking loops themselves, and the children (fork to exit). */
  bare_fork_code_cpu_ms_parent: number;
  bare_fork_code_cpu_ms_children: number;
  /** CPU per run (ms) of the pool: every worker's processes and runs, and this Node process. */
  pool_cpu_ms_per_run: number;
  /**
   * The same, by process: Node (this process: requests, answers), the fork servers (requests, the
   * poll loop, fresh /tmp), the templates (ending runs, forking the next child), the runs (fork to
   * exit, isolation steps included). Set against bare_fork_code_cpu_ms_parent / _children.
   */
  pool_cpu_ms_node: number;
  pool_cpu_ms_server: number;
  pool_cpu_ms_template: number;
  pool_cpu_ms_runs: number;
  /**
   * bare_fork_code_cpu_ms_per_run / pool_cpu_ms_per_run: the same comparison in CPU time, which a
   * loaded machine barely moves (throughput ratios on a busy machine favour the pool, whose more
   * processes get more of the CPU shares).
   */
  pool_vs_bare_fork_cpu: number;
  pool_p50_ms: number;
  pool_p99_ms: number;
  http_per_s: number;
  http_clients: number;
  target_pool_per_s_ge_50x_naive: boolean;
  target_pool_p50_le_10ms: boolean;
}

export async function benchSandbox(
  opts: { workers?: number; runs?: number; naiveRuns?: number; latencyRuns?: number; bareRuns?: number } = {},
  log: (line: string) => void = () => {},
): Promise<SandboxBenchResult> {
  const workers = opts.workers ?? Math.max(1, cpus().length);
  const runs = opts.runs ?? 300;
  const python = resolvePython();
  log(`python: ${python}; code: ${JSON.stringify(BENCH_CODE)}`);
  const faultUs = await pageFaultMicros(python);
  log(`machine: one page fault costs ${round(faultUs)} us`);

  log(`naive: ${opts.naiveRuns ?? 4 * workers} runs of a fresh python3 process, ${workers} at a time`);
  await naiveRun(python); // page cache warm, as the pool's own start is
  const naive = await throughput(opts.naiveRuns ?? 4 * workers, workers, () => naiveRun(python));
  log(`  naive_spawn_per_s ${round(naive)}`);

  const bareRuns = opts.bareRuns ?? 100;
  log(`ceiling: ${workers} bare fork loops of the same warm heap, ${bareRuns} children each, no isolation`);
  const bare = await bareForkLoop(python, workers, bareRuns);
  log(
    `  bare_fork_exit_per_s ${round(bare.exit)} (fork + exit)  bare_fork_code_per_s ${round(bare.code)} (fork + code + exit)`,
  );

  log(`pool: starting ${workers} warm workers`);
  const ex = await new SandboxExecutor({ workers, log }).start();
  try {
    const health = ex.health();
    const off = Object.entries(health.protections)
      .filter(([, p]) => !p.active)
      .map(([n]) => n);
    const isolation = off.length === 0 ? "full" : `missing: ${off.join(", ")}`;
    log(`  isolation while measured: ${isolation}`);
    const check = async () => {
      const r = await ex.run(BENCH_CODE);
      if (r.run_result?.stdout !== EXPECTED) throw new Error(`pool run failed: ${JSON.stringify(r)}`);
    };
    for (let i = 0; i < 2 * workers; i++) await check();

    log(`pool: ${runs} runs, ${workers} in flight`);
    const poolCpu0 = poolCpuSeconds(ex.workerPids());
    const pool = await throughput(runs, workers, check);
    const poolCpu1 = poolCpuSeconds(ex.workerPids());
    const perRun = (k: keyof typeof poolCpu0) => ((poolCpu1[k] - poolCpu0[k]) * 1000) / runs;
    const poolCpuMsPerRun = perRun("node") + perRun("server") + perRun("template") + perRun("runs");
    log(
      `  pool_per_s ${round(pool)}  CPU per run ${round(poolCpuMsPerRun)} ms (bare loop: ${round(bare.codeCpuMsPerRun)} ms)`,
    );

    // latency: one request at a time to an idle pool (each finds a prepared child waiting)
    const latencyRuns = opts.latencyRuns ?? 100;
    log(`pool latency: ${latencyRuns} single requests to an idle pool`);
    const lat: number[] = [];
    for (let i = 0; i < latencyRuns; i++) {
      await new Promise((r) => setTimeout(r, 25));
      const t0 = performance.now();
      await check();
      lat.push(performance.now() - t0);
    }
    lat.sort((a, b) => a - b);
    const p50 = quantile(lat, 0.5);
    const p99 = quantile(lat, 0.99);
    log(`  pool_p50_ms ${round(p50)}  pool_p99_ms ${round(p99)}`);

    const clients = 16;
    log(`http: ${runs} POST /run_code from ${clients} concurrent clients`);
    const srv = await serveSandbox(ex, { port: 0 });
    let http: number;
    try {
      http = await throughput(runs, clients, async () => {
        const res = await fetch(`${srv.url}/run_code`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ code: BENCH_CODE, language: "python" }),
        });
        const body = (await res.json()) as { run_result?: { stdout?: string } };
        if (body.run_result?.stdout !== EXPECTED) throw new Error(`http run failed: ${JSON.stringify(body)}`);
      });
    } finally {
      await srv.close();
    }
    log(`  http_per_s ${round(http)}`);
    return {
      workers,
      machine_page_fault_us: round(faultUs),
      isolation,
      naive_spawn_per_s: round(naive, 3),
      pool_per_s: round(pool),
      pool_speedup_vs_naive: round(pool / naive, 1),
      bare_fork_exit_per_s: round(bare.exit),
      bare_fork_code_per_s: round(bare.code),
      bare_fork_code_speedup_vs_naive: round(bare.code / naive, 1),
      pool_vs_bare_fork: round(pool / bare.code, 3),
      bare_fork_code_cpu_ms_per_run: round(bare.codeCpuMsPerRun),
      bare_fork_code_cpu_ms_parent: round(bare.parentCpuMsPerRun),
      bare_fork_code_cpu_ms_children: round(bare.codeCpuMsPerRun - bare.parentCpuMsPerRun),
      pool_cpu_ms_per_run: round(poolCpuMsPerRun),
      pool_cpu_ms_node: round(perRun("node")),
      pool_cpu_ms_server: round(perRun("server")),
      pool_cpu_ms_template: round(perRun("template")),
      pool_cpu_ms_runs: round(perRun("runs")),
      pool_vs_bare_fork_cpu: round(bare.codeCpuMsPerRun / poolCpuMsPerRun, 3),
      pool_p50_ms: round(p50),
      pool_p99_ms: round(p99),
      http_per_s: round(http),
      http_clients: clients,
      target_pool_per_s_ge_50x_naive: pool >= 50 * naive,
      target_pool_p50_le_10ms: p50 <= 10,
    };
  } finally {
    await ex.close();
  }
}

/** Median of each per-run timing (TORL_SANDBOX_TRACE) over the runs that reported it. */
function medians(traces: Record<string, number>[]): Record<string, number> {
  const keys = new Set(traces.flatMap((t) => Object.keys(t)));
  const out: Record<string, number> = {};
  for (const k of [...keys].sort()) {
    const values = traces
      .map((t) => t[k])
      .filter((v): v is number => typeof v === "number")
      .sort((a, b) => a - b);
    out[k] = round(quantile(values, 0.5), 1);
  }
  return out;
}

/**
 * What each isolation step costs per run: `workers` fork servers with per-step timings on
 * (TORL_SANDBOX_TRACE=1) run the benchmark code `runs` times each, all at once (a busy pool, as
 * `pool_per_s` measures). The medians of every timing: `step_*_us` in the run child before its
 * request (setsid, cgroup join, prefault, rlimits, reseed, IPC namespace, capability and uid drop,
 * seccomp...), `template_*_us` between runs (kill and reap, fresh /tmp and /dev/shm, fork),
 * `server_*_us` (cgroup limits, ending the run and reading its exit status).
 */
export async function benchSandboxSteps(
  opts: { workers?: number; runs?: number } = {},
  log: (line: string) => void = () => {},
): Promise<Record<string, number>> {
  const workers = opts.workers ?? Math.max(1, cpus().length);
  const runs = opts.runs ?? 100;
  const before = process.env.TORL_SANDBOX_TRACE;
  process.env.TORL_SANDBOX_TRACE = "1";
  const pool = Array.from(
    { length: workers },
    (_, i) => new SandboxWorker({ name: `torl-${process.pid}-steps-${i}` }),
  );
  try {
    await Promise.all(pool.map((w) => w.start()));
  } finally {
    if (before === undefined) delete process.env.TORL_SANDBOX_TRACE;
    else process.env.TORL_SANDBOX_TRACE = before;
  }
  try {
    const request = normalizeRequest({ code: BENCH_CODE });
    const traces: Record<string, number>[] = [];
    log(`steps: ${workers} workers with per-step timings, ${runs} runs each, all busy`);
    await Promise.all(
      pool.map(async (w) => {
        for (let i = 0; i < runs + 2; i++) {
          const r = await w.run(request);
          if (r.stdout !== EXPECTED) throw new Error(`traced run failed: ${JSON.stringify(r)}`);
          if (i >= 2 && r.trace) traces.push(r.trace); // the first two warm the worker up
        }
      }),
    );
    return medians(traces);
  } finally {
    await Promise.all(pool.map((w) => w.close()));
  }
}

export const benchSandboxCommand = defineBench({
  summary: "benchmark the sandbox: naive spawn vs warm pool vs HTTP API",
  usage: [
    "usage: pnpm torl bench sandbox [--json] [--workers N] [--runs 300] [--steps]",
    "",
    "Runs print(sympy.factor(x**2-1)) with isolation on and reports:",
    "  naive_spawn_per_s  a fresh python3 process per run that imports sympy (N at a time): the baseline",
    "  pool_per_s         the same code through the warm pool (N workers, N in flight)",
    "  bare_fork_code_per_s  the machine's ceiling: the same warm heap forking a child per run in a bare",
    "                     loop (no isolation, no IPC); bare_fork_exit_per_s: fork and exit alone",
    "  pool_p50_ms / pool_p99_ms  latency of one request at a time to an idle pool",
    "  http_per_s         through POST /run_code with 16 concurrent clients",
    "  pool_vs_bare_fork  pool_per_s / bare_fork_code_per_s: what the isolation and the IPC cost",
    "  pool_vs_bare_fork_cpu  the same in CPU per run (bare loop / pool), steadier on a loaded machine;",
    "                     pool_cpu_ms_node/_server/_template/_runs and bare_fork_code_cpu_ms_parent/",
    "                     _children split it by process",
    "Targets: pool_per_s >= 50 x naive_spawn_per_s; pool_p50_ms <= 10; pool_vs_bare_fork >= 0.85.",
    "",
    "--steps: instead, the median cost of each isolation step per run (microseconds), busy workers",
    "with per-step timings on (TORL_SANDBOX_TRACE=1); --runs is then the runs per worker (default 100).",
  ].join("\n"),
  flags: {
    workers: { type: "integer", min: 1 },
    runs: { type: "integer", min: 1 },
    steps: { type: "boolean" },
  },
  /** With --steps the median cost of each isolation step, else the throughput figures. */
  measure(flags): Promise<Record<string, number> | SandboxBenchResult> {
    const workers = flags.workers ?? Math.max(1, cpus().length);
    const log = (line: string) => console.log(line);
    if (flags.steps) return benchSandboxSteps({ workers, runs: flags.runs ?? 100 }, log);
    return benchSandbox({ workers, runs: flags.runs ?? 300 }, log);
  },
  show(figures, flags) {
    if (flags.steps) {
      for (const [k, v] of Object.entries(figures)) console.log(`${k.padEnd(36)}${v}`);
      return;
    }
    const result = figures as SandboxBenchResult;
    const row = (figure: string, value: string | number, note = "") =>
      console.log(`${figure.padEnd(22)}${String(value).padEnd(10)}${note}`.trimEnd());
    console.log("");
    row("figure", "value", "baseline (same run)");
    row("naive_spawn_per_s", result.naive_spawn_per_s, "-");
    row("pool_per_s", result.pool_per_s, `${result.pool_speedup_vs_naive}x naive (target >= 50x)`);
    row(
      "bare_fork_code_per_s",
      result.bare_fork_code_per_s,
      `${result.bare_fork_code_speedup_vs_naive}x naive: the ceiling of any fork-per-run pool here`,
    );
    row("bare_fork_exit_per_s", result.bare_fork_exit_per_s, "fork and exit alone");
    row("pool_vs_bare_fork", result.pool_vs_bare_fork, "pool_per_s / bare_fork_code_per_s (target >= 0.85)");
    row(
      "pool_vs_bare_fork_cpu",
      result.pool_vs_bare_fork_cpu,
      `CPU per run: bare loop ${result.bare_fork_code_cpu_ms_per_run} ms / pool ${result.pool_cpu_ms_per_run} ms`,
    );
    row(
      "CPU by process (ms)",
      "",
      `pool: Node ${result.pool_cpu_ms_node}, servers ${result.pool_cpu_ms_server}, templates ${result.pool_cpu_ms_template}, runs ${result.pool_cpu_ms_runs}; bare loop: parents ${result.bare_fork_code_cpu_ms_parent}, children ${result.bare_fork_code_cpu_ms_children}`,
    );
    row("pool_p50_ms", result.pool_p50_ms, "target <= 10");
    row("pool_p99_ms", result.pool_p99_ms);
    row("http_per_s", result.http_per_s, `${round(result.http_per_s / result.naive_spawn_per_s, 1)}x naive`);
    row("isolation", result.isolation);
    row("page fault (us)", result.machine_page_fault_us);
  },
});
