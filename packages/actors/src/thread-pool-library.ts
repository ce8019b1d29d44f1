/**
 * The pool library under ThreadPool: tinypool or piscina, two worker-thread pools with the same shape
 * (piscina's API, which tinypool forked). tinypool is a dependency; piscina, a development dependency. `pnpm torl bench pool` and `pnpm torl bench reward` measure
 * both on the same work in one run; the package README has the figures and the choice.
 */
import { createRequire } from "node:module";
import Tinypool from "tinypool";

export type ThreadPoolLibrary = "tinypool" | "piscina";

/** The library ThreadPool uses unless told otherwise (the one that won its job in the benches). */
export const DEFAULT_THREAD_POOL_LIBRARY: ThreadPoolLibrary = "tinypool";

/** The options both libraries take alike. */
export interface PoolEngineOptions {
  filename: string;
  threads: number;
  workerData: unknown;
  resourceLimits?: {
    maxOldGenerationSizeMb?: number;
    maxYoungGenerationSizeMb?: number;
    stackSizeMb?: number;
  };
}

export interface PoolEngine {
  run(
    task: unknown,
    opts: { name: string; transferList?: unknown[]; signal: AbortSignal | null },
  ): Promise<unknown>;
  readonly threads: readonly unknown[];
  readonly completed: number;
  destroy(): Promise<void>;
}

/** The library asked for is not installed (piscina is a development dependency, used by the benches). */
export class ThreadPoolLibraryMissingError extends Error {
  override name = "ThreadPoolLibraryMissingError";
  constructor(
    readonly library: ThreadPoolLibrary,
    cause: unknown,
  ) {
    super(
      `thread pool library ${library} is not installed (${(cause as Error)?.message ?? cause}); add it with \`pnpm add ${library}\` or use the default (${DEFAULT_THREAD_POOL_LIBRARY})`,
    );
  }
}

type PoolClass = new (options: Record<string, unknown>) => PoolEngine;

const requireHere = createRequire(import.meta.url);

/** piscina is CommonJS, so it loads synchronously when it is there and fails by name when it is not. */
function poolClass(library: ThreadPoolLibrary): PoolClass {
  if (library === "tinypool") return Tinypool as unknown as PoolClass;
  try {
    return requireHere("piscina") as PoolClass;
  } catch (e) {
    throw new ThreadPoolLibraryMissingError(library, e);
  }
}

/** Starts a pool of `threads` fixed threads with `library`. */
export function openPoolEngine(library: ThreadPoolLibrary, o: PoolEngineOptions): PoolEngine {
  const Pool = poolClass(library);
  return new Pool({
    filename: o.filename,
    minThreads: o.threads,
    maxThreads: o.threads,
    // capacity is ThreadPool's business (typed error or waiting); the library's own queue is unbounded
    maxQueue: Number.POSITIVE_INFINITY,
    // tinypool hands a thread [its own data, ours]; piscina hands ours as it is: same shape for both
    workerData: library === "piscina" ? [null, o.workerData] : o.workerData,
    resourceLimits: o.resourceLimits,
  });
}

/** One measurement of a job: work done per wall-clock second and per CPU second of this process (all threads). */
export interface PoolJobRate {
  perS: number;
  perCpuS: number;
}

/** Both libraries on one job: medians over the rounds, and the ratios piscina / tinypool. */
export interface ThreadPoolLibraryComparison {
  tinypool: PoolJobRate;
  piscina: PoolJobRate;
  /** Median of each round's piscina/tinypool ratio of work per wall-clock second (both back to back). */
  ratio: number;
  /** The same for work per CPU second: steadier than wall time when other jobs share the cores. */
  cpuRatio: number;
  rounds: number;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/**
 * Runs `job(library)` for both libraries, `rounds` times, the order alternating each round so both see
 * the same machine load on average, timing each run by the wall clock and by this process's CPU time
 * (`job` returns how much work it did). On a loaded machine the ratios are the figures to trust.
 */
export async function compareThreadPoolLibraries(
  job: (library: ThreadPoolLibrary) => Promise<number>,
  rounds = 3,
): Promise<ThreadPoolLibraryComparison> {
  if (!Number.isInteger(rounds) || rounds < 1)
    throw new RangeError(`rounds must be an integer >= 1, got ${rounds}`);
  const rates: Record<ThreadPoolLibrary, PoolJobRate[]> = { tinypool: [], piscina: [] };
  for (let r = 0; r < rounds; r++) {
    const order: ThreadPoolLibrary[] = r % 2 === 0 ? ["tinypool", "piscina"] : ["piscina", "tinypool"];
    for (const library of order) {
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      const work = await job(library);
      const cpu = process.cpuUsage(c0);
      rates[library].push({
        perS: work / ((performance.now() - t0) / 1000),
        perCpuS: work / ((cpu.user + cpu.system) / 1e6),
      });
    }
  }
  const summary = (xs: PoolJobRate[]): PoolJobRate => ({
    perS: median(xs.map((x) => x.perS)),
    perCpuS: median(xs.map((x) => x.perCpuS)),
  });
  const ratios = (key: keyof PoolJobRate) =>
    median(rates.piscina.map((p, i) => p[key] / rates.tinypool[i]![key]));
  return {
    tinypool: summary(rates.tinypool),
    piscina: summary(rates.piscina),
    ratio: ratios("perS"),
    cpuRatio: ratios("perCpuS"),
    rounds,
  };
}
