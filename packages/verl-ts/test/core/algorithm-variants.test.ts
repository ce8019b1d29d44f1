import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  AlgorithmInputError,
  computeAdvantage,
  getPolicyLoss,
  listAdvantageEstimators,
  listPolicyLosses,
  type PolicyLossOptions,
  policyLossInput,
  registerPolicyLoss,
  runPolicyLoss,
  type ScoreMatrix,
} from "../../src/algorithms/index.js";
import { closeWithin, loadTorchFixture } from "./torch-fixture.js";

// Reference values: scripts/core/make-algorithm-variant-fixtures.py (PyTorch, formulas from the papers).
const { fx, B, T, m, mask, index } = loadTorchFixture("algorithm-variants-torch.json");

const close = closeWithin(1e-6);

test("grpo_passk, opo and gpg are registered by name and match the PyTorch reference", (t) => {
  for (const name of ["grpo_passk", "opo", "gpg", "reinforce_plus_plus_baseline"])
    t.true(listAdvantageEstimators().includes(name), name);
  const cases: [string, string, string, boolean?][] = [
    ["grpo_passk", "token_scores", "grpo_passk_outcome"],
    ["grpo_passk", "token_scores", "grpo_passk_outcome_no_std", false],
    ["grpo_passk", "dense_rewards", "grpo_passk_dense"],
    ["opo", "token_scores", "opo_outcome"],
    ["opo", "dense_rewards", "opo_dense"],
    ["gpg", "token_scores", "gpg_outcome"],
    ["gpg", "dense_rewards", "gpg_dense"],
  ];
  for (const [name, rewards, key, norm] of cases) {
    const out = computeAdvantage(name, {
      tokenLevelRewards: m(rewards),
      responseMask: mask,
      index,
      ...(norm === undefined ? {} : { normAdvByStdInGrpo: norm }),
    });
    close(t, out.advantages.data, fx.advantage[key]);
    close(t, out.returns.data, fx.advantage[key]);
  }
});

test("grpo_passk by hand: only the best of each group learns, by its lead over the runner-up", (t) => {
  const one = (v: number[]): ScoreMatrix => ({ data: Float32Array.from(v), shape: [v.length, 1] });
  const out = computeAdvantage("grpo_passk", {
    tokenLevelRewards: one([0.2, 0.9, 0.5, 1, 1]),
    responseMask: one([1, 1, 1, 1, 1]),
    index: [0, 0, 0, 1, 1],
    normAdvByStdInGrpo: false,
  });
  close(t, out.advantages.data, [0, 0.9 - 0.5, 0, 0, 0]);
  t.throws(
    () =>
      computeAdvantage("grpo_passk", {
        tokenLevelRewards: one([1, 0]),
        responseMask: one([1, 1]),
        index: [0, 1],
      }),
    { instanceOf: AlgorithmInputError, message: /rollout\.n >= 2.*group 0 has 1/ },
  );
});

function lossCase(name: string, mode: string, tokenChoice?: "host" | "tensor") {
  const want = fx.policy_loss[`${name}/${mode}`];
  const options: PolicyLossOptions = { ...(fx.options[name] ?? {}), lossAggMode: mode, tokenChoice };
  const lp = tf.tensor2d(fx.inputs.log_prob, [B, T]);
  const input = (x: tf.Tensor) => policyLossInput(m("old_log_prob"), x, m("advantages"), mask, options);
  const { value, grad } = tf.valueAndGrad((x: tf.Tensor) => runPolicyLoss(name, input(x)).pgLoss)(lp);
  const out = runPolicyLoss(name, input(lp));
  const metrics = Object.fromEntries(Object.entries(out.metrics).map(([k, v]) => [k, v.dataSync()[0]!]));
  const result = { value: value.dataSync()[0]!, grad: grad.dataSync(), metrics, want };
  tf.dispose([lp, value, grad, out.pgLoss, ...Object.values(out.metrics)]);
  return result;
}

for (const name of ["gspo", "gpg", "clip_cov", "kl_cov"]) {
  test(`${name} loss: value, gradient and its own metrics match the PyTorch reference`, (t) => {
    t.true(listPolicyLosses().includes(name));
    for (const mode of ["token-mean", "seq-mean-token-mean"]) {
      const r = lossCase(name, mode);
      close(t, [r.value], [r.want.pg_loss]);
      close(t, r.grad, r.want.grad);
      t.deepEqual(Object.keys(r.metrics).sort(), Object.keys(r.want.metrics).sort());
      for (const [k, v] of Object.entries(r.want.metrics as Record<string, number>))
        close(t, [r.metrics[k]!], [v]);
    }
  });
}

// The token choice made in tensor ops (what webgpu uses) picks the same tokens as the host's here.
for (const name of ["clip_cov", "kl_cov"]) {
  test(`${name} with tokenChoice "tensor": the PyTorch reference's value, gradient and metrics`, (t) => {
    for (const mode of ["token-mean", "seq-mean-token-mean"]) {
      const r = lossCase(name, mode, "tensor");
      close(t, [r.value], [r.want.pg_loss]);
      close(t, r.grad, r.want.grad);
      for (const [k, v] of Object.entries(r.want.metrics as Record<string, number>))
        close(t, [r.metrics[k]!], [v]);
    }
  });
}

for (const tokenChoice of ["host", "tensor"] as const)
  test(`clip_cov (tokenChoice ${tokenChoice}) with more candidates than clip_cov_ratio allows cuts exactly the limit, chosen by the seed`, (t) => {
    const base: PolicyLossOptions = { clipCovRatio: 0.05, clipCovLb: -100, clipCovUb: 100, tokenChoice };
    const cut = (seed: number) => {
      const lp = tf.tensor2d(fx.inputs.log_prob, [B, T]);
      const out = runPolicyLoss(
        "clip_cov",
        policyLossInput(m("old_log_prob"), lp, m("advantages"), mask, { ...base, seed }),
      );
      const frac = out.metrics.pg_clipfrac!.dataSync()[0]!;
      const grad = tf
        .grad(
          (x: tf.Tensor) =>
            runPolicyLoss(
              "clip_cov",
              policyLossInput(m("old_log_prob"), x, m("advantages"), mask, { ...base, seed }),
            ).pgLoss,
        )(lp)
        .dataSync();
      tf.dispose([lp, out.pgLoss, ...Object.values(out.metrics)]);
      return { frac, zeroGrads: Array.from(grad).map((g, i) => (g === 0 && mask.data[i] ? i : -1)) };
    };
    const tokens = mask.data.reduce((s, x) => s + x, 0);
    const limit = Math.max(1, Math.floor(0.05 * tokens));
    const a = cut(1);
    close(t, [a.frac * tokens], [limit], 1e-5);
    t.deepEqual(cut(1), a, "the same seed cuts the same tokens");
    const others = [2, 3, 4, 5].map((s) => cut(s).zeroGrads.join());
    t.true(
      others.some((z) => z !== a.zeroGrads.join()),
      "another seed cuts other tokens",
    );
  });

test("a loss that reports other metrics than it registered is refused by name", (t) => {
  registerPolicyLoss(
    "misreporting_test",
    (input) => ({ pgLoss: input.aggregate(tf.neg(input.logProb)), metrics: {} }),
    ["pg_clipfrac"],
  );
  const lp = tf.tensor2d([[0.1]]);
  const one: ScoreMatrix = { data: Float32Array.from([1]), shape: [1, 1] };
  t.throws(() => runPolicyLoss("misreporting_test", policyLossInput(one, lp, one, one)), {
    instanceOf: AlgorithmInputError,
    message: /"misreporting_test" returned metrics \[\] but registered \[pg_clipfrac\]/,
  });
  t.throws(() => getPolicyLoss("nope"), { message: /external_lib/ });
});
