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

/** Rates (higher is better) of the two libraries on one job, and their ratio. */
export interface ThreadPoolLibraryComparison {
  /** Median over the rounds. */
  tinypool: number;
  piscina: number;
  /** piscina / tinypool: the median of each round's ratio (both measured back to back in a round). */
  ratio: number;
  rounds: number;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/**
 * Measures `measure(library)` (a rate: higher is better) for both libraries, `rounds` times, the
 * order alternating each round so both see the same machine load on average. On a loaded machine the
 * ratio is the figure to trust; the rates move with the load.
 */
export async function compareThreadPoolLibraries(
  measure: (library: ThreadPoolLibrary) => Promise<number>,
  rounds = 3,
): Promise<ThreadPoolLibraryComparison> {
  if (!Number.isInteger(rounds) || rounds < 1)
    throw new RangeError(`rounds must be an integer >= 1, got ${rounds}`);
  const rates: Record<ThreadPoolLibrary, number[]> = { tinypool: [], piscina: [] };
  const ratios: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const order: ThreadPoolLibrary[] = r % 2 === 0 ? ["tinypool", "piscina"] : ["piscina", "tinypool"];
    for (const library of order) rates[library].push(await measure(library));
    ratios.push(rates.piscina[r]! / rates.tinypool[r]!);
  }
  return { tinypool: median(rates.tinypool), piscina: median(rates.piscina), ratio: median(ratios), rounds };
}
