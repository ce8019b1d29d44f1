/**
 * veRL's rollout importance sampling (algorithm.rollout_is*): the correction for responses that a
 * different policy generated than the one the update starts from (the rollout workers' older weights in
 * the one-step-off and fully asynchronous modes). The ratio of the training policy to the rollout policy
 *
 *   log r_t = old_log_prob_t - rollout_log_prob_t
 *
 * is taken per token (level token: w_t = exp(log r_t)), per sequence (level sequence: every token of a
 * response gets exp(sum_t log r_t)), or as the geometric mean of the sequence (level geometric:
 * exp(mean_t log r_t)); the log-ratio is clamped to [-20, 20] before exp. Mode truncate caps the weights at
 * rollout_is_threshold (TIS); mode mask keeps them and drops, from the loss mask, the tokens (token level)
 * or whole responses (sequence, geometric) whose weight lies outside [rollout_is_threshold_lower,
 * rollout_is_threshold] (MIS). With rollout_is_veto_threshold, a response with any token ratio below it is
 * dropped from the loss mask in either mode. Weights are zero on padding. The policy loss multiplies each
 * token's loss by its weight.
 */
import { type MaskMatrix, type ScoreMatrix, sameShape } from "./masked.js";

export const ROLLOUT_IS_LEVELS = ["token", "sequence", "geometric"] as const;
export type RolloutIsLevel = (typeof ROLLOUT_IS_LEVELS)[number];
export const ROLLOUT_IS_MODES = ["truncate", "mask"] as const;
export type RolloutIsMode = (typeof ROLLOUT_IS_MODES)[number];

export interface RolloutIsOptions {
  level: RolloutIsLevel;
  mode: RolloutIsMode;
  /** Upper bound of the weights (algorithm.rollout_is_threshold). */
  threshold: number;
  /** Lower bound (mask mode); default 1 / threshold. */
  thresholdLower?: number | null;
  /** A response with a token ratio below this is dropped from the loss mask; null: no veto. */
  vetoThreshold?: number | null;
}

export interface RolloutIsResult {
  /** rollout_is_weights [B, R], zero on padding. */
  weights: ScoreMatrix;
  /** The loss mask with the rejected tokens and responses removed (mask mode, veto). */
  responseMask: Float32Array;
  /** mismatch/... metrics, named as veRL names them. */
  metrics: Record<string, number>;
}

const SAFETY_BOUND = 20;
const clampLog = (x: number) => Math.min(SAFETY_BOUND, Math.max(-SAFETY_BOUND, x));

export function computeRolloutIsWeights(
  oldLogProb: ScoreMatrix,
  rolloutLogProb: ScoreMatrix,
  responseMask: MaskMatrix,
  o: RolloutIsOptions,
): RolloutIsResult {
  sameShape(oldLogProb, rolloutLogProb, "old_log_probs", "rollout_log_probs");
  sameShape(oldLogProb, responseMask, "old_log_probs", "response_mask");
  const [B, R] = oldLogProb.shape as [number, number];
  const upper = o.threshold;
  const lower = o.thresholdLower ?? 1 / upper;
  const raw = new Float32Array(B * R);
  const mask = Float32Array.from(responseMask.data as ArrayLike<number>, Number);
  let tokens = 0;
  let sum = 0;
  let sumSq = 0;
  let max = Number.NEGATIVE_INFINITY;
  let min = Number.POSITIVE_INFINITY;
  let high = 0;
  let low = 0;
  let kl = 0;
  let vetoed = 0;
  let rejected = 0;
  for (let b = 0; b < B; b++) {
    let logSum = 0;
    let n = 0;
    let veto = false;
    for (let t = 0; t < R; t++) {
      const i = b * R + t;
      if (!mask[i]) continue;
      const lr = oldLogProb.data[i]! - rolloutLogProb.data[i]!;
      logSum += lr;
      n++;
      kl -= lr; // KL(rollout || training) estimate: mean(rollout - training)
      if (o.vetoThreshold != null && Math.exp(clampLog(lr)) < o.vetoThreshold) veto = true;
    }
    const seqWeight =
      o.level === "sequence"
        ? Math.exp(clampLog(logSum))
        : o.level === "geometric"
          ? Math.exp(clampLog(n ? logSum / n : 0))
          : Number.NaN;
    let seqRejected = veto;
    for (let t = 0; t < R; t++) {
      const i = b * R + t;
      if (!mask[i]) continue;
      const w =
        o.level === "token" ? Math.exp(clampLog(oldLogProb.data[i]! - rolloutLogProb.data[i]!)) : seqWeight;
      raw[i] = w;
      tokens++;
      sum += w;
      sumSq += w * w;
      max = Math.max(max, w);
      min = Math.min(min, w);
      if (w > upper) high++;
      if (w < lower) low++;
      if (o.mode === "mask" && (w > upper || w < lower)) {
        if (o.level === "token") {
          mask[i] = 0;
          rejected++;
        } else seqRejected = true;
      }
    }
    if (veto) vetoed++;
    if (seqRejected)
      for (let t = 0; t < R; t++) {
        const i = b * R + t;
        if (mask[i]) rejected++;
        mask[i] = 0;
      }
  }
  const weights = new Float32Array(B * R);
  for (let i = 0; i < B * R; i++) {
    if (!responseMask.data[i]) continue;
    weights[i] = o.mode === "truncate" ? Math.min(raw[i]!, upper) : raw[i]!;
  }
  const mean = tokens ? sum / tokens : 1;
  const metrics: Record<string, number> = {
    "mismatch/rollout_is_mean": mean,
    "mismatch/rollout_is_max": tokens ? max : 1,
    "mismatch/rollout_is_min": tokens ? min : 1,
    "mismatch/rollout_is_ratio_fraction_high": tokens ? high / tokens : 0,
    "mismatch/rollout_is_ratio_fraction_low": tokens ? low / tokens : 0,
    // 1 / mean(w_normalised^2), w normalised to mean 1: the fraction of the batch the weights leave effective
    "mismatch/rollout_is_eff_sample_size": tokens && sumSq > 0 ? (sum * sum) / (tokens * sumSq) : 1,
    "mismatch/rollout_is_masked_fraction": tokens ? rejected / tokens : 0,
    "mismatch/rollout_is_veto_fraction": B ? vetoed / B : 0,
    "mismatch/mismatch_kl": tokens ? kl / tokens : 0,
  };
  return { weights: { data: weights, shape: [B, R] }, responseMask: mask, metrics };
}
