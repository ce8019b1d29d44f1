/**
 * How a [batch, seq] loss matrix L under a mask M becomes the scalar that is minimised
 * (`actor.loss_agg_mode`). Every mode is one row of LOSS_AGGREGATION: a token's weight is its mask
 * value, divided by its row's loss tokens when `perRowTokens`, divided by `divisor` (all loss tokens,
 * the rows, or the response width T). The three places that aggregate read that table: `aggLoss`
 * (host arrays), `aggLossTf` (tfjs, differentiable) and `lossAggWeights` (the trainer's per-token
 * weights over a global mini-batch spread across ranks).
 *
 * - token-mean:              sum(L M) / (sum(M) + 1e-8)
 * - seq-mean-token-sum:      mean_b sum_t L M
 * - seq-mean-token-mean:     mean_b (sum_t L M / sum_t M)   (a row with an empty mask counts 0)
 * - seq-mean-token-sum-norm: sum_b sum_t L M / T            (T = seq length, Dr.GRPO's constant)
 */
import type { BatchTensor } from "../protocol/tensor.js";
import { AlgorithmInputError, dims2, type MaskMatrix, type ScoreMatrix } from "./masked.js";

export type LossAggMode =
  | "token-mean"
  | "seq-mean-token-sum"
  | "seq-mean-token-mean"
  | "seq-mean-token-sum-norm";

/** What a mode divides the weighted loss sum by (after the per-row division, when there is one). */
export type LossAggDivisor = "tokens" | "rows" | "width";

export interface LossAggregation {
  /** Each row's sum is divided by its own loss tokens first (a row without any counts 0). */
  perRowTokens: boolean;
  divisor: LossAggDivisor;
}

export const LOSS_AGGREGATION: Readonly<Record<LossAggMode, LossAggregation>> = {
  "token-mean": { perRowTokens: false, divisor: "tokens" },
  "seq-mean-token-sum": { perRowTokens: false, divisor: "rows" },
  "seq-mean-token-mean": { perRowTokens: true, divisor: "rows" },
  "seq-mean-token-sum-norm": { perRowTokens: false, divisor: "width" },
};

export const LOSS_AGG_MODES = Object.keys(LOSS_AGGREGATION) as readonly LossAggMode[];

export function checkLossAggMode(mode: string): asserts mode is LossAggMode {
  if (!(LOSS_AGG_MODES as readonly string[]).includes(mode)) {
    throw new AlgorithmInputError(`unknown loss_agg_mode "${mode}" (known: ${LOSS_AGG_MODES.join(", ")})`);
  }
}

/** The divisor's value for a batch: its loss tokens (+1e-8, as veRL's masked mean), rows, or width. */
export function lossAggDivisor(
  divisor: LossAggDivisor,
  counts: { tokens: number; rows: number; width: number },
): number {
  switch (divisor) {
    case "tokens":
      return counts.tokens + 1e-8;
    case "rows":
      return counts.rows;
    case "width":
      return counts.width;
  }
}

/** Aggregates loss L [B, T] under mask M with `mode` (see the file comment). */
export function aggLoss(loss: ScoreMatrix | Float64Array, mask: MaskMatrix, mode: LossAggMode): number {
  checkLossAggMode(mode);
  const { perRowTokens, divisor } = LOSS_AGGREGATION[mode];
  const [B, T] = dims2(mask, "mask");
  const L = loss instanceof Float64Array ? loss : loss.data;
  if (L.length !== B * T)
    throw new AlgorithmInputError(`loss has ${L.length} elements, mask is [${B}, ${T}]`);
  let sum = 0;
  let tokens = 0;
  for (let b = 0; b < B; b++) {
    let s = 0;
    let m = 0;
    for (let t = 0; t < T; t++) {
      const w = mask.data[b * T + t] as number;
      s += L[b * T + t]! * w;
      m += w;
    }
    sum += perRowTokens ? (m > 0 ? s / m : 0) : s;
    tokens += m;
  }
  return sum / lossAggDivisor(divisor, { tokens, rows: B, width: T });
}

/**
 * The weight of every token of `mask` [B, T] in the loss of `mode`, so that sum(L w) is the aggregated
 * loss. `global` gives the loss tokens and rows of the whole batch when `mask` is one rank's part of it
 * (default: this mask's own); a divisor of 0 gives weight 0.
 */
export function lossAggWeights(
  mask: BatchTensor,
  mode: LossAggMode,
  global?: { tokens: number; rows: number },
): Float32Array {
  checkLossAggMode(mode);
  const { perRowTokens, divisor } = LOSS_AGGREGATION[mode];
  const [B, T] = dims2(mask, "mask");
  let tokens = 0;
  if (!global) for (let i = 0; i < mask.data.length; i++) tokens += Number(mask.data[i]);
  const counts = { tokens: global?.tokens ?? tokens, rows: global?.rows ?? B, width: T };
  // the weights divide by the exact count: a batch without loss tokens weighs nothing
  const whole = divisor === "tokens" ? counts.tokens : lossAggDivisor(divisor, counts);
  const w = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let rowTokens = 0;
    for (let t = 0; t < T; t++) rowTokens += Number(mask.data[b * T + t]);
    const div = (perRowTokens ? rowTokens : 1) * whole;
    const scale = div > 0 ? 1 / div : 0;
    for (let t = 0; t < T; t++) w[b * T + t] = Number(mask.data[b * T + t]) * scale;
  }
  return w;
}
