import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { checkTrainerConfig, loadTrainerConfig } from "../../src/config/index.js";
import { makeQwen2Config, padBatch, Qwen2Model, selectBackend, tokenLogProbs } from "../../src/index.js";
import { forwardBackwardPeak } from "../../src/models/peak-bytes.js";
import { criticSettings } from "../../src/workers/critic.js";
import { threeLayerTestConfig } from "./tiny-config.js";

// Gradient checkpointing (actor_rollout_ref.model.enable_gradient_checkpointing): each decoder layer's
// activations are recomputed in the backward pass; the gradients must be those of the plain forward.

const rows = [
  [1, 2, 3, 4, 5, 6, 7, 8],
  [9, 10, 11],
  [12, 13, 14, 15, 16],
];

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

/** Gradients of a weighted log-prob + entropy loss, by variable index, as host arrays. */
async function gradients(model: Qwen2Model): Promise<Float32Array[]> {
  const batch = padBatch(rows, "left");
  const weight = tf.randomNormal([batch.batch, batch.length], 0, 1, "float32", 11);
  const vars = model.variables();
  const { value, grads } = tf.variableGrads(() => {
    const s = tokenLogProbs(model, batch, { withEntropy: true, temperature: 0.7 });
    return tf.add(tf.sum(tf.mul(s.logProbs, weight)), tf.mul(tf.sum(s.entropy!), 0.01)) as tf.Scalar;
  }, vars);
  value.dispose();
  weight.dispose();
  const host = await Promise.all(vars.map((v) => grads[v.name]!.data() as Promise<Float32Array>));
  for (const g of Object.values(grads)) g.dispose();
  return host;
}

for (const [name, extra] of [
  ["GQA with attention biases, untied head", { attentionBias: true, tieWordEmbeddings: false }],
  ["tied embeddings, no biases", { attentionBias: false, tieWordEmbeddings: true }],
] as const) {
  test.serial(
    `checkpointed layers give the gradients of the plain forward (${name}); no tensor leaks`,
    async (t) => {
      const cfg = threeLayerTestConfig(extra);
      const model = Qwen2Model.random(cfg, { seed: 5, std: 0.3 });
      const plain = await gradients(model);
      const tensorsBefore = tf.memory().numTensors;
      model.gradientCheckpointing = true;
      const recomputed = await gradients(model);
      t.is(tf.memory().numTensors, tensorsBefore, "the checkpointed pass leaves no tensor behind");
      let maxDiff = 0;
      let maxAbs = 0;
      for (const [i, g] of plain.entries())
        for (let j = 0; j < g.length; j++) {
          maxDiff = Math.max(maxDiff, Math.abs(g[j]! - recomputed[i]![j]!));
          maxAbs = Math.max(maxAbs, Math.abs(g[j]!));
        }
      t.log(`max |grad - grad(checkpointed)| = ${maxDiff} (max |grad| ${maxAbs.toExponential(2)})`);
      t.true(maxAbs > 1e-3, "the loss has gradients");
      t.true(maxDiff <= 1e-6 * maxAbs, `gradients match (max diff ${maxDiff})`);
      model.dispose();
    },
  );
}

test.serial("checkpointing cuts the peak activation bytes of a forward + backward (8 layers)", async (t) => {
  const cfg = makeQwen2Config({
    vocabSize: 40,
    hiddenSize: 32,
    numHiddenLayers: 8,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    intermediateSize: 96,
  });
  const model = Qwen2Model.random(cfg, { seed: 5, std: 0.1 });
  const batch = padBatch(rows, "left");
  const peak = async () => (await forwardBackwardPeak(model, batch)).activations;
  const plain = await peak();
  model.gradientCheckpointing = true;
  const checkpointed = await peak();
  t.log(
    `peak activation bytes: ${plain} plain, ${checkpointed} checkpointed (${(plain / checkpointed).toFixed(2)}x)`,
  );
  t.true(checkpointed > 0);
  t.true(plain >= 3 * checkpointed, `${plain} vs ${checkpointed}`);
  model.dispose();
});

test("enable_gradient_checkpointing is accepted for the actor and the critic (veRL's keys)", (t) => {
  const cfg = loadTrainerConfig({
    overrides: [
      "actor_rollout_ref.model.enable_gradient_checkpointing=true",
      "critic.model.enable_gradient_checkpointing=true",
      "critic.model.path=/a/model",
    ],
  });
  t.deepEqual(checkTrainerConfig(cfg), []);
  t.true(criticSettings(cfg, 1).gradientCheckpointing);
});
