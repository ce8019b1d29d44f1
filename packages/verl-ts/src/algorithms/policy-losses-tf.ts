import * as tf from "@tensorflow/tfjs";
import { mulberry32 } from "../random.js";
import { AlgorithmInputError } from "./masked.js";
import type { PolicyLossOptions } from "./policy-loss.js";
import type { PolicyLossInputTf, PolicyLossOutputTf } from "./policy-loss-registry.js";
import { aggLossTf, asTfTensor, maskedMeanTf, type TensorLike } from "./tf-ops.js";

// The policy losses as tfjs ops, differentiable with respect to the current log-probs: vanilla PPO
// (typed-array twin: computePolicyLoss) and the variants veRL offers; registered in
// policy-loss-registry.ts. Each aggregates through input.aggregate and reports its metrics as token
// means over the mask.

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

/**
 * veRL's "vanilla" loss: the clipped, dual-clipped PPO loss of policyLossTf (its formula is in
 * computePolicyLoss), with the metrics measured over the plain token mask.
 */
export function vanillaPolicyLossTf(input: PolicyLossInputTf): PolicyLossOutputTf {
  return tf.tidy(() => {
    const t = ppoTokenLossTf(
      input.oldLogProb,
      input.logProb,
      input.advantages,
      input.responseMask,
      input.options,
    );
    return {
      pgLoss: input.aggregate(t.losses),
      metrics: { pg_clipfrac: t.pgClipfrac, ppo_kl: t.ppoKl, pg_clipfrac_lower: t.pgClipfracLower },
    };
  });
}

/** x in the forward pass, no gradient in the backward pass (torch's .detach()). */
const stopGradient = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => ({
  value: tf.clone(args[0] as tf.Tensor),
  gradFunc: (dy: tf.Tensor) => tf.zerosLike(dy),
})) as (x: tf.Tensor) => tf.Tensor;

/**
 * GSPO (arXiv:2507.18071), the sequence-level importance ratio. With d = logp - old_logp and |y_b|
 * the row's loss tokens (at least 1):
 *   log s_b = sum_t d_{b,t} m_{b,t} / |y_b|
 *   log s_{b,t} = min(10, sg[log s_b] + logp_{b,t} - sg[logp_{b,t}])   (value s_b, gradient s_b dlogp)
 *   L = max(-A s_{b,t}, -A clip(s_{b,t}, 1 - eps_low, 1 + eps_high))
 * pgLoss = aggregate(L) (veRL's recipe aggregates with seq-mean-token-mean: set actor.loss_agg_mode to it);
 * pg_clipfrac = mean_mask[L2 > L1], ppo_kl = mean_mask(-d).
 */
export function gspoPolicyLossTf(input: PolicyLossInputTf): PolicyLossOutputTf {
  const { options } = input;
  const clip = options.clipRatio ?? 0.2;
  const low = options.clipRatioLow ?? clip;
  const high = options.clipRatioHigh ?? clip;
  return tf.tidy(() => {
    const old = asTfTensor(input.oldLogProb);
    const adv = asTfTensor(input.advantages);
    const mask = asTfTensor(input.responseMask);
    const logp = input.logProb;
    const d = tf.sub(logp, old);
    const seqLen = tf.maximum(tf.sum(mask, -1, true), 1);
    const seqLogRatio = stopGradient(tf.div(tf.sum(tf.mul(d, mask), -1, true), seqLen));
    const logS = tf.minimum(tf.add(tf.sub(logp, stopGradient(logp)), seqLogRatio), 10);
    const s = tf.exp(logS);
    const l1 = tf.mul(tf.neg(adv), s);
    const l2 = tf.mul(tf.neg(adv), tf.clipByValue(s, 1 - low, 1 + high));
    return {
      pgLoss: input.aggregate(tf.maximum(l1, l2)),
      metrics: {
        pg_clipfrac: maskedMeanTf(tf.cast(tf.greater(l2, l1), "float32"), mask),
        ppo_kl: maskedMeanTf(tf.neg(d), mask),
      },
    };
  });
}

/**
 * GPG (arXiv:2504.02546): plain policy gradient on the advantages, no ratio and no clipping:
 *   L = -logp A,   pgLoss = aggregate(L). No metrics (there is nothing clipped to count).
 */
export function gpgPolicyLossTf(input: PolicyLossInputTf): PolicyLossOutputTf {
  return tf.tidy(() => ({
    pgLoss: input.aggregate(tf.mul(tf.neg(input.logProb), asTfTensor(input.advantages))),
    metrics: {},
  }));
}

/**
 * Host copies of a micro-batch for the covariance-based token choices (no gradient flows through them).
 * They are read inside the gradient tape, where nothing can be awaited: only for backends with
 * synchronous reads (tokenChoiceOnHost says which).
 */
function hostArrays(input: PolicyLossInputTf) {
  const read = (t: tf.Tensor) => Float32Array.from(t.dataSync()); // sync read allowed: refused on webgpu (tokenChoiceOnHost)
  const mask = read(asTfTensor(input.responseMask));
  const adv = read(asTfTensor(input.advantages));
  const logp = read(input.logProb);
  const old = read(asTfTensor(input.oldLogProb));
  return { mask, adv, logp, old };
}

/** Whether clip_cov / kl_cov choose their tokens on the host (options.tokenChoice, by backend). */
function tokenChoiceOnHost(input: PolicyLossInputTf, loss: string): boolean {
  const choice = input.options.tokenChoice ?? (tf.getBackend() === "webgpu" ? "tensor" : "host");
  if (choice === "host" && tf.getBackend() === "webgpu")
    throw new AlgorithmInputError(
      `policy loss ${loss} with tokenChoice "host" reads the micro-batch inside the backward pass, which the webgpu backend cannot do synchronously; use tokenChoice "tensor" (the default there)`,
    );
  return choice === "host";
}

/**
 * A 0/1 mask of `scores`' shape with 1 on its k highest entries above `floor`, k = max(1,
 * floor(ratio * sum(mask))), all in tensor ops: top-k over the largest k the shape allows, then the
 * first k of those (k itself a tensor, so nothing is read).
 */
function topFractionTf(scores: tf.Tensor, mask: tf.Tensor, ratio: number, floor: number): tf.Tensor {
  const flat = tf.reshape(scores, [-1]);
  const size = flat.size;
  const most = Math.max(1, Math.min(size, Math.floor(size * ratio)));
  const { values, indices } = tf.topk(flat, most);
  const k = tf.maximum(tf.floor(tf.mul(tf.sum(mask), ratio)), 1);
  const keep = tf.logicalAnd(tf.less(tf.range(0, most, 1, "float32"), k), tf.greater(values, floor));
  return tf.reshape(tf.scatterND(tf.expandDims(indices, 1), tf.cast(keep, "float32"), [size]), scores.shape);
}

/** `choose(logp)` as a value with no gradient, computed off the tape (its top-k has no gradient). */
function chosenTokens(logp: tf.Tensor, choose: (logp: tf.Tensor) => tf.Tensor): tf.Tensor {
  return tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => ({
    value: choose(args[0] as tf.Tensor),
    gradFunc: (dy: tf.Tensor) => tf.zerosLike(dy),
  }))(logp) as tf.Tensor;
}

/** Masked mean in tensor ops, with maskedMean's 1e-8. */
function maskedMeanOf(v: tf.Tensor, mask: tf.Tensor): tf.Tensor {
  return tf.div(tf.sum(tf.mul(v, mask)), tf.add(tf.sum(mask), 1e-8));
}

function maskedMean(v: Float32Array, mask: Float32Array): number {
  let s = 0;
  let m = 0;
  for (let i = 0; i < v.length; i++) {
    s += v[i]! * mask[i]!;
    m += mask[i]!;
  }
  return s / (m + 1e-8);
}

/**
 * Clip-Cov (arXiv:2505.22617): the PPO clipped loss (ratio = exp(logp - old_logp), no dual clip),
 * with the gradient cut on a few tokens whose centred covariance
 *   cov_t = (A_t - mean_mask A) (logp_t - mean_mask logp)
 * lies in (clip_cov_lb, clip_cov_ub) among loss tokens the PPO clip did not already clip. At most
 * max(1, floor(clip_cov_ratio * sum(mask))) of them are cut, picked at random (seeded by
 * options.seed) when there are more candidates. L = max(L1, L2) * corr (corr = 0 on cut tokens);
 * pg_clipfrac = mean_mask[corr = 0], ppo_kl = mean_mask(old_logp - logp).
 */
export function clipCovPolicyLossTf(input: PolicyLossInputTf): PolicyLossOutputTf {
  const { options } = input;
  const clip = options.clipRatio ?? 0.2;
  const low = options.clipRatioLow ?? clip;
  const high = options.clipRatioHigh ?? clip;
  const ratioCut = options.clipCovRatio ?? 0.0002;
  const lb = options.clipCovLb ?? 1;
  const ub = options.clipCovUb ?? 5;
  if (!(ratioCut > 0))
    throw new AlgorithmInputError(`actor.policy_loss.clip_cov_ratio must be > 0, got ${ratioCut}`);
  const corrData = tokenChoiceOnHost(input, "clip_cov")
    ? clipCovCutOnHost(input, low, high, ratioCut, lb, ub)
    : null;
  return tf.tidy(() => {
    const old = asTfTensor(input.oldLogProb);
    const adv = asTfTensor(input.advantages);
    const mask = asTfTensor(input.responseMask);
    const d = tf.sub(input.logProb, old);
    const ratio = tf.exp(d);
    const corr = corrData
      ? tf.tensor(corrData, mask.shape)
      : tf.sub(
          1,
          chosenTokens(input.logProb, (lp) => {
            // candidates: loss tokens the PPO clip left alone whose covariance lies in (lb, ub)
            const r = tf.exp(tf.sub(lp, old));
            const a = tf.neg(adv);
            const clipped = tf.greater(tf.mul(a, tf.clipByValue(r, 1 - low, 1 + high)), tf.mul(a, r));
            const cov = tf.mul(tf.sub(adv, maskedMeanOf(adv, mask)), tf.sub(lp, maskedMeanOf(lp, mask)));
            const candidate = tf.logicalAnd(
              tf.logicalAnd(tf.greater(mask, 0), tf.logicalNot(clipped)),
              tf.logicalAnd(tf.greater(cov, lb), tf.less(cov, ub)),
            );
            // a random order among the candidates (seeded), -1 elsewhere: the first maxCut are cut
            const draw = tf.randomUniform(mask.shape, 0, 1, "float32", options.seed ?? 0);
            return topFractionTf(tf.where(candidate, draw, tf.fill(mask.shape, -1)), mask, ratioCut, -0.5);
          }),
        );
    const l1 = tf.mul(tf.neg(adv), ratio);
    const l2 = tf.mul(tf.neg(adv), tf.clipByValue(ratio, 1 - low, 1 + high));
    return {
      pgLoss: input.aggregate(tf.mul(tf.maximum(l1, l2), corr)),
      metrics: {
        pg_clipfrac: maskedMeanTf(tf.sub(1, corr), mask),
        ppo_kl: maskedMeanTf(tf.neg(d), mask),
      },
    };
  });
}

/** clip_cov's token choice on the host: 0 on the cut tokens, 1 elsewhere. */
function clipCovCutOnHost(
  input: PolicyLossInputTf,
  low: number,
  high: number,
  ratioCut: number,
  lb: number,
  ub: number,
): Float32Array {
  const { options } = input;
  const h = hostArrays(input);
  const meanA = maskedMean(h.adv, h.mask);
  const meanLp = maskedMean(h.logp, h.mask);
  let tokens = 0;
  const candidates: number[] = [];
  for (let i = 0; i < h.mask.length; i++) {
    if (h.mask[i]! <= 0) continue;
    tokens += h.mask[i]!;
    const ratio = Math.exp(h.logp[i]! - h.old[i]!);
    const a = h.adv[i]!;
    const clippedByPpo = -a * Math.min(1 + high, Math.max(1 - low, ratio)) > -a * ratio;
    if (clippedByPpo) continue;
    const cov = (a - meanA) * (h.logp[i]! - meanLp);
    if (cov > lb && cov < ub) candidates.push(i);
  }
  const maxCut = Math.max(Math.floor(ratioCut * tokens), 1);
  if (candidates.length > maxCut) {
    const rng = mulberry32(options.seed ?? 0);
    for (let i = candidates.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [candidates[i], candidates[j]] = [candidates[j]!, candidates[i]!];
    }
    candidates.length = maxCut;
  }
  const corrData = new Float32Array(h.mask.length).fill(1);
  for (const i of candidates) corrData[i] = 0;
  return corrData;
}

/**
 * KL-Cov (arXiv:2505.22617): the unclipped surrogate L = -A ratio (ratio = exp(logp - old_logp)),
 * plus ppo_kl_coef |logp - old_logp| on the k = max(1, floor(kl_cov_ratio * n)) loss tokens with the
 * largest centred covariance (A_t - mean A)(logp_t - mean logp), means over the n loss tokens (ties:
 * the earlier token first). pgLoss = aggregate(L); ppo_kl = mean_mask |logp - old_logp|.
 */
export function klCovPolicyLossTf(input: PolicyLossInputTf): PolicyLossOutputTf {
  const { options } = input;
  const ratioKl = options.klCovRatio ?? 0.0002;
  const coef = options.ppoKlCoef ?? 0.1;
  if (!(ratioKl > 0))
    throw new AlgorithmInputError(`actor.policy_loss.kl_cov_ratio must be > 0, got ${ratioKl}`);
  const pick = tokenChoiceOnHost(input, "kl_cov") ? klCovPickOnHost(input, ratioKl) : null;
  return tf.tidy(() => {
    const old = asTfTensor(input.oldLogProb);
    const adv = asTfTensor(input.advantages);
    const mask = asTfTensor(input.responseMask);
    const d = tf.sub(input.logProb, old);
    const absKl = tf.abs(d);
    const surrogate = tf.mul(tf.neg(adv), tf.exp(d));
    const chosen = pick
      ? tf.tensor(pick, mask.shape)
      : chosenTokens(input.logProb, (lp) => {
          // the loss tokens' centred covariance, the rest below any covariance
          const valid = tf.cast(tf.greater(mask, 0), "float32");
          const count = tf.maximum(tf.sum(valid), 1);
          const meanA = tf.div(tf.sum(tf.mul(adv, valid)), count);
          const meanLp = tf.div(tf.sum(tf.mul(lp, valid)), count);
          const cov = tf.mul(tf.sub(adv, meanA), tf.sub(lp, meanLp));
          return topFractionTf(
            tf.where(tf.greater(valid, 0), cov, tf.fill(mask.shape, -3e38)),
            valid,
            ratioKl,
            -1e38,
          );
        });
    const perToken = tf.add(surrogate, tf.mul(chosen, tf.mul(absKl, coef)));
    return { pgLoss: input.aggregate(perToken), metrics: { ppo_kl: maskedMeanTf(absKl, mask) } };
  });
}

/** kl_cov's token choice on the host: 1 on the chosen tokens. */
function klCovPickOnHost(input: PolicyLossInputTf, ratioKl: number): Float32Array {
  const h = hostArrays(input);
  const valid: number[] = [];
  for (let i = 0; i < h.mask.length; i++) if (h.mask[i]! > 0) valid.push(i);
  const pick = new Float32Array(h.mask.length);
  if (valid.length > 0) {
    let meanA = 0;
    let meanLp = 0;
    for (const i of valid) {
      meanA += h.adv[i]!;
      meanLp += h.logp[i]!;
    }
    meanA /= valid.length;
    meanLp /= valid.length;
    const cov = valid.map((i) => ({ i, c: (h.adv[i]! - meanA) * (h.logp[i]! - meanLp) }));
    cov.sort((x, y) => y.c - x.c || x.i - y.i);
    const k = Math.max(1, Math.floor(valid.length * ratioKl));
    for (const { i } of cov.slice(0, k)) pick[i] = 1;
  }
  return pick;
}
