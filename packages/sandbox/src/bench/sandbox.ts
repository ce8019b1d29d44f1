import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { cpus } from "node:os";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { UsageError } from "@torl-ts/core";
import { defineBench } from "@torl-ts/core/cli";
import { SandboxExecutor } from "../executor.js";
import { BENCH_FORK_LOOP_PATH, forkServerEnv, pageFaultMicros, resolvePython } from "../python.js";
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

/** A pool's CPU per run over all its processes, ms. */
const cpuTotal = (c: PoolCpu) => c.node + c.server + c.template + c.runs;

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

/** CPU per run (ms) of the pool, by process (see SandboxBenchResult.pool_cpu_ms_node...). */
interface PoolCpu {
  node: number;
  server: number;
  template: number;
  runs: number;
}

type BareMode = "exit" | "code" | "handoff";

/** One timed stretch of a bare fork loop: runs per second, and CPU per run (ms) in all and in the loops themselves. */
interface BareRate {
  perS: number;
  cpuMsPerRun: number;
  parentCpuMsPerRun: number;
}

/**
 * The machine's ceiling for a fork-per-run pool: `processes` warm interpreters (the pool's heap, no
 * isolation, no IPC), started once and kept, each forking `runs` children per call of `rate`, all at
 * once. Mode "exit": the child exits at once (the price of fork and exit alone); "code": it runs the
 * benchmark code first; "handoff": the child is forked before the code exists and gets it through a
 * pipe, compiles it, and its output comes back through another (the least any pool adds, in one
 * process). `hugePages` picks the heap the loops warm: 2 MiB hugetlb pages or ordinary ones.
 */
async function startBareForkLoops(
  python: string,
  processes: number,
  hugePages: boolean,
): Promise<{
  /** Why the loops' heap is in ordinary pages although huge ones were asked for; undefined when not. */
  hugeUnavailable: string | undefined;
  rate(mode: BareMode, runs: number): Promise<BareRate>;
  close(): void;
}> {
  const config = JSON.stringify({ huge_pages: hugePages, code: BENCH_CODE });
  const procs = Array.from({ length: processes }, () => {
    const proc = spawn(python, [BENCH_FORK_LOOP_PATH, config], {
      stdio: ["pipe", "pipe", "inherit"],
      env: forkServerEnv(hugePages),
    });
    const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const line = await lines.next();
      if (line.done) throw new Error(`bare fork loop ended (exit code ${proc.exitCode})`);
      return line.value;
    };
    return { proc, next };
  });
  const close = () => {
    for (const p of procs) p.proc.kill("SIGKILL");
  };
  let hugeUnavailable: string | undefined;
  try {
    const said = await Promise.all(procs.map((p) => p.next()));
    for (const line of said) {
      const [word, heap, ...why] = line.split(" ");
      if (word !== "ready") throw new Error(`bare fork loop: no ready line (got ${JSON.stringify(line)})`);
      if (hugePages && heap !== "huge") hugeUnavailable = why.join(" ") || "no huge-page heap";
    }
  } catch (err) {
    close();
    throw err;
  }
  const pids = procs.map((p) => p.proc.pid!);
  const rate = async (mode: BareMode, runs: number): Promise<BareRate> => {
    const cpu0 = treeCpuSeconds(pids);
    for (const p of procs) p.proc.stdin.write(`go ${mode} ${runs}\n`);
    const answers = await Promise.all(
      procs.map(async (p) => JSON.parse(await p.next()) as { seconds: number }),
    );
    const cpu1 = treeCpuSeconds(pids);
    return {
      perS: (processes * runs) / Math.max(...answers.map((a) => a.seconds)),
      cpuMsPerRun: ((sum(cpu1) - sum(cpu0)) * 1000) / (processes * runs),
      parentCpuMsPerRun: (((cpu1[0] ?? 0) - (cpu0[0] ?? 0)) * 1000) / (processes * runs),
    };
  };
  return { hugeUnavailable, rate, close };
}

export interface SandboxBenchResult {
  workers: number;
  /** Cost of one page fault on this machine (context: the pool's floor is page-table work). */
  machine_page_fault_us: number;
  isolation: string;
  naive_spawn_per_s: number;
  pool_per_s: number;
  pool_speedup_vs_naive: number;
  /** The page size of the pool's warm heap: 2 MiB hugetlb pages ("huge") or ordinary ones ("small"). */
  pool_heap: "huge" | "small";
  /** Rounds of (bare loops, pool) measured in alternation; throughputs and ratios are their medians. */
  rounds: number;
  /** Ceiling context, same run: warm interpreters with the pool's heap forking children in a bare loop (no isolation, no IPC). */
  bare_fork_exit_per_s: number;
  /** The same bare loop running the benchmark code in each child: no fork-per-run pool with this heap can beat it. */
  bare_fork_code_per_s: number;
  bare_fork_code_speedup_vs_naive: number;
  /** pool_per_s / bare_fork_code_per_s, median of the rounds': the share of the ceiling the isolated pool reaches. */
  pool_vs_bare_fork: number;
  /** Each round's pool_per_s / bare_fork_code_per_s, in order: the spread the machine gives. */
  pool_vs_bare_fork_rounds: number[];
  /** The bare loop's code throughput with each heap; the faster one is the machine's ceiling for any heap. */
  bare_fork_code_per_s_huge: number | null;
  /** Why the huge-page loop could not have huge pages here (then bare_fork_code_per_s_huge is null); absent when it had them. */
  bare_fork_huge_unavailable?: string;
  bare_fork_code_per_s_small: number;
  /** pool_per_s / the faster heap's bare loop, median of the rounds': whether the pool's heap is the right one here. */
  pool_vs_best_bare_fork: number;
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
  /**
   * The bare loop of the pool's heap handing each run its code through a pipe, the child forked
   * before the code arrives and its output read back through another pipe: what the least hand-off
   * any pool needs costs, with no isolation, no Node and no other process. Median of the rounds.
   */
  bare_handoff_code_per_s: number;
  bare_handoff_cpu_ms_per_run: number;
  /** bare_handoff_code_per_s / bare_fork_code_per_s, median of the rounds': the hand-off's own price. */
  bare_handoff_vs_bare_fork: number;
  /** pool_per_s / bare_handoff_code_per_s, median of the rounds': what the pool adds to the least hand-off. */
  pool_vs_bare_handoff: number;
  /** Where the measured pool's template loop runs: "native" (C) unless the machine could not build it. */
  pool_template_loop: "native" | "python";
  /**
   * The same pool with the template's loop and the run child's preparation in Python
   * (`nativeTemplate: false`), measured in the same rounds: its runs per second (median), its CPU
   * per run, and pool_per_s over it (median of the rounds' ratios).
   */
  pool_python_loop_per_s: number;
  pool_python_loop_cpu_ms_per_run: number;
  pool_vs_python_loop: number;
  /** The same in CPU per run over those rounds: the Python loop's over the pool's (above 1: the C loop costs less). */
  pool_vs_python_loop_cpu: number;
  pool_p50_ms: number;
  pool_p99_ms: number;
  http_per_s: number;
  http_clients: number;
  target_pool_per_s_ge_50x_naive: boolean;
  target_pool_p50_le_10ms: boolean;
}

export async function benchSandbox(
  opts: {
    workers?: number;
    runs?: number;
    rounds?: number;
    naiveRuns?: number;
    latencyRuns?: number;
    bareRuns?: number;
  } = {},
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

  log(`pool: starting ${workers} warm workers`);
  const ex = await new SandboxExecutor({ workers, log }).start();
  const poolHeap = ex.health().heap;
  const templateLoop = ex.health().templateLoop;
  if (templateLoop === null) throw new Error("the pool started without saying where its template loop runs");
  log(`  the pool's template loop: ${templateLoop}`);
  if (poolHeap === null) throw new Error("the pool started without saying which heap its workers have");
  const rounds = opts.rounds ?? 3;
  if (!Number.isInteger(rounds) || rounds < 1)
    throw new RangeError(`rounds must be an integer >= 1, got ${rounds}`);
  const bareRuns = opts.bareRuns ?? 100;
  log(`ceiling: ${workers} bare fork loops of each warm heap (huge and small pages), no isolation`);
  const started: { close(): void | Promise<void> }[] = [];
  const startLoops = async (hugePages: boolean) => {
    const loops = await startBareForkLoops(python, workers, hugePages);
    started.push(loops);
    return loops;
  };
  try {
    const bareLoops = { huge: await startLoops(true), small: await startLoops(false) };
    const hugeUnavailable = bareLoops.huge.hugeUnavailable;
    if (hugeUnavailable !== undefined) {
      if (poolHeap === "huge")
        throw new Error(`the pool has huge pages but the bare loop could not get them: ${hugeUnavailable}`);
      log(`  no huge pages for the bare loop (${hugeUnavailable}): bare_fork_code_per_s_huge is left out`);
    }
    const health = ex.health();
    const off = Object.entries(health.protections)
      .filter(([, p]) => !p.active)
      .map(([n]) => n);
    const isolation = off.length === 0 ? "full" : `missing: ${off.join(", ")}`;
    log(`  isolation while measured: ${isolation}; the pool's heap: ${poolHeap} pages`);
    const checkOn = (pool: SandboxExecutor) => async () => {
      const r = await pool.run(BENCH_CODE);
      if (r.run_result?.stdout !== EXPECTED) throw new Error(`pool run failed: ${JSON.stringify(r)}`);
    };
    const check = checkOn(ex);
    for (let i = 0; i < 2 * workers; i++) await check();
    const exit = await bareLoops[poolHeap].rate("exit", bareRuns);
    log(`  bare_fork_exit_per_s ${round(exit.perS)} (fork + exit, ${poolHeap} pages)`);

    // the pool and both ceilings in alternating rounds, so that the machine's drift (large on a
    // shared VM) moves them alike; each ratio is the median of the rounds' ratios
    const poolRuns = Math.max(workers, Math.round(runs / rounds));
    log(
      `rounds: ${rounds} x (bare loops ${bareRuns} children each per heap, pool ${poolRuns} runs, ${workers} in flight)`,
    );
    const perRound: {
      pool: number;
      poolCpu: PoolCpu;
      huge: BareRate;
      small: BareRate;
      handoff: BareRate;
    }[] = [];
    const poolRound = async (pool_: SandboxExecutor = ex) => {
      const cpu0 = poolCpuSeconds(pool_.workerPids());
      const pool = await throughput(poolRuns, workers, checkOn(pool_));
      const cpu1 = poolCpuSeconds(pool_.workerPids());
      const poolCpu = {
        node: ((cpu1.node - cpu0.node) * 1000) / poolRuns,
        server: ((cpu1.server - cpu0.server) * 1000) / poolRuns,
        template: ((cpu1.template - cpu0.template) * 1000) / poolRuns,
        runs: ((cpu1.runs - cpu0.runs) * 1000) / poolRuns,
      };
      return { pool, poolCpu };
    };
    for (let r = 0; r < rounds; r++) {
      // odd rounds reverse the order, so that a machine slowing down (or speeding up) over the
      // run favours neither side
      let huge: BareRate;
      let small: BareRate;
      let handoff: BareRate;
      let measured: Awaited<ReturnType<typeof poolRound>>;
      if (r % 2 === 0) {
        huge = await bareLoops.huge.rate("code", bareRuns);
        small = await bareLoops.small.rate("code", bareRuns);
        handoff = await bareLoops[poolHeap].rate("handoff", bareRuns);
        measured = await poolRound();
      } else {
        measured = await poolRound();
        handoff = await bareLoops[poolHeap].rate("handoff", bareRuns);
        small = await bareLoops.small.rate("code", bareRuns);
        huge = await bareLoops.huge.rate("code", bareRuns);
      }
      const { pool, poolCpu } = measured;
      perRound.push({ pool, poolCpu, huge, small, handoff });
      log(
        `  round ${r + 1}: pool ${round(pool)}/s  bare huge ${round(huge.perS)}/s  bare small ${round(small.perS)}/s` +
          `  bare hand-off ${round(handoff.perS)}/s`,
      );
    }
    const median = (xs: number[]) =>
      quantile(
        [...xs].sort((x, y) => x - y),
        0.5,
      );
    const mean = (xs: number[]) => sum(xs) / xs.length;
    const pool = median(perRound.map((r) => r.pool));
    const bare = (heap: "huge" | "small") => median(perRound.map((r) => r[heap].perS));
    const same = (r: (typeof perRound)[number]) => r[poolHeap];
    const bareCode = bare(poolHeap);
    const poolCpuPart = (k: keyof PoolCpu) => mean(perRound.map((r) => r.poolCpu[k]));
    const poolCpuMsPerRun =
      poolCpuPart("node") + poolCpuPart("server") + poolCpuPart("template") + poolCpuPart("runs");
    const bareCpu = mean(perRound.map((r) => same(r).cpuMsPerRun));
    const bareParentCpu = mean(perRound.map((r) => same(r).parentCpuMsPerRun));
    log(
      `  pool_per_s ${round(pool)}  CPU per run ${round(poolCpuMsPerRun)} ms (bare loop: ${round(bareCpu)} ms)`,
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

    // the baseline for the C loop: the same pool with it in Python, started only now so that it sits
    // beside none of the figures above; the two pools in alternating rounds
    log(
      `template loop: ${rounds} x (the pool, the same pool with its loop in Python), ${poolRuns} runs each`,
    );
    const pyEx = await new SandboxExecutor({ workers, nativeTemplate: false, log: () => {} }).start();
    started.push(pyEx);
    for (let i = 0; i < 2 * workers; i++) await checkOn(pyEx)();
    const loopRounds: { native: number; nativeCpu: PoolCpu; python: number; pythonCpu: PoolCpu }[] = [];
    for (let r = 0; r < rounds; r++) {
      const first = r % 2 === 0 ? ex : pyEx;
      const a = await poolRound(first);
      const b = await poolRound(first === ex ? pyEx : ex);
      const [native, python] = first === ex ? [a, b] : [b, a];
      loopRounds.push({
        native: native.pool,
        nativeCpu: native.poolCpu,
        python: python.pool,
        pythonCpu: python.poolCpu,
      });
      log(`  round ${r + 1}: pool ${round(native.pool)}/s  loop in Python ${round(python.pool)}/s`);
    }
    return {
      workers,
      machine_page_fault_us: round(faultUs),
      isolation,
      naive_spawn_per_s: round(naive, 3),
      pool_per_s: round(pool),
      pool_speedup_vs_naive: round(pool / naive, 1),
      pool_heap: poolHeap,
      rounds,
      bare_fork_exit_per_s: round(exit.perS),
      bare_fork_code_per_s: round(bareCode),
      bare_fork_code_speedup_vs_naive: round(bareCode / naive, 1),
      pool_vs_bare_fork: round(median(perRound.map((r) => r.pool / same(r).perS)), 3),
      pool_vs_bare_fork_rounds: perRound.map((r) => round(r.pool / same(r).perS, 3)),
      bare_fork_code_per_s_huge: hugeUnavailable === undefined ? round(bare("huge")) : null,
      ...(hugeUnavailable === undefined ? {} : { bare_fork_huge_unavailable: hugeUnavailable }),
      bare_fork_code_per_s_small: round(bare("small")),
      pool_vs_best_bare_fork: round(
        median(perRound.map((r) => r.pool / Math.max(r.huge.perS, r.small.perS))),
        3,
      ),
      bare_fork_code_cpu_ms_per_run: round(bareCpu),
      bare_fork_code_cpu_ms_parent: round(bareParentCpu),
      bare_fork_code_cpu_ms_children: round(bareCpu - bareParentCpu),
      pool_cpu_ms_per_run: round(poolCpuMsPerRun),
      pool_cpu_ms_node: round(poolCpuPart("node")),
      pool_cpu_ms_server: round(poolCpuPart("server")),
      pool_cpu_ms_template: round(poolCpuPart("template")),
      pool_cpu_ms_runs: round(poolCpuPart("runs")),
      pool_vs_bare_fork_cpu: round(bareCpu / poolCpuMsPerRun, 3),
      bare_handoff_code_per_s: round(median(perRound.map((r) => r.handoff.perS))),
      bare_handoff_cpu_ms_per_run: round(mean(perRound.map((r) => r.handoff.cpuMsPerRun))),
      bare_handoff_vs_bare_fork: round(median(perRound.map((r) => r.handoff.perS / same(r).perS)), 3),
      pool_vs_bare_handoff: round(median(perRound.map((r) => r.pool / r.handoff.perS)), 3),
      pool_template_loop: templateLoop,
      pool_python_loop_per_s: round(median(loopRounds.map((r) => r.python))),
      pool_python_loop_cpu_ms_per_run: round(mean(loopRounds.map((r) => cpuTotal(r.pythonCpu)))),
      pool_vs_python_loop_cpu: round(
        mean(loopRounds.map((r) => cpuTotal(r.pythonCpu))) /
          mean(loopRounds.map((r) => cpuTotal(r.nativeCpu))),
        3,
      ),
      pool_vs_python_loop: round(median(loopRounds.map((r) => r.native / r.python)), 3),
      pool_p50_ms: round(p50),
      pool_p99_ms: round(p99),
      http_per_s: round(http),
      http_clients: clients,
      target_pool_per_s_ge_50x_naive: pool >= 50 * naive,
      target_pool_p50_le_10ms: p50 <= 10,
    };
  } finally {
    await Promise.all([...started.map((p) => p.close()), ex.close()]);
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
 * `server_*_us` (cgroup limits, ending the run and reading its exit status), and the run child's
 * CPU (`zygote_cpu_*_ms`: at its start, ready, before and after the code, and in all as its parent
 * reaped it, so that the total less `zygote_cpu_after_exec_ms` is what its exit costs) and faults.
 */
export async function benchSandboxSteps(
  opts: { workers?: number; runs?: number; nativeTemplate?: boolean } = {},
  log: (line: string) => void = () => {},
): Promise<Record<string, number>> {
  const workers = opts.workers ?? Math.max(1, cpus().length);
  const runs = opts.runs ?? 100;
  const before = process.env.TORL_SANDBOX_TRACE;
  process.env.TORL_SANDBOX_TRACE = "1";
  const pool = Array.from(
    { length: workers },
    (_, i) =>
      new SandboxWorker({ name: `torl-${process.pid}-steps-${i}`, nativeTemplate: opts.nativeTemplate }),
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
    log(
      `steps: ${workers} workers with per-step timings, ${runs} runs each, all busy; template loop: ${pool[0]?.templateLoop}`,
    );
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
    "usage: pnpm torl bench sandbox [--json] [--workers N] [--runs 300] [--rounds 3] [--steps [--python-loop]]",
    "",
    "Runs print(sympy.factor(x**2-1)) with isolation on and reports:",
    "  naive_spawn_per_s  a fresh python3 process per run that imports sympy (N at a time): the baseline",
    "  pool_per_s         the same code through the warm pool (N workers, N in flight)",
    "  bare_fork_code_per_s  the ceiling: the pool's warm heap (pool_heap: huge or small pages) forking",
    "                     a child per run in a bare loop (no isolation, no IPC); bare_fork_exit_per_s:",
    "                     fork and exit alone; bare_fork_code_per_s_huge / _small: the loop with each heap",
    "  pool_p50_ms / pool_p99_ms  latency of one request at a time to an idle pool",
    "  http_per_s         through POST /run_code with 16 concurrent clients",
    "  pool_vs_bare_fork  pool_per_s / bare_fork_code_per_s: what the isolation and the IPC cost;",
    "                     pool_vs_best_bare_fork: against the faster heap's loop",
    "  pool_vs_bare_fork_cpu  the same in CPU per run (bare loop / pool), steadier on a loaded machine;",
    "                     pool_cpu_ms_node/_server/_template/_runs and bare_fork_code_cpu_ms_parent/",
    "                     _children split it by process",
    "  pool_vs_python_loop  pool_per_s over the same pool with its template loop and the run child's",
    "                     preparation in Python (nativeTemplate: false; pool_python_loop_per_s), in",
    "                     rounds of their own after the others; pool_vs_python_loop_cpu: the same in CPU",
    "  bare_handoff_code_per_s  the loop with the least hand-off any pool needs (the child forked before",
    "                     the code arrives, code in and output out through pipes, one process, no",
    "                     isolation); bare_handoff_vs_bare_fork: its share of the ceiling;",
    "                     pool_vs_bare_handoff: the pool against it",
    "The pool and the bare loops run in --rounds alternating rounds (--runs split between them; the",
    "order reversed every other round); throughputs and ratios are the rounds' medians.",
    "Targets: pool_per_s >= 50 x naive_spawn_per_s; pool_p50_ms <= 10; pool_vs_bare_fork >= 0.85.",
    "",
    "--steps: instead, the median cost of each isolation step per run (microseconds), busy workers",
    "with per-step timings on (TORL_SANDBOX_TRACE=1); --runs is then the runs per worker (default 100);",
    "--python-loop: the same with the template's loop and the run child's preparation in Python.",
  ].join("\n"),
  flags: {
    workers: { type: "integer", min: 1 },
    runs: { type: "integer", min: 1 },
    rounds: { type: "integer", min: 1 },
    steps: { type: "boolean" },
    "python-loop": { type: "boolean" },
  },
  /** With --steps the median cost of each isolation step, else the throughput figures. */
  measure(flags): Promise<Record<string, number> | SandboxBenchResult> {
    const workers = flags.workers ?? Math.max(1, cpus().length);
    const log = (line: string) => console.log(line);
    if (flags.rounds !== undefined && flags.steps) throw new UsageError("--rounds does not apply to --steps");
    if (flags["python-loop"] && !flags.steps) throw new UsageError("--python-loop applies to --steps only");
    if (flags.steps)
      return benchSandboxSteps(
        { workers, runs: flags.runs ?? 100, nativeTemplate: !flags["python-loop"] },
        log,
      );
    return benchSandbox({ workers, runs: flags.runs ?? 300, rounds: flags.rounds ?? 3 }, log);
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
    row(
      "pool_vs_bare_fork",
      result.pool_vs_bare_fork,
      `pool_per_s / bare_fork_code_per_s (target >= 0.85); rounds ${result.pool_vs_bare_fork_rounds.join(", ")}`,
    );
    row(
      "pool_vs_best_bare_fork",
      result.pool_vs_best_bare_fork,
      `against the faster heap's loop: huge ${result.bare_fork_code_per_s_huge ?? `- (${result.bare_fork_huge_unavailable})`}/s, small ${result.bare_fork_code_per_s_small}/s; the pool's heap: ${result.pool_heap}`,
    );
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
    row(
      "pool_vs_bare_handoff",
      result.pool_vs_bare_handoff,
      `against the least hand-off (${result.bare_handoff_code_per_s}/s, CPU ${result.bare_handoff_cpu_ms_per_run} ms per run), itself ${result.bare_handoff_vs_bare_fork} of the ceiling`,
    );
    row(
      "pool_vs_python_loop",
      result.pool_vs_python_loop,
      `the pool (template loop: ${result.pool_template_loop}) against the same pool with it in Python (${result.pool_python_loop_per_s}/s, CPU ${result.pool_python_loop_cpu_ms_per_run} ms per run; CPU ratio ${result.pool_vs_python_loop_cpu})`,
    );
    row("pool_p50_ms", result.pool_p50_ms, "target <= 10");
    row("pool_p99_ms", result.pool_p99_ms);
    row("http_per_s", result.http_per_s, `${round(result.http_per_s / result.naive_spawn_per_s, 1)}x naive`);
    row("isolation", result.isolation);
    row("page fault (us)", result.machine_page_fault_us);
  },
});
