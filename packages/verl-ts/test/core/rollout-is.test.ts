/** veRL's rollout importance-sampling weights (algorithm.rollout_is*), against values worked out by hand. */
import test from "ava";
import { computeRolloutIsWeights } from "../../src/algorithms/rollout-is.js";

// row 0: log-ratios 0.5, -1, 0; row 1: 0, -0.2 and a padding token (its values must not count)
const old = { data: Float32Array.from([-1, -2, -0.5, -0.2, -0.3, 0]), shape: [2, 3] };
const rollout = { data: Float32Array.from([-1.5, -1, -0.5, -0.2, -0.1, 9]), shape: [2, 3] };
const mask = { data: Uint8Array.from([1, 1, 1, 1, 1, 0]), shape: [2, 3] };

const close = (a: ArrayLike<number>, b: number[]) =>
  a.length === b.length && b.every((v, i) => Math.abs(Number(a[i]) - v) < 1e-5);
const e = Math.exp;

test("token level, truncate: exp(old - rollout) per token, capped at the threshold, zero on padding", (t) => {
  const r = computeRolloutIsWeights(old, rollout, mask, { level: "token", mode: "truncate", threshold: 1.5 });
  t.true(close(r.weights.data, [1.5, e(-1), 1, 1, e(-0.2), 0]), String(r.weights.data));
  t.true(close(r.responseMask, [1, 1, 1, 1, 1, 0]));
  // the metrics describe the ratios before truncation
  t.true(Math.abs(r.metrics["mismatch/rollout_is_max"]! - e(0.5)) < 1e-6);
  t.is(r.metrics["mismatch/rollout_is_ratio_fraction_high"], 1 / 5);
  // mean(rollout - old) over the 5 tokens: -(0.5 - 1 + 0 + 0 - 0.2) / 5
  t.true(Math.abs(r.metrics["mismatch/mismatch_kl"]! - 0.7 / 5) < 1e-6);
});

test("sequence level: every token of a response gets exp(sum of its log-ratios)", (t) => {
  const r = computeRolloutIsWeights(old, rollout, mask, {
    level: "sequence",
    mode: "truncate",
    threshold: 2,
  });
  t.true(close(r.weights.data, [e(-0.5), e(-0.5), e(-0.5), e(-0.2), e(-0.2), 0]), String(r.weights.data));
});

test("geometric level: exp(mean of the log-ratios over the response's tokens)", (t) => {
  const r = computeRolloutIsWeights(old, rollout, mask, {
    level: "geometric",
    mode: "truncate",
    threshold: 2,
  });
  const g0 = e(-0.5 / 3);
  const g1 = e(-0.1);
  t.true(close(r.weights.data, [g0, g0, g0, g1, g1, 0]), String(r.weights.data));
});

test("mask mode keeps the true ratios and drops out-of-bounds tokens (token) or responses (sequence) from the mask", (t) => {
  const tok = computeRolloutIsWeights(old, rollout, mask, { level: "token", mode: "mask", threshold: 1.5 });
  t.true(close(tok.weights.data, [e(0.5), e(-1), 1, 1, e(-0.2), 0]));
  // lower bound 1 / 1.5: e^0.5 is above 1.5, e^-1 below 2/3
  t.true(close(tok.responseMask, [0, 0, 1, 1, 1, 0]));
  t.is(tok.metrics["mismatch/rollout_is_masked_fraction"], 2 / 5);
  const seq = computeRolloutIsWeights(old, rollout, mask, {
    level: "sequence",
    mode: "mask",
    threshold: 1.5,
  });
  // e^-0.5 = 0.61 < 2/3: response 0 goes; e^-0.2 = 0.82 stays
  t.true(close(seq.responseMask, [0, 0, 0, 1, 1, 0]));
});

test("the veto drops a whole response with a catastrophic token, in truncate mode too", (t) => {
  const r = computeRolloutIsWeights(old, rollout, mask, {
    level: "token",
    mode: "truncate",
    threshold: 2,
    vetoThreshold: 0.5,
  });
  t.true(close(r.responseMask, [0, 0, 0, 1, 1, 0]));
  t.is(r.metrics["mismatch/rollout_is_veto_fraction"], 1 / 2);
  // the weights stay the (truncated) ratios
  t.true(close(r.weights.data, [e(0.5), e(-1), 1, 1, e(-0.2), 0]));
});
