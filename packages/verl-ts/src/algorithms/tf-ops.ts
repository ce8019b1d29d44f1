import * as tf from "@tensorflow/tfjs";
import type { BatchTensor } from "../protocol/tensor.js";
import { checkKlPenaltyType, type KlPenaltyType } from "./kl.js";
import { checkLossAggMode, LOSS_AGGREGATION, type LossAggMode, lossAggDivisor } from "./loss-aggregation.js";
import { AlgorithmInputError } from "./masked.js";
import type { PolicyLossOptions } from "./policy-loss.js";

// Differentiable versions of the losses for the trainer: same formulas as the typed-array versions in
// policy-loss.ts / kl.ts / entropy.ts, written as tfjs ops so gradients flow into a model's log-probs.

/** A tfjs tensor, or a driver-side [batch, seq] matrix that is turned into one (float32). */
export type TensorLike = tf.Tensor | BatchTensor;

export function asTfTensor(x: TensorLike): tf.Tensor {
  if (x instanceof tf.Tensor) return x;
  const data = x.data instanceof Float32Array ? x.data : Float32Array.from(x.data as ArrayLike<number>);
  return tf.tensor(data, x.shape, "float32");
}

/** masked_mean over all elements: sum(v m) / (sum(m) + 1e-8). */
export function maskedMeanTf(values: tf.Tensor, mask: TensorLike): tf.Scalar {
  return tf.tidy(() => {
    const m = asTfTensor(mask);
    return tf.div(tf.sum(tf.mul(values, m)), tf.add(tf.sum(m), 1e-8)) as tf.Scalar;
  });
}

/** aggLoss as tfjs ops: the same LOSS_AGGREGATION table, differentiable with respect to `loss`. */
export function aggLossTf(loss: tf.Tensor, mask: TensorLike, mode: LossAggMode | string): tf.Scalar {
  checkLossAggMode(mode);
  const { perRowTokens, divisor } = LOSS_AGGREGATION[mode];
  return tf.tidy(() => {
    const m = asTfTensor(mask);
    if (loss.rank !== 2) throw new AlgorithmInputError(`loss must be [batch, seq], got rank ${loss.rank}`);
    const lm = tf.mul(loss, m);
    // a row without loss tokens divides by 1: its sum is 0 anyway
    const sum = perRowTokens ? tf.sum(tf.div(tf.sum(lm, -1), tf.maximum(tf.sum(m, -1), 1))) : tf.sum(lm);
    const by =
      divisor === "tokens"
        ? tf.add(tf.sum(m), 1e-8)
        : lossAggDivisor(divisor, { tokens: 0, rows: loss.shape[0]!, width: loss.shape[1]! });
    return tf.div(sum, by) as tf.Scalar;
  });
}

export interface PolicyLossTf {
  pgLoss: tf.Scalar;
  pgClipfrac: tf.Scalar;
  ppoKl: tf.Scalar;
  pgClipfracLower: tf.Scalar;
}

/** The per-token clipped, dual-clipped PPO loss before aggregation, with its metrics over `responseMask`. */
export interface PpoTokenLossTf {
  losses: tf.Tensor;
  pgClipfrac: tf.Scalar;
  ppoKl: tf.Scalar;
  pgClipfracLower: tf.Scalar;
}

/** The per-token matrix of the PPO loss (formula in computePolicyLoss) and its metrics, before aggregation. */
export function ppoTokenLossTf(
  oldLogProb: TensorLike,
  logProb: tf.Tensor,
  advantages: TensorLike,
  responseMask: TensorLike,
  opts: PolicyLossOptions = {},
): PpoTokenLossTf {
  const clip = opts.clipRatio ?? 0.2;
  const low = opts.clipRatioLow ?? clip;
  const high = opts.clipRatioHigh ?? clip;
  const c = opts.clipRatioC ?? 3;
  if (!(c > 1)) throw new AlgorithmInputError(`clip_ratio_c must be > 1 for the dual clip, got ${c}`);
  return tf.tidy(() => {
    const old = asTfTensor(oldLogProb);
    const adv = asTfTensor(advantages);
    const mask = asTfTensor(responseMask);
    const neg = tf.clipByValue(tf.sub(logProb, old), -20, 20);
    const ratio = tf.exp(neg);
    const l1 = tf.mul(tf.neg(adv), ratio);
    const l2 = tf.mul(tf.neg(adv), tf.clipByValue(ratio, 1 - low, 1 + high));
    const lc = tf.maximum(l1, l2);
    const l3 = tf.mul(tf.neg(adv), c);
    const isNeg = tf.less(adv, 0);
    const losses = tf.where(isNeg, tf.minimum(l3, lc), lc);
    const pgClipfrac = maskedMeanTf(tf.cast(tf.greater(l2, l1), "float32"), mask);
    const ppoKl = maskedMeanTf(tf.neg(neg), mask);
    const pgClipfracLower = maskedMeanTf(tf.cast(tf.logicalAnd(tf.greater(lc, l3), isNeg), "float32"), mask);
    return { losses, pgClipfrac, ppoKl, pgClipfracLower };
  });
}

/**
 * The clipped, dual-clipped PPO policy loss (formula in computePolicyLoss) with `logProb` a tfjs tensor
 * so the loss is differentiable with respect to it. The metrics carry no gradient.
 */
export function policyLossTf(
  oldLogProb: TensorLike,
  logProb: tf.Tensor,
  advantages: TensorLike,
  responseMask: TensorLike,
  opts: PolicyLossOptions = {},
): PolicyLossTf {
  return tf.tidy(() => {
    const { losses, ...metrics } = ppoTokenLossTf(oldLogProb, logProb, advantages, responseMask, opts);
    return { pgLoss: aggLossTf(losses, responseMask, opts.lossAggMode ?? "token-mean"), ...metrics };
  });
}

/** Per-token KL estimate (k1/abs/k2/k3, formulas in klPenaltyValue) as tfjs ops. */
export function klPenaltyTf(
  logProb: tf.Tensor,
  refLogProb: TensorLike,
  type: KlPenaltyType | string,
): tf.Tensor {
  checkKlPenaltyType(type);
  return tf.tidy(() => {
    const ref = asTfTensor(refLogProb);
    const diff = tf.sub(logProb, ref);
    switch (type) {
      case "kl":
      case "k1":
        return diff;
      case "abs":
        return tf.abs(diff);
      case "mse":
      case "k2":
        return tf.mul(0.5, tf.square(diff));
      case "low_var_kl":
      case "k3": {
        const d = tf.clipByValue(tf.neg(diff), -20, 20);
        return tf.clipByValue(tf.sub(tf.sub(tf.exp(d), d), 1), -10, 10);
      }
    }
  });
}

/**
 * The clipped value loss of a critic (formula in computeValueLoss) with `vpreds` a tfjs tensor, so the
 * loss is differentiable with respect to it: 0.5 agg(max((vpred - R)^2, (clip(vpred, V +- c) - R)^2)).
 */
export function valueLossTf(
  vpreds: tf.Tensor,
  values: TensorLike,
  returns: TensorLike,
  responseMask: TensorLike,
  cliprangeValue: number,
  lossAggMode: LossAggMode | string = "token-mean",
): tf.Scalar {
  return tf.tidy(() => {
    const v = asTfTensor(values);
    const r = asTfTensor(returns);
    const clipped = tf.minimum(tf.maximum(vpreds, tf.sub(v, cliprangeValue)), tf.add(v, cliprangeValue));
    const losses = tf.maximum(tf.square(tf.sub(vpreds, r)), tf.square(tf.sub(clipped, r)));
    return tf.mul(aggLossTf(losses, responseMask, lossAggMode), 0.5) as tf.Scalar;
  });
}

/** KL loss for the actor (actor.use_kl_loss): agg(kl(logp, ref), mask, mode). */
export function klLossTf(
  logProb: tf.Tensor,
  refLogProb: TensorLike,
  responseMask: TensorLike,
  type: KlPenaltyType | string,
  mode: LossAggMode | string = "token-mean",
): tf.Scalar {
  return tf.tidy(() => aggLossTf(klPenaltyTf(logProb, refLogProb, type), responseMask, mode));
}

/** Entropy per position from logits [..., V]: logsumexp(z) - sum(softmax(z) z). */
export function entropyFromLogitsTf(logits: tf.Tensor): tf.Tensor {
  return tf.tidy(() => {
    const lse = tf.logSumExp(logits, -1);
    const p = tf.softmax(logits, -1);
    return tf.sub(lse, tf.sum(tf.mul(p, logits), -1));
  });
}
