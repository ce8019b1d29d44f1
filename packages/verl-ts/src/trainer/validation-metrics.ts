/**
 * Validation metrics over several samples per prompt (rollout.val_kwargs.n = N), with veRL's names
 * (process_validation_metrics and the trainer's grouping):
 *
 *   val-core/<data_source>/<var>/<metric>   the core variable (acc) at N: mean@N, best@N/mean and /std,
 *                                           maj@N/mean and /std, pass@N
 *   val-aux/<data_source>/<var>/<metric>    everything else
 *
 * Variables per sample: `acc` (1 correct, 0 not), `reward` (the sequence score); `pred` (the extracted
 * answer) is the vote of maj@n. Per prompt (its N samples), for var x:
 *   mean@N, std@N (population std)                      over the N values;
 *   best@n/mean, best@n/std, worst@n/mean, worst@n/std  mean and std of max / min over 1000 bootstrap
 *                                                       draws of n values with replacement;
 *   maj@n/mean, maj@n/std                               the same for the value of the first sample whose
 *                                                       pred is the most common in the draw;
 * for n in 2, 4, 8, ... below N, and N. Each is then averaged over the prompts of the data source. The
 * draws use a seeded generator (seed 42), so the figures are deterministic; they are not numpy's draws.
 *
 * Also pass@k for acc (k in the same list): the unbiased estimator 1 - C(N-c, k) / C(N, k) with c the
 * correct samples of the prompt, averaged over prompts; and veRL's older `val/test_score/<data_source>`,
 * the mean sequence score.
 */
import { mulberry32 } from "../random.js";

/** One validation sample: its prompt (uid), source, verdict, score and extracted answer. */
export interface ValidationSample {
  uid: string;
  dataSource: string;
  acc: boolean;
  reward: number;
  pred: string | null;
}

const N_BOOTSTRAP = 1000;

/** 2, 4, 8, ... below n, then n (none for n <= 1). */
export function bootstrapSizes(n: number): number[] {
  if (n <= 1) return [];
  const out: number[] = [];
  for (let k = 2; k < n; k *= 2) out.push(k);
  out.push(n);
  return out;
}

function mean(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

function std(xs: number[]): number {
  const m = mean(xs);
  return Math.sqrt(mean(xs.map((x) => (x - m) ** 2)));
}

/** Mean and std of `reduce` over bootstrap draws of `size` indices from [0, n). */
function bootstrap(
  n: number,
  size: number,
  reduce: (idx: number[]) => number,
  seed: number,
): [number, number] {
  const rng = mulberry32(seed);
  const results: number[] = [];
  for (let b = 0; b < N_BOOTSTRAP; b++) {
    const idx = Array.from({ length: size }, () => Math.floor(rng() * n));
    results.push(reduce(idx));
  }
  return [mean(results), std(results)];
}

/** The value of the first sample whose vote is the most common among `idx` (ties: the first seen). */
function majorityValue(idx: number[], votes: string[], values: number[]): number {
  const count = new Map<string, number>();
  const first = new Map<string, number>();
  for (const i of idx) {
    count.set(votes[i]!, (count.get(votes[i]!) ?? 0) + 1);
    if (!first.has(votes[i]!)) first.set(votes[i]!, values[i]!);
  }
  let best = "";
  let bestCount = -1;
  for (const [v, c] of count) {
    if (c > bestCount) {
      best = v;
      bestCount = c;
    }
  }
  return first.get(best)!;
}

/** C(n - c, k) / C(n, k): the chance that k of n samples, drawn without replacement, miss all c correct ones. */
function allMiss(n: number, c: number, k: number): number {
  if (n - c < k) return 0;
  let p = 1;
  for (let i = 0; i < k; i++) p *= (n - c - i) / (n - i);
  return p;
}

/** Per-prompt metrics of one variable. */
function promptMetrics(values: number[], votes: string[], seed: number): Record<string, number> {
  const n = values.length;
  const out: Record<string, number> = { [`mean@${n}`]: mean(values) };
  if (n <= 1) return out;
  out[`std@${n}`] = std(values);
  for (const k of bootstrapSizes(n)) {
    const [bestMean, bestStd] = bootstrap(n, k, (idx) => Math.max(...idx.map((i) => values[i]!)), seed);
    const [worstMean, worstStd] = bootstrap(n, k, (idx) => Math.min(...idx.map((i) => values[i]!)), seed);
    const [majMean, majStd] = bootstrap(n, k, (idx) => majorityValue(idx, votes, values), seed);
    Object.assign(out, {
      [`best@${k}/mean`]: bestMean,
      [`best@${k}/std`]: bestStd,
      [`worst@${k}/mean`]: worstMean,
      [`worst@${k}/std`]: worstStd,
      [`maj@${k}/mean`]: majMean,
      [`maj@${k}/std`]: majStd,
    });
  }
  return out;
}

/** veRL's val-core / val-aux metrics, pass@k and val/test_score per data source. */
export function computeMultiSampleValidationMetrics(
  samples: ValidationSample[],
  seed = 42,
): Record<string, number> {
  const bySource = new Map<string, Map<string, ValidationSample[]>>();
  for (const s of samples) {
    const prompts = bySource.get(s.dataSource) ?? new Map<string, ValidationSample[]>();
    const group = prompts.get(s.uid) ?? [];
    group.push(s);
    prompts.set(s.uid, group);
    bySource.set(s.dataSource, prompts);
  }
  const out: Record<string, number> = {};
  for (const [source, prompts] of [...bySource].sort(([a], [b]) => a.localeCompare(b))) {
    const sums: Record<string, Record<string, number[]>> = { acc: {}, reward: {} };
    let nMax = 0;
    for (const group of prompts.values()) {
      nMax = Math.max(nMax, group.length);
      const votes = group.map((s) => String(s.pred));
      const accs: number[] = group.map((s) => (s.acc ? 1 : 0));
      const vars = { acc: accs, reward: group.map((s) => s.reward) };
      for (const [name, values] of Object.entries(vars)) {
        const m = promptMetrics(values, votes, seed);
        const c = accs.reduce((a, b) => a + b, 0);
        if (name === "acc")
          for (const k of bootstrapSizes(group.length).concat(group.length === 1 ? [1] : []))
            m[`pass@${k}`] = 1 - allMiss(group.length, c, k);
        for (const [metric, v] of Object.entries(m)) (sums[name]![metric] ??= []).push(v);
      }
    }
    for (const [name, metrics] of Object.entries(sums)) {
      for (const [metric, vs] of Object.entries(metrics)) {
        const core =
          name === "acc" && /^(mean|maj|best|pass)/.test(metric) && new RegExp(`@${nMax}(/|$)`).test(metric);
        out[`${core ? "val-core" : "val-aux"}/${source}/${name}/${metric}`] = mean(vs);
      }
    }
    const scores = [...prompts.values()].flat().map((s) => s.reward);
    out[`val/test_score/${source}`] = mean(scores);
  }
  return out;
}
