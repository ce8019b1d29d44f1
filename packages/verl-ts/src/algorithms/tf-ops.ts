import * as tf from "@tensorflow/tfjs";
import type { BatchTensor } from "../protocol/tensor.js";
import { checkKlPenaltyType, type KlPenaltyType } from "./kl.js";
import { checkLossAggMode, LOSS_AGGREGATION, type LossAggMode, lossAggDivisor } from "./loss-aggregation.js";
import { AlgorithmInputError } from "./masked.js";

// Differentiable building blocks for the trainer: aggregation, KL, value loss and entropy with the same
// formulas as the typed-array versions in loss-aggregation.ts / kl.ts / policy-loss.ts / entropy.ts,
// written as tfjs ops so gradients flow into a model's log-probs. The policy losses themselves are in
// policy-losses-tf.ts.

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
export function aggLossTf(loss: tf.Tensor, mask: TensorLike, mode: LossAggMode): tf.Scalar {
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

/** Per-token KL estimate (k1/abs/k2/k3, formulas in klPenaltyValue) as tfjs ops. */
export function klPenaltyTf(logProb: tf.Tensor, refLogProb: TensorLike, type: KlPenaltyType): tf.Tensor {
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
  lossAggMode: LossAggMode = "token-mean",
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
  type: KlPenaltyType,
  mode: LossAggMode = "token-mean",
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
