/**
 * The addon's fused kernels (AdamW update, log-softmax pick) against the op-by-op tfjs arithmetic they
 * replace: values and gradients within float tolerance, and the sharded optimizer's native update
 * bit-identical to its JS loop.
 */
import * as tf from "@tensorflow/tfjs";
import { loadNativeBlas } from "@torl-ts/blas";
import test from "ava";
import {
  forwardBackward,
  installNativeMatmul,
  padBatch,
  Qwen2Model,
  selectBackend,
  tokenLogProbs,
} from "../../src/index.js";
import { FusedAdamOptimizer } from "../../src/models/native-adam.js";
import { nativeRmsNorm, nativeSwiglu } from "../../src/models/native-layers.js";
import { nativeLogSoftmaxPick } from "../../src/models/native-log-prob.js";
import { adamwLoop } from "../../src/workers/optim.js";
import { nativeAddon as addon, seededUniform as random } from "./helpers.js";
import { tinyTestConfig } from "./tiny-config.js";

async function maxRelDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  const [x, y] = (await Promise.all([a.data(), b.data()])) as Float32Array[];
  let m = 0;
  for (let i = 0; i < x!.length; i++)
    m = Math.max(m, Math.abs(x![i]! - y![i]!) / Math.max(1, Math.abs(y![i]!)));
  return m;
}

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  installNativeMatmul("wasm");
});

test.serial(
  "the fused log-softmax pick equals log-softmax, one-hot and entropy op by op, with gradients",
  async (t) => {
    if (!addon(t)) return;
    const N = 7;
    const V = 37;
    const targets = Int32Array.from([3, 0, 36, -1, 12, 12, 5]);
    const x = tf.tensor2d(random(N * V, 3, 6), [N, V]);
    const wLogp = tf.tensor1d(random(N, 4));
    const wEnt = tf.tensor1d(random(N, 5));
    const scored = tf.tensor1d(Array.from(targets, (v) => (v < 0 ? 0 : 1)));
    const fused = (logits: tf.Tensor) => {
      const stats = nativeLogSoftmaxPick(logits as tf.Tensor2D, targets);
      const lp = tf.reshape(tf.slice(stats, [0, 0], [N, 1]), [N]);
      const ent = tf.reshape(tf.slice(stats, [0, 1], [N, 1]), [N]);
      return [lp, ent] as const;
    };
    const opByOp = (logits: tf.Tensor) => {
      const logp = tf.logSoftmax(logits);
      const onehot = tf.oneHot(
        tf.tensor1d(
          Array.from(targets, (v) => Math.max(v, 0)),
          "int32",
        ),
        V,
      );
      const lp = tf.mul(tf.sum(tf.mul(logp, onehot), -1), scored);
      const ent = tf.mul(tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), -1)), scored);
      return [lp, ent] as const;
    };
    const loss = (pick: typeof fused) => (logits: tf.Tensor) => {
      const [lp, ent] = pick(logits);
      return tf.add(tf.sum(tf.mul(lp, wLogp)), tf.sum(tf.mul(ent, wEnt))) as tf.Scalar;
    };
    const [lpA, entA] = fused(x);
    const [lpB, entB] = opByOp(x);
    t.true((await maxRelDiff(lpA, lpB)) < 1e-5, "log-probs");
    t.true((await maxRelDiff(entA, entB)) < 1e-5, "entropies");
    const gA = tf.grad(loss(fused))(x);
    const gB = tf.grad(loss(opByOp))(x);
    t.true((await maxRelDiff(gA, gB)) < 1e-5, "gradients");
    // Without an entropy term (its gradient all zeros) the kernel takes its short path: still equal.
    const lpOnly = (pick: typeof fused) => (logits: tf.Tensor) =>
      tf.sum(tf.mul(pick(logits)[0], wLogp)) as tf.Scalar;
    t.true(
      (await maxRelDiff(tf.grad(lpOnly(fused))(x), tf.grad(lpOnly(opByOp))(x))) < 1e-5,
      "log-prob gradients",
    );
    const unscored = (await gA.data()).subarray(3 * V, 4 * V);
    t.true(
      unscored.every((v) => v === 0),
      "a row with target -1 gets no gradient",
    );
    tf.dispose([x, wLogp, wEnt, scored, lpA, entA, lpB, entB, gA, gB]);
  },
);

test.serial(
  "the fused pick refuses a target outside the vocabulary and logits of the wrong size, naming them",
  (t) => {
    const blas = addon(t);
    if (!blas) return;
    const stats = new Float32Array(6);
    const bad = t.throws(() => blas.logSoftmaxPick(new Float32Array(8), Int32Array.from([1, 4]), 4, stats));
    t.regex(bad!.message, /target 4 at row 1 is outside \[0, vocab\)/);
    const short = t.throws(() => blas.logSoftmaxPick(new Float32Array(7), Int32Array.from([1, 2]), 4, stats));
    t.regex(short!.message, /one row of `vocab` values per target/);
  },
);

test.serial(
  "tokenLogProbs on the native pick equals the one-hot pick of the plain cpu backend (log-probs, entropy, gradients)",
  async (t) => {
    if (!addon(t)) return;
    const cfg = tinyTestConfig(40);
    const batch = padBatch(
      [
        [1, 2, 3, 4, 5],
        [6, 7, 8],
        [9, 10, 11, 12, 13, 14],
      ],
      "right",
    );
    const run = async (backend: "wasm" | "cpu") => {
      await selectBackend({ backend, log: null });
      const model = Qwen2Model.random(cfg, { seed: 2, std: 0.3 });
      const mask = tf.tensor2d(Float32Array.from(batch.mask), [batch.batch, batch.length]);
      const scores = tf.tidy(() => {
        const s = tokenLogProbs(model, batch, { withEntropy: true, temperature: 0.7 });
        return [s.logProbs, s.entropy!];
      });
      const { grads } = await forwardBackward(
        model,
        batch,
        (mb) => {
          const s = mb.scores;
          return tf.add(
            tf.sum(tf.mul(s.logProbs, mask)),
            tf.mul(tf.sum(tf.mul(s.entropy!, mask)), 0.1),
          ) as tf.Scalar;
        },
        { withEntropy: true, temperature: 0.7 },
      );
      const host = {
        logProbs: (await scores[0]!.data()) as Float32Array,
        entropy: (await scores[1]!.data()) as Float32Array,
        grads: new Map(
          await Promise.all([...grads].map(async ([k, g]) => [k, (await g.data()) as Float32Array] as const)),
        ),
      };
      tf.dispose([...scores, mask, ...grads.values()]);
      model.dispose();
      return host;
    };
    const cpu = await run("cpu");
    const wasm = await run("wasm"); // the backend the other tests run on
    const close = (a: Float32Array, b: Float32Array) =>
      a.every((v, i) => Math.abs(v - b[i]!) <= 2e-5 * Math.max(1, Math.abs(b[i]!)));
    t.true(close(wasm.logProbs, cpu.logProbs), "log-probs");
    t.true(close(wasm.entropy, cpu.entropy), "entropy");
    t.is(wasm.grads.size, cpu.grads.size);
    // Gradients sum many terms in another order: relative to the tensor's largest entry.
    for (const [name, g] of cpu.grads) {
      const scale = g.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      const w = wasm.grads.get(name)!;
      t.true(
        w.every((v, i) => Math.abs(v - g[i]!) <= 1e-5 * scale + 1e-7),
        `gradient of ${name}`,
      );
    }
  },
);

test.serial("the fused Adam optimizer follows tf.train.adam over three steps", async (t) => {
  if (!addon(t)) return;
  const shapes = [[5, 7], [13], [3, 2, 4]];
  const mine = shapes.map((s, i) =>
    tf.variable(tf.tensor(random(tf.util.sizeFromShape(s), 10 + i), s), true, `fusedAdam${i}`),
  );
  const theirs = shapes.map((s, i) =>
    tf.variable(tf.tensor(random(tf.util.sizeFromShape(s), 10 + i), s), true, `tfAdam${i}`),
  );
  const fused = new FusedAdamOptimizer(1e-2, 0.9, 0.98);
  const reference = tf.train.adam(1e-2, 0.9, 0.98);
  for (let step = 0; step < 3; step++) {
    const grads = shapes.map((s, i) => tf.tensor(random(tf.util.sizeFromShape(s), 100 * step + i), s));
    fused.applyGradients(Object.fromEntries(mine.map((v, i) => [v.name, grads[i]!])));
    reference.applyGradients(theirs.map((v, i) => ({ name: v.name, tensor: grads[i]! })));
    tf.dispose(grads);
  }
  t.is(fused.iterations, 3);
  for (let i = 0; i < shapes.length; i++) {
    const d = await maxRelDiff(mine[i]!, theirs[i]!);
    t.true(d < 1e-6, `variable ${i}: ${d}`);
  }
  fused.dispose();
  reference.dispose();
  tf.dispose([...mine, ...theirs]);
});

test.serial("the sharded optimizer's native AdamW update gives the JS loop's bits", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const n = 1001;
  const native = { p: random(n, 1), m: new Float32Array(n), v: new Float32Array(n) };
  const js = { p: random(n, 1), m: new Float32Array(n), v: new Float32Array(n) };
  for (let step = 1; step <= 3; step++) {
    const g = random(n, 50 + step, 0.1);
    blas.adamw(native.p, g, native.m, native.v, native.p, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
    adamwLoop(js.p, g, js.m, js.v, js.p, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
  }
  // element-wise IEEE operations in the same order (the addon is built with -ffp-contract=off, so no
  // fused multiply-add on any CPU): the same bits, not a tolerance (only the bias corrections' powers come
  // from two libraries, glibc's pow and V8's **, which agree on these steps)
  t.deepEqual(native.p, js.p);
  t.deepEqual(native.m, js.m);
  t.deepEqual(native.v, js.v);
  const err = t.throws(() =>
    blas.adamw(native.p, new Float32Array(3), native.m, native.v, native.p, 1, 0.9, 0.99, 0, 0, 1),
  );
  t.regex(err!.message, /same length/);
});

test.serial(
  "AdamW with a gradient scale (clipping folded in) gives the bits of scaling the gradient first, native and JS",
  (t) => {
    const blas = addon(t);
    if (!blas) return;
    const n = 1001;
    const start = random(n, 2);
    const state = () => ({ p: start.slice(), m: new Float32Array(n), v: new Float32Array(n) });
    const [scaledNative, scaledJs, reference] = [state(), state(), state()];
    for (let step = 1; step <= 3; step++) {
      const g = random(n, 60 + step, 0.5);
      const coef = 0.37 / step;
      const before = g.slice();
      const hyper = [1e-3, 0.9, 0.999, 1e-8, 0.01, step] as const;
      blas.adamw(scaledNative.p, g, scaledNative.m, scaledNative.v, scaledNative.p, ...hyper, coef);
      adamwLoop(scaledJs.p, g, scaledJs.m, scaledJs.v, scaledJs.p, ...hyper, coef);
      t.deepEqual(g, before, "the gradient is read, not written");
      // the reference: a pass of its own scales the gradient (what clipping did before), then AdamW
      const clipped = g.map((x) => x * coef);
      adamwLoop(reference.p, clipped, reference.m, reference.v, reference.p, ...hyper);
    }
    for (const s of [scaledNative, scaledJs]) {
      t.deepEqual(s.p, reference.p);
      t.deepEqual(s.m, reference.m);
      t.deepEqual(s.v, reference.v);
    }
    const err = t.throws(() =>
      (blas.adamw as (...a: unknown[]) => void)(start, start, start, start, start, 1),
    );
    t.regex(err!.message, /adamw takes 11 or 12 arguments/);
  },
);

test.serial(
  "on wasm a clone shares its data (tfjs clones every tensor it saves for the backward pass)",
  (t) => {
    const x = tf.tensor2d(random(64 * 32, 9), [64, 32]);
    const before = tf.memory().numDataBuffers;
    const copy = tf.clone(x);
    t.is(
      tf.memory().numDataBuffers,
      before,
      "no new buffer: the clone counts one more reference to x's data",
    );
    x.dispose();
    t.deepEqual(copy.dataSync(), random(64 * 32, 9), "the clone outlives the original");
    copy.dispose();
    t.is(tf.memory().numDataBuffers, before - 1, "the last reference frees the data");
  },
);

test.serial("the fused RMSNorm and SwiGLU equal their op-by-op forms, values and gradients", async (t) => {
  if (!addon(t)) return;
  const x = tf.tensor2d(random(6 * 10, 21, 3), [6, 10]);
  const w = tf.tensor1d(random(10, 22));
  const u = tf.tensor2d(random(6 * 10, 23, 4), [6, 10]);
  const dy = tf.tensor2d(random(6 * 10, 24), [6, 10]);
  const eps = 1e-6;
  const normOps = (a: tf.Tensor, b: tf.Tensor) =>
    tf.mul(tf.mul(a, tf.rsqrt(tf.add(tf.mean(tf.square(a), -1, true), eps))), b);
  const gateOps = (g: tf.Tensor, v: tf.Tensor) => tf.mul(tf.mul(g, tf.sigmoid(g)), v);
  const pairs: Array<
    [
      string,
      (a: tf.Tensor, b: tf.Tensor) => tf.Tensor,
      (a: tf.Tensor, b: tf.Tensor) => tf.Tensor,
      tf.Tensor,
      tf.Tensor,
    ]
  > = [
    ["RMSNorm", (a, b) => nativeRmsNorm(a as tf.Tensor2D, b, eps), normOps, x, w],
    ["SwiGLU", (a, b) => nativeSwiglu(a as tf.Tensor2D, b as tf.Tensor2D), gateOps, x, u],
  ];
  for (const [name, fused, ops, a, b] of pairs) {
    t.true((await maxRelDiff(fused(a, b), ops(a, b))) < 1e-5, `${name} values`);
    const loss = (f: typeof fused) => (p: tf.Tensor, q: tf.Tensor) => tf.sum(tf.mul(f(p, q), dy));
    const [gA, gB] = [tf.grads(loss(fused))([a, b]), tf.grads(loss(ops))([a, b])];
    for (const i of [0, 1]) t.true((await maxRelDiff(gA[i]!, gB[i]!)) < 1e-5, `${name} gradient ${i}`);
  }
  const blas = loadNativeBlas();
  if (blas.ok) {
    const err = t.throws(() =>
      blas.blas.rmsNorm(new Float32Array(7), new Float32Array(3), eps, new Float32Array(7)),
    );
    t.regex(err!.message, /whole rows of w's width/);
  }
});
