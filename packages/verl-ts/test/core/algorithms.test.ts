import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  AdaptiveKlController,
  AlgorithmInputError,
  aggLoss,
  aggLossTf,
  applyKlPenalty,
  asTfTensor,
  computeAdvantage,
  computePolicyLoss,
  computeValueLoss,
  entropyFromLogits,
  entropyFromLogitsTf,
  FixedKlController,
  getPolicyLoss,
  KL_PENALTY_TYPES,
  klLossTf,
  klPenalty,
  klPenaltyTf,
  LOSS_AGG_MODES,
  listAdvantageEstimators,
  maskedMeanScalar,
  maskedVar,
  maskedWhiten,
  policyLossInput,
  policyLossTf,
  registerAdvantageEstimator,
  registerPolicyLoss,
  runPolicyLoss,
  type ScoreMatrix,
  tokenLevelScoresFromFinal,
  valueLossTf,
  vanillaPolicyLossTf,
} from "../../src/algorithms/index.js";
import { closeWithin, loadTorchFixture } from "./torch-fixture.js";

const { fx, B, T, m, mask, index } = loadTorchFixture("algorithms-torch.json");
const V = fx.vocab as number;
const close = closeWithin(1e-5);

const one = (rows: number[][]): ScoreMatrix => ({
  data: Float32Array.from(rows.flat()),
  shape: [rows.length, rows[0]!.length],
});

// ---------- hand-computed values ----------

test("GRPO by hand: (score - mean)/(std + 1e-6) with unbiased std; a group of one gets mean 0, std 1", (t) => {
  const mask1 = one([[1], [1], [1], [1]]);
  const r = one([[1], [-1], [1], [1]]);
  const { advantages } = computeAdvantage("grpo", {
    tokenLevelRewards: r,
    responseMask: mask1,
    index: [0, 0, 0, 1],
  });
  const std = Math.sqrt(4 / 3);
  close(t, advantages.data, [
    2 / 3 / (std + 1e-6),
    -4 / 3 / (std + 1e-6),
    2 / 3 / (std + 1e-6),
    1 / (1 + 1e-6),
  ]);
  const dr = computeAdvantage("grpo", {
    tokenLevelRewards: r,
    responseMask: mask1,
    index: [0, 0, 0, 1],
    normAdvByStdInGrpo: false,
  });
  close(t, dr.advantages.data, [2 / 3, -4 / 3, 2 / 3, 1]);
});

test("RLOO by hand: the score minus the mean of the other scores in the group", (t) => {
  const r = one([[1], [-1], [1], [0.5]]);
  const { advantages } = computeAdvantage("rloo", {
    tokenLevelRewards: r,
    responseMask: one([[1], [1], [1], [1]]),
    index: ["p", "p", "p", "q"],
  });
  close(t, advantages.data, [1 - 0, -1 - 1, 1 - 0, 0.5]);
});

test("GAE by hand: deltas and returns before whitening", (t) => {
  const { advantages, returns } = computeAdvantage("gae", {
    tokenLevelRewards: one([[0, 1]]),
    values: one([[0.5, 0.2]]),
    responseMask: one([[1, 1]]),
    gamma: 1,
    lam: 1,
  });
  close(t, returns.data, [1, 1]);
  // raw advantages [0.5, 0.8]: mean 0.65, unbiased var 0.045
  close(t, advantages.data, [-0.15 / Math.sqrt(0.045 + 1e-8), 0.15 / Math.sqrt(0.045 + 1e-8)]);
});

test("aggLoss by hand for all four modes", (t) => {
  const L = one([
    [1, 2, 3],
    [4, 5, 6],
  ]);
  const M = one([
    [1, 1, 0],
    [1, 0, 0],
  ]);
  close(t, aggLoss(L, M, "token-mean"), 7 / 3);
  close(t, aggLoss(L, M, "seq-mean-token-sum"), 3.5);
  close(t, aggLoss(L, M, "seq-mean-token-mean"), 2.75);
  close(t, aggLoss(L, M, "seq-mean-token-sum-norm"), 7 / 3);
  t.throws(() => aggLoss(L, M, "token-sum" as never), {
    instanceOf: AlgorithmInputError,
    message: /unknown loss_agg_mode/,
  });
});

test("policy loss by hand: clip at 1+eps for A>0 and the dual clip at c for A<0", (t) => {
  const old = one([[0, 0]]);
  const logp = one([[0.5, Math.log(4)]]);
  const adv = one([[1, -1]]);
  const res = computePolicyLoss(old, logp, adv, one([[1, 1]]));
  // token 0: max(-1.6487, -1.2) = -1.2 (clipped); token 1: min(3, max(4, 1.2)) = 3 (dual clip)
  close(t, res.pgLoss, (-1.2 + 3) / 2);
  // clipfrac counts L2 > L1: only token 0 (for token 1, L1 = 4 > L2 = 1.2)
  close(t, res.pgClipfrac, 0.5);
  close(t, res.pgClipfracLower, 0.5);
  close(t, res.ppoKl, -(0.5 + Math.log(4)) / 2);
  const asym = computePolicyLoss(old, logp, adv, one([[1, 1]]), { clipRatioLow: 0.2, clipRatioHigh: 0.28 });
  close(t, asym.pgLoss, (-1.28 + 3) / 2);
});

test("KL estimators by hand: k1, abs, k2 and k3 (clamped to +-10)", (t) => {
  const lp = one([[0]]);
  const ref = one([[Math.log(2)]]);
  close(t, klPenalty(lp, ref, "k1").data, [-Math.log(2)]);
  close(t, klPenalty(lp, ref, "abs").data, [Math.log(2)]);
  close(t, klPenalty(lp, ref, "k2").data, [0.5 * Math.log(2) ** 2]);
  close(t, klPenalty(lp, ref, "k3").data, [2 - Math.log(2) - 1]);
  close(t, klPenalty(one([[0]]), one([[30]]), "low_var_kl").data, [10]);
  t.throws(() => klPenalty(lp, ref, "k4" as never), { message: /unknown KL penalty "k4"/ });
});

test("entropy by hand: a uniform distribution over V gives ln V; a one-hot-ish one gives ~0", (t) => {
  const e = entropyFromLogits({ data: new Float32Array([3, 3, 3, 3, 0, 0, 0, 100]), shape: [2, 4] });
  t.deepEqual(e.shape, [2]);
  close(t, e.data, [Math.log(4), 0]);
});

test("adaptive KL controller moves beta by the clipped proportional error; the fixed one does not", (t) => {
  const a = new AdaptiveKlController(0.1, 0.1, 100);
  a.update(0.2, 10);
  close(t, a.value, 0.1 * 1.02);
  a.update(0.1, 10);
  close(t, a.value, 0.1 * 1.02);
  const f = new FixedKlController(0.1);
  f.update(5, 10);
  t.is(f.value, 0.1);
});

test("token-level scores land on the last response token of each row", (t) => {
  const s = tokenLevelScoresFromFinal(
    [1, -1],
    one([
      [1, 1, 0],
      [1, 0, 1],
    ]),
  );
  t.deepEqual(Array.from(s.data), [0, 1, 0, 0, 0, -1]);
  t.throws(() => tokenLevelScoresFromFinal([1], one([[0, 0]])), { message: /row 0 has no response token/ });
});

test("estimators are registered by name and new ones plug in", (t) => {
  t.deepEqual(
    listAdvantageEstimators().filter((n) => ["gae", "grpo", "rloo", "reinforce_plus_plus"].includes(n)),
    ["gae", "grpo", "reinforce_plus_plus", "rloo"],
  );
  registerAdvantageEstimator("zero_test", ({ tokenLevelRewards }) => ({
    advantages: { data: new Float32Array(tokenLevelRewards.data.length), shape: tokenLevelRewards.shape },
    returns: tokenLevelRewards,
  }));
  t.is(
    computeAdvantage("zero_test", { tokenLevelRewards: one([[1]]), responseMask: one([[1]]) }).advantages
      .data[0],
    0,
  );
  t.throws(() => computeAdvantage("grpoo", { tokenLevelRewards: one([[1]]), responseMask: one([[1]]) }), {
    message: /unknown advantage estimator "grpoo" \(known: .*grpo/,
  });
  t.throws(() => computeAdvantage("grpo", { tokenLevelRewards: one([[1]]), responseMask: one([[1]]) }), {
    message: /needs "index"/,
  });
});

// ---------- against the PyTorch reference ----------

test("torch: masked mean, variance and whitening", (t) => {
  const v = m("dense_rewards");
  const vals = m("values");
  const x: ScoreMatrix = { data: v.data.map((a, i) => a + vals.data[i]!), shape: [B, T] };
  close(t, maskedMeanScalar(x, mask), fx.masked.mean);
  close(t, maskedVar(x, mask), fx.masked.var);
  close(t, maskedVar(x, mask, false), fx.masked.var_biased);
  close(t, maskedWhiten(x, mask).data, fx.masked.whiten);
  close(t, maskedWhiten(x, mask, false).data, fx.masked.whiten_keep_mean);
});

test("torch: GRPO, Dr.GRPO, RLOO, REINFORCE++ (+baseline) and GAE", (t) => {
  const scores = m("token_scores");
  const dense = m("dense_rewards");
  const A = fx.advantage;
  const run = (name: string, extra: object, r = scores) =>
    computeAdvantage(name, { tokenLevelRewards: r, responseMask: mask, index, ...extra });
  close(t, run("grpo", {}).advantages.data, A.grpo);
  close(t, run("grpo", { normAdvByStdInGrpo: false }).advantages.data, A.grpo_no_std);
  close(t, run("grpo", {}, dense).advantages.data, A.grpo_dense);
  close(t, run("rloo", {}).advantages.data, A.rloo);
  close(t, run("reinforce_plus_plus", { gamma: 1 }, dense).advantages.data, A.reinforce_plus_plus_g1);
  const rpp = run("reinforce_plus_plus", { gamma: 0.99 }, dense);
  close(t, rpp.advantages.data, A.reinforce_plus_plus_g099);
  close(t, rpp.returns.data, A.reinforce_plus_plus_g099_returns);
  close(t, run("reinforce_plus_plus_baseline", {}).advantages.data, A.reinforce_plus_plus_baseline);
  const vals = m("values");
  const masked: ScoreMatrix = { data: vals.data.map((v, i) => v * mask.data[i]!), shape: [B, T] };
  const g = run("gae", { values: masked, gamma: 0.99, lam: 0.95 }, dense);
  close(t, g.advantages.data, A.gae_g099_l095);
  close(t, g.returns.data, A.gae_g099_l095_returns);
  const tl = tokenLevelScoresFromFinal(fx.inputs.scores, mask);
  close(t, tl.data, fx.inputs.token_scores);
});

test("torch: clipped and dual-clipped policy loss, all loss_agg_modes, both clip settings", (t) => {
  for (const mode of LOSS_AGG_MODES) {
    for (const [name, high] of [
      ["sym", 0.2],
      ["asym", 0.28],
    ] as const) {
      const want = fx.policy_loss[`${mode}/${name}`];
      const got = computePolicyLoss(m("old_log_prob"), m("log_prob"), m("advantages"), mask, {
        clipRatio: 0.2,
        clipRatioHigh: high,
        clipRatioC: 3,
        lossAggMode: mode,
      });
      close(t, got.pgLoss, want.pg_loss);
      close(t, got.pgClipfrac, want.pg_clipfrac);
      close(t, got.ppoKl, want.ppo_kl);
      close(t, got.pgClipfracLower, want.pg_clipfrac_lower);
    }
  }
  t.true(fx.policy_loss["token-mean/sym"].pg_clipfrac_lower > 0, "the fixture exercises the dual clip");
});

test("torch: tfjs policy loss matches the value and the gradient with respect to log-probs", (t) => {
  for (const mode of LOSS_AGG_MODES) {
    for (const [name, high] of [
      ["sym", 0.2],
      ["asym", 0.28],
    ] as const) {
      const want = fx.policy_loss[`${mode}/${name}`];
      const lp = tf.tensor2d(fx.inputs.log_prob, [B, T]);
      const opts = { clipRatio: 0.2, clipRatioHigh: high, lossAggMode: mode };
      const f = (x: tf.Tensor) => policyLossTf(m("old_log_prob"), x, m("advantages"), mask, opts).pgLoss;
      const { value, grad } = tf.valueAndGrad(f)(lp);
      close(t, value.dataSync(), [want.pg_loss]);
      close(t, grad.dataSync(), want.grad);
      const metrics = policyLossTf(m("old_log_prob"), lp, m("advantages"), mask, opts);
      close(t, metrics.pgClipfrac.dataSync(), [want.pg_clipfrac]);
      close(t, metrics.ppoKl.dataSync(), [want.ppo_kl]);
      close(t, metrics.pgClipfracLower.dataSync(), [want.pg_clipfrac_lower]);
      tf.dispose([
        lp,
        value,
        grad,
        metrics.pgLoss,
        metrics.pgClipfrac,
        metrics.ppoKl,
        metrics.pgClipfracLower,
      ]);
    }
  }
});

test("policy losses are registered by name: vanilla is the clipped PPO loss, with its own metrics", (t) => {
  t.is(getPolicyLoss("vanilla").fn, vanillaPolicyLossTf);
  t.deepEqual(getPolicyLoss("vanilla").metrics, ["pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"]);
  registerPolicyLoss(
    "plain_pg_test",
    (input) => ({
      pgLoss: input.aggregate(tf.neg(tf.mul(input.logProb, asTfTensor(input.advantages)))),
      metrics: { mean_logp: tf.mean(input.logProb) as tf.Scalar },
    }),
    ["mean_logp"],
  );
  const lp = tf.tensor2d([[0.5, -1]]);
  const r = runPolicyLoss("plain_pg_test", policyLossInput(one([[0, 0]]), lp, one([[1, 3]]), one([[1, 1]])));
  close(t, r.pgLoss.dataSync(), [-(0.5 * 1 - 1 * 3) / 2]);
  close(t, r.metrics.mean_logp!.dataSync(), [-0.25]);
  t.throws(() => getPolicyLoss("vanila"), { message: /unknown policy loss "vanila" \(known: .*vanilla/ });
});

test("torch: KL penalties (typed arrays and tfjs) and the KL loss gradient", (t) => {
  for (const kind of ["kl", "abs", "mse", "low_var_kl"] as const) {
    const want = fx.kl[kind];
    close(t, klPenalty(m("log_prob"), m("ref_log_prob"), kind).data, want.values);
    const lp = tf.tensor2d(fx.inputs.log_prob, [B, T]);
    const tv = klPenaltyTf(lp, m("ref_log_prob"), kind);
    close(t, tv.dataSync(), want.values);
    const { value, grad } = tf.valueAndGrad((x: tf.Tensor) => klLossTf(x, m("ref_log_prob"), mask, kind))(lp);
    close(t, value.dataSync(), [want.loss_token_mean]);
    close(t, grad.dataSync(), want.grad);
    tf.dispose([lp, tv, value, grad]);
  }
  const far = fx.kl.low_var_kl_far;
  close(t, klPenalty(one([far.log_prob]), one([far.ref]), "k3").data, far.values);
});

test("torch: KL as an in-reward penalty with the fixed and the adaptive controller", (t) => {
  const fixed = applyKlPenalty(
    m("token_scores"),
    m("old_log_prob"),
    m("ref_log_prob"),
    mask,
    new FixedKlController(0.05),
    "low_var_kl",
  );
  close(t, fixed.tokenLevelRewards.data, fx.kl_in_reward.fixed.rewards);
  close(t, fixed.metrics["actor/reward_kl_penalty"]!, fx.kl_in_reward.fixed.current_kl);
  t.is(fixed.metrics["actor/reward_kl_penalty_coeff"], 0.05);
  const ctrl = new AdaptiveKlController(0.05, 0.01, 100);
  const ad = applyKlPenalty(
    m("token_scores"),
    m("old_log_prob"),
    m("ref_log_prob"),
    mask,
    ctrl,
    "low_var_kl",
  );
  close(t, ad.tokenLevelRewards.data, fx.kl_in_reward.adaptive.rewards);
  close(t, ctrl.value, fx.kl_in_reward.adaptive.beta_after);
});

test("torch: entropy from logits (typed arrays and tfjs, with its gradient)", (t) => {
  const logits = { data: Float32Array.from(fx.inputs.logits), shape: [B, T, V] };
  close(t, entropyFromLogits(logits).data, fx.entropy.values);
  const z = tf.tensor3d(fx.inputs.logits, [B, T, V]);
  close(t, entropyFromLogitsTf(z).dataSync(), fx.entropy.values);
  const { value, grad } = tf.valueAndGrad((x: tf.Tensor) =>
    aggLossTf(entropyFromLogitsTf(x), mask, "token-mean"),
  )(z);
  close(t, value.dataSync(), [fx.entropy.loss_token_mean]);
  close(t, grad.dataSync(), fx.entropy.grad, 1e-4);
  tf.dispose([z, value, grad]);
});

test("torch: clipped value loss", (t) => {
  for (const mode of ["token-mean", "seq-mean-token-mean"] as const) {
    const r = computeValueLoss(m("vpreds"), m("returns"), m("values"), mask, 0.5, mode);
    close(t, r.vfLoss, fx.value_loss[mode].vf_loss);
    close(t, r.vfClipfrac, fx.value_loss[mode].vf_clipfrac);
  }
});

test("torch: tfjs value loss matches the value, and its gradient matches finite differences", (t) => {
  for (const mode of ["token-mean", "seq-mean-token-mean"] as const) {
    const vp = tf.tensor2d(fx.inputs.vpreds, [B, T]);
    const f = (x: tf.Tensor) => valueLossTf(x, m("values"), m("returns"), mask, 0.5, mode);
    const { value, grad } = tf.valueAndGrad(f)(vp);
    close(t, value.dataSync(), [fx.value_loss[mode].vf_loss]);
    // central differences of the (torch-checked) host loss: exact for its quadratic pieces
    const base = Float32Array.from(fx.inputs.vpreds as number[]);
    const g = grad.dataSync();
    const h = 1e-2;
    for (let i = 0; i < base.length; i++) {
      const at = (d: number) => {
        const v = Float32Array.from(base);
        v[i]! += d;
        return computeValueLoss({ data: v, shape: [B, T] }, m("returns"), m("values"), mask, 0.5, mode)
          .vfLoss;
      };
      const fd = (at(h) - at(-h)) / (2 * h);
      t.true(
        Math.abs(fd - g[i]!) < 1e-3 * Math.max(1, Math.abs(fd)),
        `${mode} d/dvpred[${i}]: ${g[i]} vs ${fd}`,
      );
    }
    tf.dispose([vp, value, grad]);
  }
});

test("remax: returns are the reverse sums of the masked rewards, advantages subtract the greedy baseline", (t) => {
  const out = computeAdvantage("remax", {
    tokenLevelRewards: { data: Float32Array.from([0, 0, 1, 0, 0, 2, 0, 0]), shape: [2, 4] },
    responseMask: { data: Uint8Array.from([1, 1, 1, 0, 1, 0, 1, 0]), shape: [2, 4] },
    rewardBaselines: [0.25, 1],
  });
  t.deepEqual(Array.from(out.returns.data), [1, 1, 1, 0, 0, 0, 0, 0], "masked reward tokens do not count");
  t.deepEqual(Array.from(out.advantages.data), [0.75, 0.75, 0.75, 0, -1, 0, -1, 0]);
  t.throws(
    () =>
      computeAdvantage("remax", {
        tokenLevelRewards: { data: new Float32Array(4), shape: [2, 2] },
        responseMask: { data: new Uint8Array(4).fill(1), shape: [2, 2] },
      }),
    { message: /remax needs rewardBaselines, one per row \(2\), got none/ },
  );
});

test("the host (typed-array) twins equal the tensor losses the trainer runs: every KL estimator, the PPO loss and the value loss, in every aggregation mode", (t) => {
  // seeded inputs with both signs of advantage and ratios far enough from 1 to hit every clip
  let state = 7;
  const rand = () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state / 2 ** 31;
  };
  const [R, C] = [5, 7];
  const matrix = (f: () => number): ScoreMatrix => ({
    data: Float32Array.from({ length: R * C }, f),
    shape: [R, C],
  });
  const old = matrix(() => -3 * rand());
  const logp = matrix(() => -3 * rand());
  const adv = matrix(() => 4 * rand() - 2);
  const returns = matrix(() => 2 * rand() - 1);
  const values = matrix(() => 2 * rand() - 1);
  const vpreds = matrix(() => 2 * rand() - 1);
  const msk = matrix(() => (rand() < 0.8 ? 1 : 0));
  for (const kind of KL_PENALTY_TYPES) {
    const lp = tf.tensor2d(logp.data, [R, C]);
    const tv = klPenaltyTf(lp, old, kind);
    close(t, tv.dataSync(), klPenalty(logp, old, kind).data);
    tf.dispose([lp, tv]);
  }
  for (const lossAggMode of LOSS_AGG_MODES) {
    const options = { clipRatioLow: 0.2, clipRatioHigh: 0.28, clipRatioC: 2, lossAggMode };
    const host = computePolicyLoss(old, logp, adv, msk, options);
    const lp = tf.tensor2d(logp.data, [R, C]);
    const out = runPolicyLoss("vanilla", policyLossInput(old, lp, adv, msk, options));
    close(t, out.pgLoss.dataSync(), [host.pgLoss]);
    close(t, out.metrics.pg_clipfrac!.dataSync(), [host.pgClipfrac]);
    close(t, out.metrics.ppo_kl!.dataSync(), [host.ppoKl]);
    close(t, out.metrics.pg_clipfrac_lower!.dataSync(), [host.pgClipfracLower]);
    t.true(host.pgClipfrac > 0 && host.pgClipfracLower > 0, "the inputs hit both clips");
    const vp = tf.tensor2d(vpreds.data, [R, C]);
    const vf = valueLossTf(vp, values, returns, msk, 0.3, lossAggMode);
    close(t, vf.dataSync(), [computeValueLoss(vpreds, returns, values, msk, 0.3, lossAggMode).vfLoss]);
    tf.dispose([lp, vp, vf, out.pgLoss, ...Object.values(out.metrics)]);
  }
});
