import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  applyGradients,
  computeLogProbs,
  forwardBackward,
  gradientsToArrays,
  makeQwen2Config,
  maskedMean,
  padBatch,
  Qwen2Model,
  selectBackend,
} from "../../src/index.js";

const cfg = makeQwen2Config({
  vocabSize: 40,
  hiddenSize: 16,
  numHiddenLayers: 2,
  numAttentionHeads: 2,
  numKeyValueHeads: 1,
  intermediateSize: 32,
});
const rows = [
  [1, 2, 3, 4, 5, 6],
  [7, 8, 9],
  [10, 11, 12, 13],
];

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("micro-batched log-probs equal one big batch, and entropy is positive where scored", async (t) => {
  const model = Qwen2Model.random(cfg, { seed: 2, std: 0.3 });
  const batch = padBatch(rows, "right");
  const a = await computeLogProbs(model, batch, { microBatchSize: 1, withEntropy: true });
  const b = await computeLogProbs(model, batch, { microBatchSize: 3, withEntropy: true });
  for (let i = 0; i < a.logProbs.length; i++) t.true(Math.abs(a.logProbs[i]! - b.logProbs[i]!) < 1e-5);
  t.is(a.logProbs[0], 0);
  t.true(a.logProbs[1]! < 0);
  t.true(a.entropy![1]! > 0 && a.entropy![1]! <= Math.log(40) + 1e-4);
  // The mask only zeroes positions after the pass: with a's micro-batches the kernels run the same calls,
  // so the scored positions are a's bits (other row counts change OpenBLAS's summation order on some CPUs).
  const masked = await computeLogProbs(model, batch, {
    microBatchSize: 1,
    withEntropy: true,
    scoreMask: batch.mask,
  });
  for (let i = 0; i < batch.mask.length; i++)
    if (!batch.mask[i]) t.true(masked.logProbs[i] === 0 && masked.entropy![i] === 0);
    else t.is(masked.logProbs[i], a.logProbs[i]);
  model.dispose();
});

test("gradients accumulated over micro-batches equal the full-batch gradients", async (t) => {
  const model = Qwen2Model.random(cfg, { seed: 2, std: 0.3 });
  const batch = padBatch(rows, "right");
  const maskAll = tf.tensor2d(batch.mask, [batch.batch, batch.length], "float32");
  const loss = (mb: { rows: [number, number]; scores: { logProbs: tf.Tensor } }) =>
    tf.neg(
      tf.sum(tf.mul(mb.scores.logProbs, tf.slice(maskAll, [mb.rows[0], 0], [mb.rows[1] - mb.rows[0], -1]))),
    ) as tf.Scalar;
  const one = await gradientsToArrays(
    (await forwardBackward(model, batch, loss, { microBatchSize: 3 })).grads,
  );
  const many = await gradientsToArrays(
    (await forwardBackward(model, batch, loss, { microBatchSize: 1 })).grads,
  );
  t.is(one.size, model.variables().length);
  for (const [k, v] of one) {
    const u = many.get(k)!;
    for (let i = 0; i < v.length; i++)
      if (Math.abs(v[i]! - u[i]!) > 1e-4 * Math.max(1, Math.abs(v[i]!))) return t.fail(k);
  }
  t.pass();
  maskAll.dispose();
  model.dispose();
});

test.serial(
  "100 training steps keep tf.memory() flat and lower the loss; parameters move through get/setParameters",
  async (t) => {
    const model = Qwen2Model.random(cfg, { seed: 4 });
    const batch = padBatch(rows, "right");
    const opt = tf.train.adam(1e-2);
    const mask = tf.keep(tf.tensor2d(batch.mask, [batch.batch, batch.length], "float32"));
    const step = async () => {
      const { loss, grads } = await forwardBackward(
        model,
        batch,
        (mb) =>
          tf.neg(
            maskedMean(mb.scores.logProbs, tf.slice(mask, [mb.rows[0], 0], [mb.rows[1] - mb.rows[0], -1])),
          ),
        { microBatchSize: 2 },
      );
      applyGradients(model, opt, grads);
      return loss;
    };
    const first = await step();
    const counts: number[] = [];
    let last = first;
    for (let i = 0; i < 100; i++) {
      last = await step();
      counts.push(tf.memory().numTensors);
    }
    t.is(new Set(counts).size, 1, `numTensors over 100 steps: ${[...new Set(counts)]}`);
    t.true(last < first * 0.5, `loss ${first} -> ${last}`);
    // push weights into a second (rollout) model through flat arrays
    const other = Qwen2Model.random(cfg, { seed: 99, trainable: false });
    other.setParameters(await model.getParameters());
    const a = tf.tidy(() => model.forward(batch)).dataSync();
    const b = tf.tidy(() => other.forward(batch)).dataSync();
    t.deepEqual(a, b);
    t.throws(() => other.setParameters({ nope: new Float32Array(1) }), {
      message: /no parameter named nope/,
    });
    opt.dispose();
    mask.dispose();
    model.dispose();
    other.dispose();
  },
);
