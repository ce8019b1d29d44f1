/**
 * `pnpm torl bench reward [--json] [--alternatives]`: grading speed and accuracy over the labeled
 * corpus, side by side with the string-normalisation baseline measured in the same run.
 * Figures: verify_per_s (one thread, parse cache cleared every pass), accuracy; the manager's batch
 * throughput with worker threads; the scoring pool under tinypool vs piscina (pool_verify_per_s_*); with --alternatives, the same corpus with the mathjs and sympy
 * scalar stages in place of the numeric one.
 */
import { compareThreadPoolLibraries, ThreadPoolLibraryMissingError } from "@torl-ts/actors";
import { defineBench } from "@torl-ts/core/cli";
import { baselineEquivalent } from "../reward/baseline.js";
import { loadRewardCorpus, type RewardCorpusPair } from "../reward/corpus.js";
import { clearAnswerParseCache, isEquivalentAnswer, type ScalarStage } from "../reward/equivalence.js";
import { extractBoxedAnswer, groundTruthAnswer } from "../reward/extract.js";
import { RewardManager } from "../reward/manager.js";
import { MathScorePool, RewardPoolError } from "../reward/score-pool.js";
import { mathjsScalarStage, SympyOracle, withSympyStage } from "./reward-alternatives.js";

const USAGE = `usage: pnpm torl bench reward [--json] [--alternatives] [--seconds S]

Grades the labeled corpus this package ships (reward/corpus.jsonl) repeatedly for S seconds (default 2)
per grader and reports verifications per second and accuracy against the labels, next to the
string-normalisation baseline (the released ToRL grader's approach), the reward manager on a 4096-row
batch, and its scoring pool under each pool library (tinypool, piscina; medians of 3 alternating rounds,
per wall-clock and per CPU second, ratio_pool_piscina_vs_tinypool[_cpu]). --alternatives also measures the
mathjs and sympy symbolic stages on the same corpus. --json prints one JSON object as the last line.`;

type Grader = (pair: RewardCorpusPair) => boolean;

function verdicts(corpus: RewardCorpusPair[], grade: Grader): boolean[] {
  return corpus.map(grade);
}

function accuracyOf(corpus: RewardCorpusPair[], v: boolean[]): number {
  let ok = 0;
  corpus.forEach((p, i) => {
    if (v[i] === p.equal) ok++;
  });
  return ok / corpus.length;
}

/**
 * Verifications per second: whole passes over the corpus until `seconds` elapsed (at least two), per
 * wall-clock second and per CPU second of this process (the latter is steady when other jobs share
 * the cores).
 */
function throughput(
  corpus: RewardCorpusPair[],
  grade: Grader,
  seconds: number,
): { wall: number; cpu: number } {
  let n = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  while (performance.now() - t0 < seconds * 1000 || n < 2 * corpus.length) {
    clearAnswerParseCache();
    for (const p of corpus) grade(p);
    n += corpus.length;
  }
  const cpu = process.cpuUsage(c0);
  return { wall: n / ((performance.now() - t0) / 1000), cpu: n / ((cpu.user + cpu.system) / 1e6) };
}

const ours =
  (stage?: ScalarStage): Grader =>
  (p) => {
    const a = extractBoxedAnswer(p.solution);
    return a !== null && isEquivalentAnswer(a, groundTruthAnswer(p.ground_truth), stage);
  };

const baseline: Grader = (p) => {
  const a = extractBoxedAnswer(p.solution);
  return a !== null && baselineEquivalent(a, groundTruthAnswer(p.ground_truth));
};

function perCategory(corpus: RewardCorpusPair[], v: boolean[]): Map<string, [number, number]> {
  const m = new Map<string, [number, number]>();
  corpus.forEach((p, i) => {
    const e = m.get(p.category) ?? [0, 0];
    e[1]++;
    if (v[i] === p.equal) e[0]++;
    m.set(p.category, e);
  });
  return m;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * The scoring pool's job (the 4096-row batch on 2 threads, pools warm) under each pool library:
 * verifications per second, medians of 3 alternating rounds, and the ratio piscina/tinypool. Without
 * piscina installed (it is a development dependency) the comparison is left out, saying so.
 */
async function comparePoolLibraries(rows: RewardCorpusPair[]): Promise<Record<string, number>> {
  const inputs = rows.map((p) => ({
    solution: p.solution,
    groundTruth: p.ground_truth,
    dataSource: p.category,
  }));
  const options = {
    rewardType: "default",
    executionErrorPenalty: false,
    executionPenaltyValue: 0.5,
  } as const;
  const pools = { tinypool: new MathScorePool(2, "tinypool"), piscina: new MathScorePool(2, "piscina") };
  try {
    for (const pool of Object.values(pools)) for (let i = 0; i < 3; i++) await pool.score(inputs, options);
    const c = await compareThreadPoolLibraries(async (library) => {
      for (let i = 0; i < 2; i++) await pools[library].score(inputs, options);
      return 2 * inputs.length;
    });
    return {
      pool_verify_per_s_tinypool: Math.round(c.tinypool.perS),
      pool_verify_per_s_piscina: Math.round(c.piscina.perS),
      pool_verify_per_cpu_s_tinypool: Math.round(c.tinypool.perCpuS),
      pool_verify_per_cpu_s_piscina: Math.round(c.piscina.perCpuS),
      ratio_pool_piscina_vs_tinypool: r3(c.ratio),
      ratio_pool_piscina_vs_tinypool_cpu: r3(c.cpuRatio),
    };
  } catch (e) {
    const missing = e instanceof RewardPoolError && e.cause instanceof ThreadPoolLibraryMissingError;
    if (!(e instanceof ThreadPoolLibraryMissingError) && !missing) throw e;
    console.log(`pool library comparison left out: ${(e as Error).message}`);
    return {};
  } finally {
    await Promise.all(Object.values(pools).map((p) => p.close()));
  }
}

export const benchRewardCommand = defineBench({
  summary: "benchmark answer verification: speed and accuracy on the labeled corpus",
  usage: USAGE,
  flags: {
    alternatives: { type: "boolean" },
    seconds: { type: "number", min: 0.01 },
  },
  /** The figures, and the tables a reader sees: speed and accuracy per grader, accuracy per category. */
  async measure(flags) {
    const alternatives = flags.alternatives ?? false;
    const seconds = flags.seconds ?? 2;
    const corpus = loadRewardCorpus();
    console.log(`corpus: ${corpus.length} labeled pairs`);

    const ourVerdicts = verdicts(corpus, ours());
    const baseVerdicts = verdicts(corpus, baseline);
    const accuracy = accuracyOf(corpus, ourVerdicts);
    const accuracyBaseline = accuracyOf(corpus, baseVerdicts);
    console.log("measuring verify_per_s (one thread) ...");
    const verifyPerS = throughput(corpus, ours(), seconds);
    console.log("measuring baseline ...");
    const baselinePerS = throughput(corpus, baseline, seconds);

    // The manager on a training-sized batch: 16 responses per prompt, 2 worker threads vs this thread.
    console.log("measuring the reward manager on a 4096-row batch ...");
    const rows = Array.from({ length: 4096 }, (_, i) => corpus[i % corpus.length]!);
    const batch = {
      responses: rows.map((p) => p.solution),
      groundTruths: rows.map((p) => p.ground_truth),
      dataSources: rows.map((p) => p.category),
    };
    // Steady state: threads started, code compiled, parse caches warm on both sides (in training the
    // manager lives for the whole run and ground truths repeat n times per prompt).
    const timeManager = async (m: RewardManager) => {
      for (let i = 0; i < 3; i++) await m.score(batch);
      const t0 = performance.now();
      for (let i = 0; i < 2; i++) await m.score(batch);
      return (2 * rows.length) / ((performance.now() - t0) / 1000);
    };
    const threaded = new RewardManager({ numThreads: 2, parallelThreshold: 1 });
    const managerThreadsPerS = await timeManager(threaded);
    await threaded.close();
    const managerInlinePerS = await timeManager(new RewardManager({ numThreads: 0 }));
    console.log("measuring the scoring pool under tinypool vs piscina (3 alternating rounds) ...");
    const poolLibraries = await comparePoolLibraries(rows);

    const figures: Record<string, number> = {
      verify_per_s: Math.round(verifyPerS.wall),
      verify_per_s_baseline: Math.round(baselinePerS.wall),
      verify_per_cpu_s: Math.round(verifyPerS.cpu),
      verify_per_cpu_s_baseline: Math.round(baselinePerS.cpu),
      accuracy: r3(accuracy),
      accuracy_baseline: r3(accuracyBaseline),
      manager_verify_per_s_2threads: Math.round(managerThreadsPerS),
      manager_verify_per_s_1thread: Math.round(managerInlinePerS),
      ...poolLibraries,
      corpus_pairs: corpus.length,
    };

    const table: [string, number, number][] = [
      ["numeric identity test (ours)", verifyPerS.wall, accuracy],
      ["string normalisation (baseline)", baselinePerS.wall, accuracyBaseline],
    ];
    if (alternatives) {
      console.log("measuring the mathjs stage ...");
      const mj = await mathjsScalarStage();
      const mjVerdicts = verdicts(corpus, ours(mj));
      const mjPerS = throughput(corpus, ours(mj), seconds);
      figures.accuracy_mathjs = r3(accuracyOf(corpus, mjVerdicts));
      figures.verify_per_s_mathjs = Math.round(mjPerS.wall);
      figures.verify_per_cpu_s_mathjs = Math.round(mjPerS.cpu);
      table.push(["mathjs simplify/evaluate", mjPerS.wall, figures.accuracy_mathjs]);

      console.log("measuring the sympy stage (warm python3 process) ...");
      const oracle = new SympyOracle();
      const t0 = performance.now();
      await oracle.ready;
      const startS = (performance.now() - t0) / 1000;
      const t1 = performance.now();
      const { result: spVerdicts, pairs } = await withSympyStage(oracle, (stage) =>
        verdicts(corpus, ours(stage)),
      );
      const wallS = (performance.now() - t1) / 1000;
      oracle.close();
      figures.accuracy_sympy = r3(accuracyOf(corpus, spVerdicts));
      // Per-verification cost: our passes plus every sympy call once.
      figures.verify_per_s_sympy = Math.round(
        corpus.length / (corpus.length / verifyPerS.wall + oracle.sympySeconds),
      );
      figures.sympy_pairs = pairs;
      figures.sympy_ms_per_pair = r3((oracle.sympySeconds * 1000) / Math.max(1, pairs));
      figures.sympy_start_s = r3(startS);
      figures.sympy_wall_s = r3(wallS);
      table.push(["sympy simplify (warm process)", figures.verify_per_s_sympy, figures.accuracy_sympy]);
    }

    const categories = {
      ours: perCategory(corpus, ourVerdicts),
      baseline: perCategory(corpus, baseVerdicts),
    };
    return { figures, table, categories };
  },
  show({ figures, table, categories }) {
    console.log("\ngrader                              verify/s   accuracy");
    for (const [name, perS, acc] of table) {
      console.log(`${name.padEnd(34)} ${String(Math.round(perS)).padStart(9)}   ${acc.toFixed(3)}`);
    }
    console.log("\ncategory               pairs   ours   baseline");
    for (const [cat, [ok, n]] of categories.ours) {
      const b = categories.baseline.get(cat)!;
      console.log(
        `${cat.padEnd(22)} ${String(n).padStart(5)}  ${(ok / n).toFixed(3)}  ${(b[0] / n).toFixed(3)}`,
      );
    }
    console.log(
      `\nmanager, 4096 rows: ${figures.manager_verify_per_s_2threads}/s with 2 threads, ${figures.manager_verify_per_s_1thread}/s in one`,
    );
    if (figures.pool_verify_per_s_tinypool !== undefined)
      console.log(
        `scoring pool, 2 threads: ${figures.pool_verify_per_s_tinypool}/s under tinypool, ${figures.pool_verify_per_s_piscina}/s under piscina (ratio ${figures.ratio_pool_piscina_vs_tinypool}; per CPU second ${figures.ratio_pool_piscina_vs_tinypool_cpu})`,
      );
  },
  toJson: (result) => result.figures,
});
