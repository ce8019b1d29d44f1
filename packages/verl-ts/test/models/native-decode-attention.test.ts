/**
 * The native decode-step attention (biases, rotary embedding, in-place cache write, softmax attention in
 * one kernel) against a float64 reference of the op-by-op path's arithmetic, with a different slot per
 * row as the ragged rollout cache has; and the model's decode step on it against the host path.
 */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { installNativeMatmul, KVCache, padBatch, Qwen2Model, selectBackend } from "../../src/index.js";
import { nativeDecodeAttention } from "../../src/models/native-decode-attention.js";
import { Rotary } from "../../src/models/rotary.js";
import { nativeAddon, seededUniform as random } from "./helpers.js";
import { tinyTestConfig } from "./tiny-config.js";

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  installNativeMatmul("wasm");
});

const NEG = -1e9;

test.serial(
  "the decode attention kernel equals the op-by-op arithmetic, per-row slots and masks",
  async (t) => {
    if (!nativeAddon(t)) return;
    const [B, H, KV, D, cap] = [3, 4, 2, 8, 16];
    const G = H / KV;
    const half = D / 2;
    const slots = Int32Array.from([5, 2, 7]);
    const positions = Int32Array.from([5, 9, 3]);
    const q = random(B * H * D, 1);
    const k = random(B * KV * D, 2);
    const v = random(B * KV * D, 3);
    const qb = random(H * D, 4, 0.5);
    const kb = random(KV * D, 5, 0.5);
    const vb = random(KV * D, 6, 0.5);
    const cacheK = random(B * KV * cap * D, 7);
    const cacheV = random(B * KV * cap * D, 8);
    // Row b attends to its slots up to its own, one earlier slot masked out (a pad).
    const mask = new Float32Array(B * cap).fill(NEG);
    for (let b = 0; b < B; b++) {
      mask.fill(0, b * cap, b * cap + slots[b]! + 1);
      if (slots[b]! > 1) mask[b * cap + 1] = NEG;
    }
    const { cos, sin } = new Rotary(D, 10000).stepTables(positions);
    const rotate = (x: ArrayLike<number>, at: number, bias: ArrayLike<number>, bAt: number, row: number) => {
      const out = new Float64Array(D);
      for (let j = 0; j < half; j++) {
        const x1 = x[at + j]! + bias[bAt + j]!;
        const x2 = x[at + j + half]! + bias[bAt + j + half]!;
        const c = cos[row * half + j]!;
        const s = sin[row * half + j]!;
        out[j] = x1 * c - x2 * s;
        out[j + half] = x2 * c + x1 * s;
      }
      return out;
    };
    // Reference in float64: the cache after the write, and the context.
    const wantK = Float64Array.from(cacheK);
    const wantV = Float64Array.from(cacheV);
    const want = new Float64Array(B * H * D);
    for (let b = 0; b < B; b++)
      for (let h = 0; h < KV; h++) {
        const block = (b * KV + h) * cap * D;
        const kr = rotate(k, (b * KV + h) * D, kb, h * D, b);
        for (let e = 0; e < D; e++) {
          wantK[block + slots[b]! * D + e] = kr[e]!;
          wantV[block + slots[b]! * D + e] = v[(b * KV + h) * D + e]! + vb[h * D + e]!;
        }
        for (let g = 0; g < G; g++) {
          const head = h * G + g;
          const qr = rotate(q, (b * H + head) * D, qb, head * D, b);
          const scores = new Float64Array(cap);
          for (let j = 0; j < cap; j++) {
            let dot = 0;
            for (let e = 0; e < D; e++) dot += qr[e]! * wantK[block + j * D + e]!;
            scores[j] = dot / Math.sqrt(D) + mask[b * cap + j]!;
          }
          const max = Math.max(...scores);
          const exps = scores.map((s) => Math.exp(s - max));
          const sum = exps.reduce((a, x) => a + x, 0);
          for (let e = 0; e < D; e++) {
            let acc = 0;
            for (let j = 0; j < cap; j++) acc += (exps[j]! / sum) * wantV[block + j * D + e]!;
            want[(b * H + head) * D + e] = acc;
          }
        }
      }
    const keys = tf.tensor4d(cacheK, [B, KV, cap, D]);
    const values = tf.tensor4d(cacheV, [B, KV, cap, D]);
    // The kernel's projections are hn @ w: hn's rows are unit vectors, so q, k and v arrive exactly.
    const hn = tf.tidy(() => tf.slice(tf.eye(H * D), [0, 0], [B, H * D])) as tf.Tensor2D;
    const tables = {
      cos: tf.tensor2d(cos, [B, half]),
      sin: tf.tensor2d(sin, [B, half]),
      mask: tf.tensor2d(mask, [B, cap]),
      slots,
    };
    // Rows of hn select rows of the weights: weights [H*D, out] whose first B rows are q, k, v.
    const asWeight = (x: Float32Array, width: number) => {
      const w = new Float32Array(H * D * width);
      w.set(x);
      return tf.tensor2d(w, [H * D, width]);
    };
    const w = {
      q: asWeight(q, H * D),
      k: asWeight(k, KV * D),
      v: asWeight(v, KV * D),
      o: tf.zeros([H * D, H * D]),
      qBias: tf.tensor1d(qb),
      kBias: tf.tensor1d(kb),
      vBias: tf.tensor1d(vb),
    };
    const context = tf.tidy(() =>
      nativeDecodeAttention(hn, w, keys, values, tables, { heads: H, kvHeads: KV, headDim: D }),
    );
    const [got, gotK, gotV] = (await Promise.all([
      context.data(),
      keys.data(),
      values.data(),
    ])) as Float32Array[];
    const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => {
      let m = 0;
      for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
      return m;
    };
    t.true(maxDiff(got!, want) < 1e-5, `context differs by ${maxDiff(got!, want)}`);
    t.true(maxDiff(gotK!, wantK) < 1e-5, `cached keys differ by ${maxDiff(gotK!, wantK)}`);
    t.true(maxDiff(gotV!, wantV) < 1e-6, `cached values differ by ${maxDiff(gotV!, wantV)}`);
    tf.dispose([context, keys, values, hn, tables.cos, tables.sin, tables.mask, ...Object.values(w)]);
  },
);

test.serial("the decode attention kernel refuses a slot outside the scored span", (t) => {
  const blas = nativeAddon(t);
  if (!blas) return;
  const f = (n: number) => new Float32Array(n);
  const call = (slots: Int32Array, span: number) =>
    blas.decodeAttention(
      f(16),
      f(16),
      f(16),
      f(0),
      f(0),
      f(0),
      f(4),
      f(4),
      f(64),
      f(64),
      f(4),
      f(16),
      1,
      2,
      2,
      8,
      4,
      slots,
      span,
    );
  t.notThrows(() => call(Int32Array.from([2]), 3));
  t.throws(() => call(Int32Array.from([3]), 3), { instanceOf: RangeError });
  t.throws(() => call(Int32Array.from([2]), 5), { instanceOf: RangeError });
});

test.serial("decode steps on the native attention give the host path's logits and generations", async (t) => {
  if (!nativeAddon(t)) return;
  const model = Qwen2Model.random(tinyTestConfig(64), { seed: 4 });
  const batch = padBatch(
    [
      [3, 9, 4],
      [7, 1, 2, 8, 5, 6],
    ],
    "left",
  );
  // "mirror" keeps a host copy and re-uploads it, so the step runs the op-by-op host path.
  const run = async (mode: "auto" | "mirror") => {
    const cache = new KVCache(model.config, 2, 4, mode);
    const head = model.lmHead();
    const outs: Float32Array[] = [];
    (await model.prefill(batch, cache)).dispose();
    for (let i = 0; i < 9; i++) {
      const l = await model.decodeStep(Int32Array.from([i + 3, 2 * i + 1]), cache, head);
      outs.push((await l.data()) as Float32Array);
      l.dispose();
    }
    t.is(cache.inPlaceLayer(0) !== undefined, mode === "auto");
    cache.dispose();
    head.weight.dispose();
    return outs;
  };
  const before = tf.memory().numTensors;
  const native = await run("auto");
  t.is(tf.memory().numTensors, before, "the native step leaks no tensor");
  const host = await run("mirror");
  let m = 0;
  for (let i = 0; i < native.length; i++)
    for (let j = 0; j < native[i]!.length; j++) m = Math.max(m, Math.abs(native[i]![j]! - host[i]![j]!));
  t.true(m < 1e-4, `logits differ by ${m}`);
  model.dispose();
});
