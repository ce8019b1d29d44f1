import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  forwardBackward,
  loadModel,
  padBatch,
  parameterSpecs,
  readSafetensors,
  selectBackend,
} from "../../src/index.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models");

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

for (const name of ["qwen2-tiny", "llama-tiny-tied"]) {
  const dir = join(FIX, name);
  const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
  const B = expected.ids.length;
  const L = expected.ids[0].length;
  const batch = {
    ids: Int32Array.from(expected.ids.flat()),
    mask: Uint8Array.from(expected.mask.flat()),
    batch: B,
    length: L,
  };

  test(`${name}: logits match the PyTorch reference within 1e-4 (left padding included)`, (t) => {
    const model = loadModel(dir);
    const logits = tf.tidy(() => model.forward(batch));
    const got = logits.dataSync();
    const V = model.config.vocabSize;
    let maxErr = 0;
    for (let b = 0; b < B; b++)
      for (let i = 0; i < L; i++) {
        if (!batch.mask[b * L + i]) continue;
        for (let v = 0; v < V; v++)
          maxErr = Math.max(maxErr, Math.abs(got[(b * L + i) * V + v]! - expected.logits[b][i][v]));
      }
    t.true(maxErr < 1e-4, `max |diff| ${maxErr}`);
    logits.dispose();
    model.dispose();
  });

  test(`${name}: gradients of a scalar loss match the PyTorch reference`, async (t) => {
    const model = loadModel(dir);
    const w = new Float32Array(B * L);
    for (let b = 0; b < B; b++)
      for (let i = 1; i < L; i++)
        w[b * L + i] =
          batch.mask[b * L + i]! && batch.mask[b * L + i - 1]! ? expected.loss_weights[b][i - 1] : 0;
    const weights = tf.tensor2d(w, [B, L]);
    const { loss, grads } = await forwardBackward(
      model,
      batch,
      (mb) => tf.sum(tf.mul(mb.scores.logProbs, weights)) as tf.Scalar,
      {
        microBatchSize: B,
      },
    );
    t.true(
      Math.abs(loss - expected.loss) < 1e-3 * Math.max(1, Math.abs(expected.loss)),
      `loss ${loss} vs ${expected.loss}`,
    );
    const specs = new Map(parameterSpecs(model.config).map((s) => [s.name, s]));
    for (const [pname, want] of Object.entries(expected.grads) as [string, number[]][]) {
      const s = specs.get(pname)!;
      let g = grads.get(pname)!;
      if (s.transposed) g = tf.transpose(g);
      const got = g.dataSync();
      let maxErr = 0;
      let maxRef = 0;
      for (let i = 0; i < want.length; i++) {
        maxErr = Math.max(maxErr, Math.abs(got[i]! - want[i]!));
        maxRef = Math.max(maxRef, Math.abs(want[i]!));
      }
      t.true(maxErr < 1e-4 * Math.max(1, maxRef), `${pname}: max |diff| ${maxErr} (max |grad| ${maxRef})`);
    }
    for (const g of grads.values()) g.dispose();
    weights.dispose();
    model.dispose();
  });

  test(`${name}: bf16 and fp16 checkpoints written by torch load as float32 within their precision`, (t) => {
    const f32 = readSafetensors(join(dir, "model.safetensors"));
    for (const [file, rel] of [
      ["model-bf16.safetensors", 2 ** -8],
      ["model-f16.safetensors", 2 ** -11],
    ] as const) {
      const low = readSafetensors(join(dir, file));
      t.is(low.size, f32.size);
      for (const [k, v] of f32) {
        const u = low.get(k)!;
        t.deepEqual(u.shape, v.shape);
        for (let i = 0; i < v.data.length; i++)
          if (Math.abs(u.data[i]! - v.data[i]!) > rel * Math.abs(v.data[i]!) + 1e-7)
            return t.fail(`${file} ${k}[${i}]`);
      }
    }
  });
}

test("a padded row gives the same logits as the same row alone", (t) => {
  const model = loadModel(join(FIX, "qwen2-tiny"));
  const row = [3, 9, 4, 1];
  const alone = tf.tidy(() => model.forward(padBatch([row]), { lastOnly: true })).dataSync();
  const left = tf
    .tidy(() => model.forward(padBatch([row, [1, 2, 3, 4, 5, 6, 7]], "left"), { lastOnly: true }))
    .dataSync();
  const right = tf.tidy(() => model.forward(padBatch([row, [1, 2, 3, 4, 5, 6, 7]], "right"))).dataSync();
  const V = model.config.vocabSize;
  for (let v = 0; v < V; v++) {
    t.true(Math.abs(alone[v]! - left[v]!) < 1e-5);
    t.true(Math.abs(alone[v]! - right[3 * V + v]!) < 1e-5);
  }
  model.dispose();
});
