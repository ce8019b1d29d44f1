import { spawn } from "node:child_process";
import { cpus } from "node:os";
import { performance } from "node:perf_hooks";
import { type CliCommand, UsageError } from "@torl-ts/core";
import { intFlag, parseFlags } from "./cli.js";
import { SandboxExecutor } from "./executor.js";
import { resolvePython } from "./python.js";
import { serveSandbox } from "./server.js";

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

export interface SandboxBenchResult {
  workers: number;
  /** Cost of one page fault on this machine (context: the pool's floor is page-table work). */
  machine_page_fault_us: number;
  isolation: string;
  naive_spawn_per_s: number;
  pool_per_s: number;
  pool_speedup_vs_naive: number;
  pool_p50_ms: number;
  pool_p99_ms: number;
  http_per_s: number;
  http_clients: number;
  target_pool_per_s_ge_50x_naive: boolean;
  target_pool_p50_le_10ms: boolean;
}

export async function benchSandbox(
  opts: { workers?: number; runs?: number; naiveRuns?: number; latencyRuns?: number } = {},
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
    const pool = await throughput(runs, workers, check);
    log(`  pool_per_s ${round(pool)}`);

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

export const benchSandboxCommand: CliCommand = {
  summary: "benchmark the sandbox: naive spawn vs warm pool vs HTTP API",
  usage: [
    "usage: pnpm torl bench sandbox [--json] [--workers N] [--runs 300]",
    "",
    "Runs print(sympy.factor(x**2-1)) with isolation on and reports:",
    "  naive_spawn_per_s  a fresh python3 process per run that imports sympy (N at a time): the baseline",
    "  pool_per_s         the same code through the warm pool (N workers, N in flight)",
    "  pool_p50_ms / pool_p99_ms  latency of one request at a time to an idle pool",
    "  http_per_s         through POST /run_code with 16 concurrent clients",
    "Targets: pool_per_s >= 50 x naive_spawn_per_s; pool_p50_ms <= 10.",
  ].join("\n"),
  async run(args) {
    const flags = parseFlags(args, ["json", "workers", "runs"]);
    const json = flags.has("json");
    const workers = intFlag(flags, "workers", Math.max(1, cpus().length), 1);
    const runs = intFlag(flags, "runs", 300, 1);
    if (flags.get("json") !== undefined && flags.get("json") !== "true")
      throw new UsageError("--json takes no value");
    const result = await benchSandbox({ workers, runs }, (line) => console.log(line));
    console.log("");
    console.log(`figure              value     baseline (same run)`);
    console.log(`naive_spawn_per_s   ${String(result.naive_spawn_per_s).padEnd(9)} -`);
    console.log(
      `pool_per_s          ${String(result.pool_per_s).padEnd(9)} ${result.pool_speedup_vs_naive}x naive (target >= 50x)`,
    );
    console.log(`pool_p50_ms         ${String(result.pool_p50_ms).padEnd(9)} target <= 10`);
    console.log(`pool_p99_ms         ${String(result.pool_p99_ms).padEnd(9)}`);
    console.log(
      `http_per_s          ${String(result.http_per_s).padEnd(9)} ${round(result.http_per_s / result.naive_spawn_per_s, 1)}x naive`,
    );
    console.log(`isolation           ${result.isolation}`);
    console.log(`page fault (us)     ${result.machine_page_fault_us}`);
    if (json) console.log(JSON.stringify(result));
    return 0;
  },
};
