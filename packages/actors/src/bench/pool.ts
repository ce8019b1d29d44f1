/**
 * `pnpm torl bench pool [--json] [--seconds S]`: ThreadPool's job under each pool library, tinypool and
 * piscina, measured on the same work in one run: many tiny tasks (the per-task cost of the pool) and
 * fewer CPU-heavy ones (the work itself). Each figure is tasks per second (wall clock, and CPU time of
 * the process) on a 2-thread pool; the two libraries run back to back in each of 3 rounds, in
 * alternating order, and each ratio piscina/tinypool is the median of the rounds' ratios.
 */
import { siblingModule } from "@torl-ts/core";
import { defineBench } from "@torl-ts/core/cli";
import { ThreadPool } from "../thread-pool.js";
import { compareThreadPoolLibraries, type ThreadPoolLibrary } from "../thread-pool-library.js";

const TASK = siblingModule(import.meta.url, "./pool-task");

const USAGE = `usage: pnpm torl bench pool [--json] [--seconds S]

ThreadPool (2 threads) under tinypool and under piscina on the same work, 3 alternating rounds of about S
seconds (default 1) per library and job: tiny_tasks (primes below 200, the pool's own cost per task) and
cpu_tasks (primes below 60,000, a few ms each), each per wall-clock second and per CPU second of the
process, with the ratios piscina/tinypool (ratio_piscina_vs_tinypool_<job>[_cpu]).
--json prints one JSON object as the last line.`;

/** The jobs measured: task argument and how many tasks are in flight at once. */
const JOBS = { tiny: { n: 200, batch: 2000 }, cpu: { n: 60_000, batch: 16 } } as const;

/**
 * Runs `job` on a fresh 2-thread pool of `library` for about `seconds` (after a warm-up batch, not
 * counted: threads started, code compiled); returns the tasks done. Creating the pool and the warm-up
 * count in the CPU and wall time of compareThreadPoolLibraries, alike for both libraries.
 */
async function tasksRun(
  library: ThreadPoolLibrary,
  job: keyof typeof JOBS,
  seconds: number,
): Promise<number> {
  const { n, batch } = JOBS[job];
  const pool = new ThreadPool<number, number>({ filename: TASK, size: 2, library });
  try {
    const run = () => Promise.all(Array.from({ length: batch }, () => pool.run(n, { name: "countPrimes" })));
    await run();
    let done = batch;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) {
      await run();
      done += batch;
    }
    return done;
  } finally {
    await pool.close();
  }
}

export const benchPoolCommand = defineBench({
  summary: "ThreadPool under tinypool vs piscina on the same work (tasks/s, 3 alternating rounds)",
  usage: USAGE,
  flags: { seconds: { type: "number", min: 0.05 } },
  async measure(flags) {
    const seconds = flags.seconds ?? 1;
    const figures: Record<string, number> = {};
    for (const job of ["tiny", "cpu"] as const) {
      console.error(`${job} tasks: tinypool vs piscina, 3 alternating rounds ...`);
      const c = await compareThreadPoolLibraries((library) => tasksRun(library, job, seconds));
      figures[`${job}_tasks_per_s_tinypool`] = Math.round(c.tinypool.perS);
      figures[`${job}_tasks_per_s_piscina`] = Math.round(c.piscina.perS);
      figures[`${job}_tasks_per_cpu_s_tinypool`] = Math.round(c.tinypool.perCpuS);
      figures[`${job}_tasks_per_cpu_s_piscina`] = Math.round(c.piscina.perCpuS);
      figures[`ratio_piscina_vs_tinypool_${job}`] = Math.round(c.ratio * 1000) / 1000;
      figures[`ratio_piscina_vs_tinypool_${job}_cpu`] = Math.round(c.cpuRatio * 1000) / 1000;
    }
    return figures;
  },
  show(figures) {
    const rows = Object.entries(figures).map(([k, v]) => `  ${k.padEnd(36)} ${String(v).padStart(10)}`);
    console.log(["thread pool benchmark (tasks/s, medians of 3 rounds)", ...rows].join("\n"));
  },
});
