import { aggLoss, type LossAggMode } from "./loss-aggregation.js";
import { AlgorithmInputError, type MaskMatrix, type ScoreMatrix, sameShape } from "./masked.js";

export interface PolicyLossOptions {
  /** Symmetric clip range (actor.clip_ratio). Default 0.2. */
  clipRatio?: number;
  /** Lower clip (1 - low); defaults to clipRatio. */
  clipRatioLow?: number;
  /** Upper clip (1 + high); defaults to clipRatio. */
  clipRatioHigh?: number;
  /** Dual-clip bound for negative advantages (actor.clip_ratio_c). Default 3. */
  clipRatioC?: number;
  lossAggMode?: LossAggMode;
  /** clip_cov: fraction of loss tokens whose gradient may be cut (policy_loss.clip_cov_ratio). Default 0.0002. */
  clipCovRatio?: number;
  /** clip_cov: covariance window (lb, ub) of the tokens that may be cut. Defaults 1 and 5. */
  clipCovLb?: number;
  clipCovUb?: number;
  /** kl_cov: fraction of loss tokens, highest covariance first, that get the KL term. Default 0.0002. */
  klCovRatio?: number;
  /** kl_cov: coefficient of |logp - old_logp| on those tokens (policy_loss.ppo_kl_coef). Default 0.1. */
  ppoKlCoef?: number;
  /** clip_cov: seed of the random choice among more candidate tokens than may be cut. Default 0. */
  seed?: number;
  /**
   * clip_cov / kl_cov: where the tokens are chosen. "host" reads the micro-batch and chooses in
   * JavaScript; "tensor" chooses with tensor ops (top-k, scatter), which needs no read and is what
   * the webgpu backend (no synchronous reads under Node) uses. Default: "tensor" on webgpu, else "host".
   * Both choose the same tokens, except among more clip_cov candidates than may be cut (each draws its
   * own seeded random choice) and among kl_cov covariance ties (top-k's order).
   */
  tokenChoice?: "host" | "tensor";
}

export interface PolicyLossResult {
  /** The aggregated clipped policy-gradient loss. */
  pgLoss: number;
  /** Fraction of tokens where the clipped term was chosen (masked mean of [L2 > L1]). */
  pgClipfrac: number;
  /** Approximate KL(old || new): masked mean of (old_logp - logp). */
  ppoKl: number;
  /** Fraction of tokens with A < 0 where the dual clip bound was hit. */
  pgClipfracLower: number;
}

/**
 * PPO clipped policy loss with dual clip (veRL's compute_policy_loss):
 *   ratio = exp(clamp(logp - old_logp, -20, 20))
 *   L1 = -A ratio,  L2 = -A clip(ratio, 1 - eps_low, 1 + eps_high),  Lc = max(L1, L2)
 *   L3 = -A clip_ratio_c;  L = A < 0 ? min(L3, Lc) : Lc
 *   pg_loss = agg(L, mask); clipfrac = mean_mask[L2 > L1]; ppo_kl = mean_mask(old_logp - logp)
 *   clipfrac_lower = mean_mask[Lc > L3 and A < 0]
 * The trainer runs the tensor twin (the registered "vanilla" loss, policy-losses-tf.ts); this host one
 * is the plain reference a test holds the tensor one to, in every aggregation mode.
 */
export function computePolicyLoss(
  oldLogProb: ScoreMatrix,
  logProb: ScoreMatrix,
  advantages: ScoreMatrix,
  responseMask: MaskMatrix,
  opts: PolicyLossOptions = {},
): PolicyLossResult {
  sameShape(oldLogProb, logProb, "oldLogProb", "logProb");
  sameShape(oldLogProb, advantages, "oldLogProb", "advantages");
  sameShape(oldLogProb, responseMask, "oldLogProb", "responseMask");
  const clip = opts.clipRatio ?? 0.2;
  const low = opts.clipRatioLow ?? clip;
  const high = opts.clipRatioHigh ?? clip;
  const c = opts.clipRatioC ?? 3;
  if (!(c > 1)) throw new AlgorithmInputError(`clip_ratio_c must be > 1 for the dual clip, got ${c}`);
  const n = oldLogProb.data.length;
  const losses = new Float64Array(n);
  let kl = 0;
  let clipped = 0;
  let lower = 0;
  let msum = 0;
  for (let i = 0; i < n; i++) {
    const m = responseMask.data[i] as number;
    const neg = Math.min(20, Math.max(-20, logProb.data[i]! - oldLogProb.data[i]!));
    const ratio = Math.exp(neg);
    const a = advantages.data[i]!;
    const l1 = -a * ratio;
    const l2 = -a * Math.min(1 + high, Math.max(1 - low, ratio));
    const lc = Math.max(l1, l2);
    const l3 = -a * c;
    losses[i] = a < 0 ? Math.min(l3, lc) : lc;
    kl += -neg * m;
    if (l2 > l1) clipped += m;
    if (lc > l3 && a < 0) lower += m;
    msum += m;
  }
  const denom = msum + 1e-8;
  return {
    pgLoss: aggLoss(losses, responseMask, opts.lossAggMode ?? "token-mean"),
    pgClipfrac: clipped / denom,
    ppoKl: kl / denom,
    pgClipfracLower: lower / denom,
  };
}

/**
 * Clipped value loss for a critic (veRL's compute_value_loss):
 *   v_clip = clip(vpred, V_old - c, V_old + c); L = max((vpred - R)^2, (v_clip - R)^2)
 *   vf_loss = 0.5 agg(L, mask); vf_clipfrac = mean_mask[(v_clip - R)^2 > (vpred - R)^2]
 */
export function computeValueLoss(
  vpreds: ScoreMatrix,
  returns: ScoreMatrix,
  values: ScoreMatrix,
  responseMask: MaskMatrix,
  cliprangeValue: number,
  lossAggMode: LossAggMode = "token-mean",
): { vfLoss: number; vfClipfrac: number } {
  sameShape(vpreds, returns, "vpreds", "returns");
  sameShape(vpreds, values, "vpreds", "values");
  sameShape(vpreds, responseMask, "vpreds", "responseMask");
  const n = vpreds.data.length;
  const losses = new Float64Array(n);
  let clipped = 0;
  let msum = 0;
  for (let i = 0; i < n; i++) {
    const v = values.data[i]!;
    const p = vpreds.data[i]!;
    const pc = Math.min(v + cliprangeValue, Math.max(v - cliprangeValue, p));
    const l1 = (p - returns.data[i]!) ** 2;
    const l2 = (pc - returns.data[i]!) ** 2;
    losses[i] = Math.max(l1, l2);
    const m = responseMask.data[i] as number;
    if (l2 > l1) clipped += m;
    msum += m;
  }
  return { vfLoss: 0.5 * aggLoss(losses, responseMask, lossAggMode), vfClipfrac: clipped / (msum + 1e-8) };
}
