/**
 * A tiny model that has learned one habit: answer every prompt with a calculator call. A random model
 * almost never writes the call, so the training test starts from this one to see the tool used.
 * Built in seconds: a random 2-layer model, then supervised steps on "<prompt><c>6*7</c>".
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import {
  applyGradients,
  buildByteBpeTokenizer,
  chatMlTemplate,
  createRandomPretrained,
  forwardBackward,
  padBatch,
  saveModel,
} from "@torl-ts/verl";
import { calculatorRows } from "../src/train.js";

export const HABIT = "<c>6*7</c>";

export async function calculatorHabitModel(steps = 40): Promise<{ dir: string; finalLoss: number }> {
  const tokenizer = buildByteBpeTokenizer();
  const dir = mkdtempSync(join(tmpdir(), "calc-habit-model-"));
  const model = createRandomPretrained(
    dir,
    tokenizer,
    { hiddenSize: 32, numHiddenLayers: 2, numAttentionHeads: 4, numKeyValueHeads: 2, intermediateSize: 64 },
    { seed: 9, std: 0.1 },
  );
  const prompts = calculatorRows(4, 7).map((r) => tokenizer.encode(chatMlTemplate(r.prompt)));
  const habit = tokenizer.encode(HABIT);
  const batch = padBatch(
    prompts.map((p) => [...p, ...habit]),
    "right",
    tokenizer.padTokenId,
  );
  const target = new Float32Array(batch.batch * batch.length);
  prompts.forEach((p, b) => {
    target.fill(1, b * batch.length + p.length, b * batch.length + p.length + habit.length);
  });
  const optimizer = tf.train.adam(3e-2);
  let finalLoss = Number.NaN;
  for (let step = 0; step < steps; step++) {
    const { loss, grads } = await forwardBackward(model, batch, ({ rows: [s, e], scores }) => {
      const m = tf.tensor2d(target.subarray(s * batch.length, e * batch.length), [e - s, batch.length]);
      return tf.div(tf.neg(tf.sum(tf.mul(scores.logProbs, m))), habit.length * batch.batch) as tf.Scalar;
    });
    applyGradients(model, optimizer, grads);
    finalLoss = loss;
  }
  await saveModel(model, dir, { tokenizer });
  return { dir, finalLoss };
}
