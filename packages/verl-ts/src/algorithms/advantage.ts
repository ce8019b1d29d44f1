import {
  AlgorithmInputError,
  dims2,
  type MaskMatrix,
  maskedWhiten,
  type ScoreMatrix,
  sameShape,
} from "./masked.js";
import {
  type AlgorithmRequirements,
  checkRegistryFunction,
  checkRegistryName,
  checkRequirements,
} from "./requirements.js";

/** What every advantage estimator receives. Matrices are [batch, responseLength]. */
export interface AdvantageInput {
  /** Per-token rewards (scores, minus an in-reward KL penalty when enabled). */
  tokenLevelRewards: ScoreMatrix;
  /** 1 for response tokens that count (observation and padding tokens are 0). */
  responseMask: MaskMatrix;
  /** Group id per row (veRL's `uid`): rows from the same prompt share it. Needed by GRPO/RLOO. */
  index?: readonly (string | number)[];
  /** Critic values per token (GAE). */
  values?: ScoreMatrix;
  /** Discount (GAE, REINFORCE++). Default 1. */
  gamma?: number;
  /** GAE lambda. Default 1. */
  lam?: number;
  /** GRPO: divide by the group std (true, default) or only subtract the mean (Dr.GRPO). */
  normAdvByStdInGrpo?: boolean;
  /** GRPO std epsilon. Default 1e-6. */
  epsilon?: number;
  /** ReMax: the score of the greedy response to each row's prompt, per row. */
  rewardBaselines?: ArrayLike<number>;
}

export interface AdvantageOutput {
  advantages: ScoreMatrix;
  returns: ScoreMatrix;
}

export type AdvantageEstimator = (input: AdvantageInput) => AdvantageOutput;

interface EstimatorEntry {
  fn: AdvantageEstimator;
  requires: AlgorithmRequirements;
}

const estimators = new Map<string, EstimatorEntry>();

/**
 * Registers an estimator under `algorithm.adv_estimator` name `name` (replacing one of that name).
 * `requires` declares what it needs of the run (responses per prompt, a critic, a greedy baseline):
 * the config checker refuses a run without it and the trainer provides it.
 */
export function registerAdvantageEstimator(
  name: string,
  fn: AdvantageEstimator,
  requires: AlgorithmRequirements = {},
): void {
  const where = `registerAdvantageEstimator(${JSON.stringify(name) ?? String(name)})`;
  checkRegistryName(name, "registerAdvantageEstimator");
  checkRegistryFunction(fn, where, "the estimator");
  estimators.set(name, { fn, requires: checkRequirements(requires, where) });
}

/** The estimator registered as `name`; an unknown name is an error listing the known ones. */
export function getAdvantageEstimator(name: string): AdvantageEstimator {
  const entry = estimators.get(name);
  if (!entry) {
    throw new AlgorithmInputError(
      `unknown advantage estimator "${name}" (known: ${[...estimators.keys()].sort().join(", ")})`,
    );
  }
  return entry.fn;
}

/** What the estimator registered as `name` needs of the run; undefined when no estimator has that name. */
export function advantageEstimatorRequirements(name: string): AlgorithmRequirements | undefined {
  const entry = estimators.get(name);
  return entry && { ...entry.requires };
}

export function listAdvantageEstimators(): string[] {
  return [...estimators.keys()].sort();
}

/**
 * Runs the estimator named `name` and checks its answer: advantages and returns of the rewards' shape,
 * finite wherever the response mask is set (a NaN there would train on NaN, every update skipped).
 */
export function computeAdvantage(name: string, input: AdvantageInput): AdvantageOutput {
  const out = getAdvantageEstimator(name)(input) as unknown;
  const who = `advantage estimator "${name}" (algorithm.adv_estimator)`;
  if (out !== null && typeof (out as { then?: unknown })?.then === "function")
    throw new AlgorithmInputError(
      `${who} returned a Promise; an estimator must be synchronous and return {advantages, returns}`,
    );
  if (out === null || typeof out !== "object")
    throw new AlgorithmInputError(`${who} returned ${String(out)}; expected {advantages, returns}`);
  const shape = input.tokenLevelRewards.shape;
  const mask = input.responseMask.data;
  for (const key of ["advantages", "returns"] as const) {
    const m = (out as Record<string, unknown>)[key] as { data?: unknown; shape?: unknown } | undefined;
    if (
      !m ||
      !(m.data instanceof Float32Array || m.data instanceof Float64Array) ||
      !Array.isArray(m.shape) ||
      m.shape.length !== shape.length ||
      m.shape.some((d, i) => d !== shape[i]) ||
      m.data.length !== input.tokenLevelRewards.data.length
    )
      throw new AlgorithmInputError(
        `${who} returned ${key} that is not a [${shape.join(", ")}] matrix ({data: Float32Array, shape}) like the rewards`,
      );
    const data = m.data;
    for (let i = 0; i < data.length; i++) {
      if (Number(mask[i]) !== 0 && !Number.isFinite(data[i]!)) {
        const T = shape[1] ?? data.length;
        throw new AlgorithmInputError(
          `${who} returned a non-finite value in ${key} (${data[i]} at row ${Math.floor(i / T)}, token ${i % T}, a response token); check the estimator and the scores it got`,
        );
      }
    }
  }
  return out as AdvantageOutput;
}

function rowSums(r: ScoreMatrix): Float64Array {
  const [B, T] = dims2(r, "tokenLevelRewards");
  const out = new Float64Array(B);
  for (let b = 0; b < B; b++) {
    let s = 0;
    for (let t = 0; t < T; t++) s += r.data[b * T + t]!;
    out[b] = s;
  }
  return out;
}

function groupsOf(
  index: readonly (string | number)[] | undefined,
  B: number,
  who: string,
): Map<string | number, number[]> {
  if (!index) throw new AlgorithmInputError(`${who} needs "index" (the group id of every row)`);
  if (index.length !== B)
    throw new AlgorithmInputError(`${who}: index has ${index.length} entries for ${B} rows`);
  const g = new Map<string | number, number[]>();
  index.forEach((id, i) => {
    const rows = g.get(id);
    if (rows) rows.push(i);
    else g.set(id, [i]);
  });
  return g;
}

/** Broadcasts one value per row over the row's tokens, times the mask. */
function broadcastRows(perRow: Float64Array, mask: MaskMatrix, T: number): ScoreMatrix {
  const B = perRow.length;
  const out = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) out[b * T + t] = perRow[b]! * (mask.data[b * T + t] as number);
  }
  return { data: out, shape: [B, T] };
}

/** What an outcome estimator sees of the batch: each row's score (sum_t r_t), the mask, its sizes. */
interface OutcomeBatch {
  scores: Float64Array;
  mask: MaskMatrix;
  B: number;
  T: number;
}

/** Sets `adv[i]` for the rows of one group (rows sharing an index). */
type GroupRule = (rows: number[], adv: Float64Array, id: string | number) => void;

/**
 * The shared part of the outcome estimators: checks the shapes, scores every row, and lets the rule
 * the estimator builds from the batch set one advantage per row, group by group.
 */
function groupAdvantages(
  input: AdvantageInput,
  estimator: string,
  rule: (batch: OutcomeBatch) => GroupRule,
): { adv: Float64Array; batch: OutcomeBatch } {
  const { tokenLevelRewards: r, responseMask: mask } = input;
  sameShape(r, mask, "tokenLevelRewards", "responseMask");
  const [B, T] = dims2(r, "tokenLevelRewards");
  const batch = { scores: rowSums(r), mask, B, T };
  const setGroup = rule(batch);
  const adv = new Float64Array(B);
  for (const [id, rows] of groupsOf(input.index, B, estimator)) setGroup(rows, adv, id);
  return { adv, batch };
}

/** groupAdvantages broadcast over each row's response tokens times the mask; returns = advantages. */
function outcomeAdvantage(
  input: AdvantageInput,
  estimator: string,
  rule: (batch: OutcomeBatch) => GroupRule,
): AdvantageOutput {
  const { adv, batch } = groupAdvantages(input, estimator, rule);
  const a = broadcastRows(adv, batch.mask, batch.T);
  return { advantages: a, returns: a };
}

/**
 * GRPO outcome advantage. score_i = sum_t r_{i,t}. For each group G of rows sharing an index:
 * mean_G and the unbiased std_G (a group of one gets mean 0, std 1), then
 *   A_i = (score_i - mean_G) / (std_G + epsilon)        (normAdvByStdInGrpo, default)
 *   A_i = score_i - mean_G                              (otherwise: Dr.GRPO)
 * broadcast over the response tokens and multiplied by the mask. returns = advantages.
 */
export function computeGrpoOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  const eps = input.epsilon ?? 1e-6;
  const norm = input.normAdvByStdInGrpo ?? true;
  return outcomeAdvantage(input, "grpo", ({ scores }) => (rows, adv) => {
    const { mean, std } = groupMeanStd(rows, scores);
    for (const i of rows) adv[i] = norm ? (scores[i]! - mean) / (std + eps) : scores[i]! - mean;
  });
}

/**
 * RLOO (leave-one-out baseline). For a group of n > 1 rows with mean m:
 *   A_i = score_i * n/(n-1) - m * n/(n-1)  (= score_i - mean of the other n-1 scores);
 * a group of one keeps A_i = score_i. Broadcast over tokens times the mask; returns = advantages.
 */
export function computeRlooOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  return outcomeAdvantage(input, "rloo", ({ scores }) => (rows, adv) => {
    const n = rows.length;
    const { mean } = groupMeanStd(rows, scores);
    for (const i of rows) adv[i] = n > 1 ? (scores[i]! * n) / (n - 1) - (mean * n) / (n - 1) : scores[i]!;
  });
}

/**
 * REINFORCE++: discounted return G_t = r_t + gamma * G_{t+1}, where the running return is reset to 0
 * after a masked-out position (G_{t+1} is multiplied by mask_t); advantages = masked_whiten(G, mask) * mask.
 */
export function computeReinforcePlusPlusOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  const { tokenLevelRewards: r, responseMask: mask } = input;
  sameShape(r, mask, "tokenLevelRewards", "responseMask");
  const [B, T] = dims2(r, "tokenLevelRewards");
  const gamma = input.gamma ?? 1;
  const ret = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let running = 0;
    for (let t = T - 1; t >= 0; t--) {
      running = r.data[b * T + t]! + gamma * running;
      ret[b * T + t] = running;
      running *= mask.data[b * T + t] as number;
    }
  }
  const returns = { data: ret, shape: [B, T] };
  const w = maskedWhiten(returns, mask);
  for (let i = 0; i < w.data.length; i++) w.data[i] = w.data[i]! * (mask.data[i] as number);
  return { advantages: w, returns };
}

/**
 * ReMax (Li et al. 2023): the baseline of a response is the score of the greedy response to its prompt.
 * returns_t = sum_{t' >= t} r_t' m_t' (undiscounted), A_t = returns_t - baseline x m_t.
 */
export function computeRemaxOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  const { tokenLevelRewards: r, responseMask: mask, rewardBaselines: base } = input;
  sameShape(r, mask, "tokenLevelRewards", "responseMask");
  const [B, T] = dims2(r, "tokenLevelRewards");
  if (!base || base.length !== B)
    throw new AlgorithmInputError(
      `remax needs rewardBaselines, one per row (${B}), got ${base ? base.length : "none"}`,
    );
  const returns = new Float32Array(B * T);
  const advantages = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let running = 0;
    for (let t = T - 1; t >= 0; t--) {
      const m = mask.data[b * T + t] as number;
      running += r.data[b * T + t]! * m;
      returns[b * T + t] = running;
      advantages[b * T + t] = running - base[b]! * m;
    }
  }
  return { advantages: { data: advantages, shape: [B, T] }, returns: { data: returns, shape: [B, T] } };
}

/**
 * REINFORCE++ with a group baseline: A_i = score_i - mean_G (group of one: mean 0), broadcast over
 * tokens times the mask, then masked_whiten over the batch and times the mask again.
 */
export function computeReinforcePlusPlusBaselineOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  const { adv, batch } = groupAdvantages(
    input,
    "reinforce_plus_plus_baseline",
    ({ scores }) =>
      (rows, adv) => {
        const { mean } = groupMeanStd(rows, scores);
        for (const i of rows) adv[i] = scores[i]! - mean;
      },
  );
  const mask = batch.mask;
  const w = maskedWhiten(broadcastRows(adv, mask, batch.T), mask);
  for (let i = 0; i < w.data.length; i++) w.data[i] = w.data[i]! * (mask.data[i] as number);
  return { advantages: w, returns: w };
}

/**
 * GAE for a critic, backwards over t:
 *   delta_t = r_t + gamma * V_{t+1} - V_t,   A_t = delta_t + gamma * lam * A_{t+1}
 * where V_T = 0 and A_T = 0. Positions with mask 0 (observation tokens, padding) are skipped: they
 * carry the next value and advantage through unchanged. returns = A + V; advantages are then
 * masked-whitened.
 */
export function computeGaeAdvantageReturn(input: AdvantageInput): AdvantageOutput {
  const { tokenLevelRewards: r, responseMask: mask, values } = input;
  if (!values) throw new AlgorithmInputError("gae needs critic values");
  sameShape(r, mask, "tokenLevelRewards", "responseMask");
  sameShape(r, values, "tokenLevelRewards", "values");
  const [B, T] = dims2(r, "tokenLevelRewards");
  const gamma = input.gamma ?? 1;
  const lam = input.lam ?? 1;
  const adv = new Float32Array(B * T);
  const ret = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let nextValue = 0;
    let lastGae = 0;
    for (let t = T - 1; t >= 0; t--) {
      const i = b * T + t;
      const m = mask.data[i] as number;
      const v = values.data[i]!;
      const delta = r.data[i]! + gamma * nextValue - v;
      const gae = delta + gamma * lam * lastGae;
      nextValue = v * m + (1 - m) * nextValue;
      lastGae = gae * m + (1 - m) * lastGae;
      adv[i] = lastGae;
      ret[i] = lastGae + v;
    }
  }
  const advantages = maskedWhiten({ data: adv, shape: [B, T] }, mask);
  return { advantages, returns: { data: ret, shape: [B, T] } };
}

/**
 * Places each sequence's scalar score on its last response token (the last position where the mask
 * is 1), zeros elsewhere: veRL's token_level_scores from an outcome reward.
 */
export function tokenLevelScoresFromFinal(scores: ArrayLike<number>, responseMask: MaskMatrix): ScoreMatrix {
  const [B, T] = dims2(responseMask, "responseMask");
  if (scores.length !== B) throw new AlgorithmInputError(`got ${scores.length} scores for ${B} rows`);
  const out = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let last = -1;
    for (let t = T - 1; t >= 0; t--) {
      if ((responseMask.data[b * T + t] as number) !== 0) {
        last = t;
        break;
      }
    }
    if (last < 0) throw new AlgorithmInputError(`row ${b} has no response token to put its score on`);
    out[b * T + last] = scores[b]!;
  }
  return { data: out, shape: [B, T] };
}

registerAdvantageEstimator("gae", computeGaeAdvantageReturn, { critic: true });
registerAdvantageEstimator("grpo", computeGrpoOutcomeAdvantage, { minGroupSize: 2 });
registerAdvantageEstimator("rloo", computeRlooOutcomeAdvantage, { minGroupSize: 2 });
registerAdvantageEstimator("reinforce_plus_plus", computeReinforcePlusPlusOutcomeAdvantage);
registerAdvantageEstimator("reinforce_plus_plus_baseline", computeReinforcePlusPlusBaselineOutcomeAdvantage);

/** A group's mean and unbiased std of scores; a group of one: mean 0, std 1 (GRPO's convention). */
function groupMeanStd(rows: number[], scores: Float64Array): { mean: number; std: number } {
  if (rows.length < 2) return { mean: 0, std: 1 };
  const mean = rows.reduce((s, i) => s + scores[i]!, 0) / rows.length;
  const ss = rows.reduce((s, i) => s + (scores[i]! - mean) ** 2, 0);
  return { mean, std: Math.sqrt(ss / (rows.length - 1)) };
}

/**
 * GRPO for pass@k (arXiv:2503.19595): in each group only the best response learns. With r_max and
 * r_2nd the two highest scores of the group (the first row holding r_max when tied),
 *   A_best = r_max - r_2nd,  divided by (std_G + epsilon) when normAdvByStdInGrpo (std unbiased);
 *   A = 0 for every other row.
 * Broadcast over tokens times the mask; returns = advantages. A group of one row is an error: pass@k
 * needs rollout.n >= 2.
 */
export function computeGrpoPassKOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  const eps = input.epsilon ?? 1e-6;
  const norm = input.normAdvByStdInGrpo ?? true;
  return outcomeAdvantage(input, "grpo_passk", ({ scores }) => (rows, adv, id) => {
    if (rows.length < 2)
      throw new AlgorithmInputError(
        `grpo_passk needs at least 2 responses per prompt (actor_rollout_ref.rollout.n >= 2); group ${String(id)} has ${rows.length}`,
      );
    let best = rows[0]!;
    for (const i of rows) if (scores[i]! > scores[best]!) best = i;
    let second = Number.NEGATIVE_INFINITY;
    for (const i of rows) if (i !== best && scores[i]! > second) second = scores[i]!;
    const gap = scores[best]! - second;
    adv[best] = norm ? gap / (groupMeanStd(rows, scores).std + eps) : gap;
  });
}

/**
 * OPO (arXiv:2505.23585), the length-weighted optimal baseline: with |y_i| the number of response
 * tokens of row i (the mask's row sum), per group b_G = sum_i |y_i| score_i / sum_i |y_i| (a group of
 * one: b = 0), A_i = score_i - b_G, broadcast over tokens times the mask; returns = advantages.
 */
export function computeOpoOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  return outcomeAdvantage(input, "opo", ({ scores, mask, B, T }) => {
    const lengths = new Float64Array(B);
    for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) lengths[b]! += mask.data[b * T + t] as number;
    return (rows, adv) => {
      let baseline = 0;
      if (rows.length > 1) {
        let weighted = 0;
        let total = 0;
        for (const i of rows) {
          weighted += lengths[i]! * scores[i]!;
          total += lengths[i]!;
        }
        baseline = weighted / total;
      }
      for (const i of rows) adv[i] = scores[i]! - baseline;
    };
  });
}

/**
 * GPG (arXiv:2504.02546): alpha = B / max(1, number of rows whose score is non-zero), and
 *   A_i = alpha (score_i - mean_G) / f_norm   (f_norm = 1; a group of one: mean 0),
 * broadcast over tokens times the mask; returns = advantages. Rows scored exactly 0 thus raise alpha,
 * which rescales the gradient of a batch with few informative rows.
 */
export function computeGpgOutcomeAdvantage(input: AdvantageInput): AdvantageOutput {
  return outcomeAdvantage(input, "gpg", ({ scores, B }) => {
    let nonZero = 0;
    for (const s of scores) if (s !== 0) nonZero++;
    const alpha = B / Math.max(1, nonZero);
    const fNorm = 1;
    return (rows, adv) => {
      const { mean } = groupMeanStd(rows, scores);
      for (const i of rows) adv[i] = (alpha * (scores[i]! - mean)) / fNorm;
    };
  });
}

registerAdvantageEstimator("grpo_passk", computeGrpoPassKOutcomeAdvantage, { minGroupSize: 2 });
registerAdvantageEstimator("opo", computeOpoOutcomeAdvantage);
registerAdvantageEstimator("gpg", computeGpgOutcomeAdvantage);
registerAdvantageEstimator("remax", computeRemaxOutcomeAdvantage, { greedyBaseline: true });
