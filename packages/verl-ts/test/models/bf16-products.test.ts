/**
 * A bfloat16 model's passes read its matrices straight from the bits (the addon's matmulBf16,
 * native-matmul-bf16.ts): generation and the log-prob passes give the logits, greedy tokens and log-probs
 * of float32 compute on the rounded weights (the widened path), with no float32 copy of any matrix made.
 * Under a tape the matrices are widened for their gradients, but the products still read the bits, so the
 * tape's log-probs are the log-prob pass's, bit for bit. Float16 models widen as before.
 */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  computeLogProbs,
  generate,
  HalfArray,
  installNativeMatmul,
  padBatch,
  Qwen2Model,
  selectBackend,
  tokenLogProbs,
} from "../../src/index.js";
import type { Qwen2Config } from "../../src/models/config.js";
import { layerwiseLogProbs } from "../../src/models/layerwise.js";
import { linear, linearTransposed, withHostWeightGradients } from "../../src/models/linear.js";
import {
  bf16BitsOf,
  MATMUL_BF16_KERNEL,
  markValuesUnwritten,
  refuseUnwritten,
} from "../../src/models/native-matmul-bf16.js";
import { bitsOnlyTensor, WIDEN_KERNEL, widenedTensor } from "../../src/models/wasm-host-kernels.js";
import { WeightStore } from "../../src/models/weight-store.js";
import { nativeAddon } from "./helpers.js";
import { tinyTestConfig } from "./tiny-config.js";

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  installNativeMatmul("wasm");
});

const tok = buildByteBpeTokenizer();
const batch = padBatch(
  [
    [1, 5, 9, 3, 7, 2, 40, 41],
    [4, 4, 8],
    [200, 12, 7, 7, 100],
  ],
  "left",
);

/** A bf16 model and a float32 one holding exactly its rounded weights (what the widened path computes with). */
function pair(config: Qwen2Config, dtype: "bfloat16" | "float16" = "bfloat16"): [Qwen2Model, Qwen2Model] {
  const values = Qwen2Model.randomParameters(config, { seed: 9, std: 0.3 });
  const half = new Qwen2Model(config, values, { dtype, trainable: false });
  const rounded = new Map([...values].map(([k, v]) => [k, HalfArray.fromFloat32(v, dtype).toFloat32()]));
  return [half, new Qwen2Model(config, rounded, { trainable: false })];
}

/** A bf16 weight's values (k * n), an input x [m, k] and an output gradient dy [m, n] for the product tests. */
function productOperands(k: number, n: number, m: number) {
  return {
    values: HalfArray.fromFloat32(
      Float32Array.from({ length: k * n }, (_, i) => Math.sin(i * 0.37)),
      "bfloat16",
    ),
    x: tf.tensor2d(
      Float32Array.from({ length: m * k }, (_, i) => Math.cos(i * 0.11)),
      [m, k],
    ),
    dy: tf.tensor2d(
      Float32Array.from({ length: m * n }, (_, i) => Math.sin(i * 0.05)),
      [m, n],
    ),
  };
}

/** max |a - b| / max(1, |b|). */
function maxRel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!) / Math.max(1, Math.abs(b[i]!)));
  return m;
}

/** The kernels a function ran, by name, and the ranks of the weights it widened whole. */
async function kernelsOf(
  f: () => tf.Tensor | Promise<unknown>,
): Promise<{ names: Set<string>; widenedRanks: Set<number>; bitsProducts: number }> {
  const info = await tf.profile(async () => {
    const r = await f();
    if (r instanceof tf.Tensor) r.dispose();
  });
  const widened = info.kernels.filter((k) => k.name === WIDEN_KERNEL);
  return {
    names: new Set(info.kernelNames),
    widenedRanks: new Set(widened.flatMap((k) => k.outputShapes.map((s) => s!.length))),
    bitsProducts: info.kernels.filter((k) => k.name === MATMUL_BF16_KERNEL).length,
  };
}

/** Bytes of the model's 1-D weights (norms, biases) in float32: all a pass of bits still widens. */
function vectorBytes(model: Qwen2Model): number {
  return model.specs.filter((s) => s.shape.length === 1).reduce((a, s) => a + 4 * s.shape[0]!, 0);
}

for (const tied of [true, false])
  test.serial(
    `bf16 generation and log-prob passes read the bits: logits, greedy tokens and log-probs of the widened path (tied head: ${tied})`,
    async (t) => {
      if (!nativeAddon(t)) return;
      const config = tinyTestConfig(tok.vocabSize, { tieWordEmbeddings: tied });
      const [bf16, fp32] = pair(config);
      try {
        const logits = async (m: Qwen2Model) => {
          const out = m.forward(batch, { bf16Bits: true });
          try {
            return (await out.data()) as Float32Array;
          } finally {
            out.dispose();
          }
        };
        const got = await logits(bf16);
        // the pass read every matrix from the bits: only the norms and biases were widened
        t.is(bf16.weightTensorBytes(), vectorBytes(bf16));
        bf16.releaseComputeWeights();
        const want = await logits(fp32);
        t.true(maxRel(got, want) <= 1e-5, `logits differ by ${maxRel(got, want)}`);

        const kernels = await kernelsOf(() => bf16.forward(batch, { bf16Bits: true }));
        t.true(kernels.names.has(MATMUL_BF16_KERNEL), "the bits kernel ran");
        t.deepEqual([...kernels.widenedRanks], [1], "no matrix was widened, only norms (and biases)");
        bf16.releaseComputeWeights();

        const lp = async (m: Qwen2Model) => {
          const r = await computeLogProbs(m, batch, { withEntropy: true, microBatchSize: 2, chunkRows: 5 });
          m.releaseComputeWeights();
          return r;
        };
        const [a, b] = [await lp(bf16), await lp(fp32)];
        t.true(
          maxRel(a.logProbs, b.logProbs) <= 1e-5,
          `log-probs differ by ${maxRel(a.logProbs, b.logProbs)}`,
        );
        t.true(
          maxRel(a.entropy!, b.entropy!) <= 1e-5,
          `entropy differs by ${maxRel(a.entropy!, b.entropy!)}`,
        );
        const scoring = await kernelsOf(() => lp(bf16));
        t.true(scoring.names.has(MATMUL_BF16_KERNEL), "the log-prob pass read the bits");
        t.deepEqual([...scoring.widenedRanks], [1], "the log-prob pass widened no matrix");

        const prompts = [tok.encode("12+7="), tok.encode("x"), tok.encode("the answer is")];
        const greedy = async (m: Qwen2Model) => {
          const out = await generate(m, tok, prompts, { maxNewTokens: 12, temperature: 0, ignoreEos: true });
          m.releaseComputeWeights();
          return out.map((o) => [...o.tokenIds]);
        };
        const generation = await kernelsOf(() => greedy(bf16));
        t.true(generation.names.has(MATMUL_BF16_KERNEL));
        t.deepEqual([...generation.widenedRanks], [1], "generation widened no matrix");
        t.deepEqual(await greedy(bf16), await greedy(fp32));
      } finally {
        bf16.dispose();
        fp32.dispose();
      }
    },
  );

for (const tied of [true, false])
  test.serial(
    `under a gradient tape the matrices are widened but products read the bits: the log-prob pass's numbers, bit for bit; float16 widens (tied head: ${tied})`,
    async (t) => {
      if (!nativeAddon(t)) return;
      const config = tinyTestConfig(tok.vocabSize, { tieWordEmbeddings: tied });
      const values = Qwen2Model.randomParameters(config, { seed: 3, std: 0.3 });
      const bf16 = new Qwen2Model(config, values, { dtype: "bfloat16" });
      const rounded = new Map(
        [...values].map(([k, v]) => [k, HalfArray.fromFloat32(v, "bfloat16").toFloat32()]),
      );
      const fp32 = new Qwen2Model(config, rounded);
      const rows = batch.batch * batch.length;
      // the pass without a tape, in one micro-batch and one head chunk: the tape's calls, same shapes
      const untaped = await computeLogProbs(bf16, batch, { microBatchSize: batch.batch, chunkRows: rows });
      bf16.releaseComputeWeights();
      const taped = (m: Qwen2Model) => {
        let logProbs: Float32Array = new Float32Array(0);
        const { value, grads } = tf.variableGrads(() => {
          const s = tokenLogProbs(m, batch);
          logProbs = s.logProbs.dataSync() as Float32Array;
          return tf.neg(tf.mean(s.logProbs)) as tf.Scalar;
        }, m.variables());
        value.dispose();
        return { logProbs, grads };
      };
      let bitsGrads: tf.NamedTensorMap = {};
      const kernels = await kernelsOf(() => {
        const r = taped(bf16);
        bitsGrads = r.grads;
        t.deepEqual(
          new Uint32Array(r.logProbs.buffer),
          new Uint32Array(untaped.logProbs.buffer),
          "the tape's log-probs are the log-prob pass's, bit for bit",
        );
        return Promise.resolve();
      });
      t.true(kernels.widenedRanks.has(2), "the matrices are widened (their gradients need tensors)");
      // every matrix product, the head's included, forward and for the input's gradient: 7 per layer + 1, twice
      t.is(kernels.bitsProducts, 2 * (7 * config.numHiddenLayers + 1), "every product read the bits");
      // the gradients are the widened path's within float32 rounding
      const want = taped(fp32).grads;
      const names = fp32.variables().map((v) => v.name);
      bf16.variables().forEach((v, i) => {
        const got = bitsGrads[v.name]!.dataSync();
        const w = want[names[i]!]!.dataSync();
        t.true(maxRel(got, w) <= 1e-4, `${bf16.specs[i]!.name}: gradients differ by ${maxRel(got, w)}`);
      });
      for (const g of [...Object.values(bitsGrads), ...Object.values(want)]) g.dispose();
      for (const m of [bf16, fp32]) {
        m.releaseComputeWeights();
        m.dispose();
      }
      const [fp16, f32] = pair(config, "float16");
      const f16 = await kernelsOf(() => fp16.forward(batch));
      t.true(f16.widenedRanks.has(2));
      t.false(f16.names.has(MATMUL_BF16_KERNEL));
      for (const m of [fp16, f32]) {
        m.releaseComputeWeights();
        m.dispose();
      }
    },
  );

test.serial(
  "a bits-only weight (values never written) gives the widened weight's products and gradients, and refuses other readers",
  async (t) => {
    if (!nativeAddon(t)) return;
    const [k, n, m] = [24, 40, 12];
    const { values, x, dy } = productOperands(k, n, m);
    const bitsOnly = bitsOnlyTensor(values, [k, n]);
    const widened = widenedTensor(values, [k, n]);
    const run = async (w: tf.Tensor) => {
      const y = linear(x, w);
      const [dx, dw] = tf.grads((xi, wi) => linear(xi as tf.Tensor2D, wi!))([x, w], dy);
      const out = [await y.data(), await dx!.data(), await dw!.data()];
      tf.dispose([y, dx!, dw!]);
      return out.map((a) => new Uint32Array((a as Float32Array).buffer));
    };
    t.deepEqual(
      await run(bitsOnly),
      await run(widened),
      "output, input gradient and weight gradient, bit for bit",
    );
    // no widening kernel ran for it: only the allocation
    const made = await kernelsOf(() => bitsOnlyTensor(values, [k, n]));
    t.false(made.names.has(WIDEN_KERNEL));
    t.throws(() => refuseUnwritten(bitsOnly, "a test"), { message: /holds its bfloat16 bits only/ });
    t.notThrows(() => refuseUnwritten(widened, "a test"));
    t.throws(() => markValuesUnwritten(x), { message: /only a tensor tied to its bits/ });
    tf.dispose([x, dy, bitsOnly, widened]);
  },
);

test.serial(
  "a weight's gradient routed to the host is added in place with the tape's bits (plain and read transposed); a product whose backward never ran is named",
  async (t) => {
    if (!nativeAddon(t)) return;
    const [k, n, m] = [24, 40, 12];
    const { values, x, dy } = productOperands(k, n, m);
    const bits = (a: Float32Array | Uint32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
    for (const transposed of [false, true]) {
      // the weight as stored: [k, n] for x @ w, [n, k] for x @ w^T (the tied head's embedding)
      const shape: [number, number] = transposed ? [n, k] : [k, n];
      const w = bitsOnlyTensor(values, shape);
      const apply = (xi: tf.Tensor, wi: tf.Tensor) =>
        transposed ? linearTransposed(xi as tf.Tensor2D, wi) : linear(xi as tf.Tensor2D, wi);
      const [dxTape, dwTape] = tf.grads(apply)([x, w], dy);
      const want = (await dwTape!.data()) as Float32Array;
      // what the buffer held before: the sum must be added onto it, twice
      const held = Float32Array.from({ length: k * n }, (_, i) => (i % 7) * 0.125 - 0.5);
      const into = held.slice();
      for (let call = 1; call <= 2; call++) {
        const [dx] = withHostWeightGradients([[w, into]], () => tf.grads((xi) => apply(xi, w))([x], dy));
        t.deepEqual(bits((await dx!.data()) as Float32Array), bits((await dxTape!.data()) as Float32Array));
        dx!.dispose();
        const expected = held.map((h, i) => {
          let v = h;
          for (let c = 0; c < call; c++) v = Math.fround(v + want[i]!);
          return v;
        });
        t.deepEqual(
          bits(into),
          bits(expected),
          `transposed=${transposed}, call ${call}: the tape's gradient added`,
        );
      }
      // a forward alone: the product's gradient would never arrive, and that is said
      const err = t.throws(() => withHostWeightGradients([[w, into]], () => apply(x, w).dispose()));
      t.regex(err!.message, /routed to the host by 1 product\(s\), but 0 backward pass\(es\) added it/);
      t.throws(() => withHostWeightGradients([[w, new Float32Array(3)]], () => 0), {
        instanceOf: RangeError,
      });
      tf.dispose([w, dxTape!, dwTape!]);
    }
    // a weight not read from bits: the tape keeps its gradient and the array is left alone
    const plain = tf.tensor2d(values.toFloat32(), [k, n]);
    const untouched = new Float32Array(k * n);
    const grads = withHostWeightGradients([[plain, untouched]], () =>
      tf.grads((xi, wi) => linear(xi as tf.Tensor2D, wi!))([x, plain], dy),
    );
    t.is(grads[1]!.shape.join(), [k, n].join());
    t.true(untouched.every((v) => v === 0));
    tf.dispose([plain, dy, x, ...grads]);
  },
);

test.serial(
  "a store's variables with bitsOnly: bf16 matrices hold their bits only, and stay so, tied to the new bits, through an assign; vectors are widened",
  async (t) => {
    if (!nativeAddon(t)) return;
    const bf16 = (xs: number[]) => HalfArray.fromFloat32(Float32Array.from(xs), "bfloat16");
    const store = new WeightStore(
      [
        { name: "m", shape: [2, 3] },
        { name: "v", shape: [3] },
      ],
      new Map([
        ["m", bf16([0, 1, 2, 3, 4, 5])],
        ["v", bf16([1, 2, 3])],
      ]),
      { dtype: "bfloat16" },
    );
    const [m, v] = store.variables(undefined, { bitsOnly: true });
    t.throws(() => refuseUnwritten(m!, "a test"), { message: /holds its bfloat16 bits only/ });
    t.deepEqual(Array.from(await v!.data()), [1, 2, 3], "a vector is widened");
    store.assign("m", Float32Array.from([10, 11, 12, 13, 14, 15]));
    t.is(store.tensor("m"), m!, "the same variable");
    t.throws(() => refuseUnwritten(m!, "a test"), { message: /holds its bfloat16 bits only/ });
    t.deepEqual(Array.from(bf16BitsOf(m!)!.values.toFloat32()), [10, 11, 12, 13, 14, 15]);
    const y = linear(tf.ones([1, 2]) as tf.Tensor2D, m!);
    t.deepEqual(Array.from(await y.data()), [23, 25, 27], "a product reads the new bits");
    y.dispose();
    // the next pass's copy, asked for without bitsOnly, holds the values
    store.release();
    const widened = store.tensor("m");
    t.notThrows(() => refuseUnwritten(widened, "a test"));
    t.deepEqual(Array.from(await widened.data()), [10, 11, 12, 13, 14, 15]);
    store.dispose();
  },
);

/**
 * `f` with the addon's AMX tiles on, then off (off alone where the CPU has none); the setting goes back
 * to the tiles where the CPU has them after.
 */
async function forEachTileSetting(
  blas: { amx(): { supported: boolean }; setAmx(on: boolean): void },
  f: (tiles: boolean) => Promise<void>,
): Promise<void> {
  const amx = blas.amx().supported;
  try {
    for (const tiles of amx ? [true, false] : [false]) {
      blas.setAmx(tiles);
      await f(tiles);
    }
  } finally {
    blas.setAmx(amx);
  }
}

/** Log-probs and entropy as their bit patterns. */
function scoreBits(r: { logProbs: Float32Array; entropy?: Float32Array }): number[][] {
  return [Array.from(new Uint32Array(r.logProbs.buffer)), Array.from(new Uint32Array(r.entropy!.buffer))];
}

/** The rows of every bf16 product `f` makes whose result is `width` columns wide, in order. */
async function productRows(width: number, f: () => Promise<unknown>): Promise<number[]> {
  const info = await tf.profile(async () => {
    await f();
  });
  return info.kernels
    .filter((k) => k.name === MATMUL_BF16_KERNEL)
    .flatMap((k) => k.outputShapes)
    .filter((s) => s!.length === 2 && s![1] === width)
    .map((s) => s![0]!);
}

/**
 * A tied bf16 model and three rows of 12 tokens (token i of row r: 3 + (i * a + r * b) % 200) scoring
 * columns 2..12: 10 scored positions each, past the 8 of the few-row products.
 */
function scoredHeadSetup(a: number, b: number) {
  const config = tinyTestConfig(tok.vocabSize, { tieWordEmbeddings: true });
  const [model] = pair(config);
  const rows = [0, 1, 2].map((r) => Array.from({ length: 12 }, (_, i) => 3 + ((i * a + r * b) % 200)));
  return {
    model,
    V: config.vocabSize,
    rows,
    tokens: padBatch(rows, "right"),
    opts: { withEntropy: true, scoreColumns: { from: 2, to: 12 } },
  };
}

test.serial(
  "a pass of several micro-batches runs their LM heads as one product on AMX tiles (past 8 scored rows each), with each micro-batch's own bits",
  async (t) => {
    const blas = nativeAddon(t);
    if (!blas) return;
    const { model, V, rows, tokens, opts } = scoredHeadSetup(7, 5);
    const headRows = (f: () => Promise<unknown>) => productRows(V, f);
    const bits = (r: { logProbs: Float32Array; entropy?: Float32Array }) => [
      new Uint32Array(r.logProbs.buffer),
      new Uint32Array(r.entropy!.buffer),
    ];
    try {
      await forEachTileSetting(blas, async (tiles) => {
        let together: { logProbs: Float32Array; entropy?: Float32Array } | undefined;
        const shared = await headRows(async () => {
          together = await computeLogProbs(model, tokens, { ...opts, microBatchSize: 1 });
        });
        // each micro-batch alone
        const alone = await Promise.all(
          rows.map((row) => computeLogProbs(model, padBatch([row], "right"), opts)),
        );
        t.deepEqual(shared, tiles ? [30] : [10, 10, 10], `tiles ${tiles}: the head's products`);
        const L = tokens.length;
        for (const [r, a] of alone.entries()) {
          const [lp, ent] = bits(a);
          const [tlp, tent] = bits(together!).map((b) => b.subarray(r * L, (r + 1) * L));
          t.deepEqual(tlp, lp, `tiles ${tiles} row ${r}: log-probs, bit for bit`);
          t.deepEqual(tent, ent, `tiles ${tiles} row ${r}: entropy, bit for bit`);
        }
        // a micro-batch of 8 scored positions or fewer keeps a head pass of its own (another kernel)
        const few = await headRows(() =>
          computeLogProbs(model, tokens, { ...opts, scoreColumns: { from: 5, to: 12 }, microBatchSize: 1 }),
        );
        t.deepEqual(few, [7, 7, 7], `tiles ${tiles}: 7 scored positions each`);
      });
    } finally {
      model.dispose();
    }
  },
);

test.serial(
  "the LM head read a block of its vocabulary at a time (headBlock): on AMX tiles the same bits as the whole head, each block handed back in order once read; elsewhere read whole",
  async (t) => {
    const blas = nativeAddon(t);
    if (!blas) return;
    const setup = scoredHeadSetup(11, 3);
    const { model, V, tokens } = setup;
    const opts = { ...setup.opts, microBatchSize: 1 };
    try {
      await forEachTileSetting(blas, async (tiles) => {
        const whole = await computeLogProbs(model, tokens, opts);
        const handed: [number, number][] = [];
        const blocked = await computeLogProbs(model, tokens, {
          ...opts,
          headBlock: { rows: 37, after: (from, to) => handed.push([from, to]) },
        });
        t.deepEqual(
          scoreBits(blocked),
          scoreBits(whole),
          `tiles ${tiles}: log-probs and entropy, bit for bit`,
        );
        const expected: [number, number][] = [];
        for (let from = 0; from < V; from += 37) expected.push([from, Math.min(V, from + 37)]);
        t.deepEqual(handed, tiles ? expected : [], `tiles ${tiles}: the blocks handed back`);
      });
      if (blas.amx().supported) {
        blas.setAmx(true);
        await t.throwsAsync(
          computeLogProbs(model, tokens, { ...opts, headBlock: { rows: 0, after: () => {} } }),
          { message: /headBlock.rows must be a positive integer/ },
        );
      }
    } finally {
      blas.setAmx(blas.amx().supported);
      model.dispose();
    }
  },
);

test.serial(
  "micro-batches of more than 8 rows each share the decoder layers' products on AMX tiles (a matrix read once per layer), with each micro-batch's own bits",
  async (t) => {
    const blas = nativeAddon(t);
    if (!blas) return;
    const { model, rows, tokens, opts } = scoredHeadSetup(5, 13);
    const { intermediateSize: I, numHiddenLayers: layers } = model.config;
    // the rows of every product of the MLP's gate and up projections ([rows, I])
    const mlpRows = (f: () => Promise<unknown>) => productRows(I, f);
    try {
      await forEachTileSetting(blas, async (tiles) => {
        let together: { logProbs: Float32Array; entropy?: Float32Array } | undefined;
        const products = await mlpRows(async () => {
          together = await computeLogProbs(model, tokens, { ...opts, microBatchSize: 1 });
        });
        // gate and up of each layer: once on all 3 x 12 rows with tiles, else once per micro-batch
        const expected = tiles ? Array(2 * layers).fill(36) : Array(6 * layers).fill(12);
        t.deepEqual(products, expected, `tiles ${tiles}: the MLP's products`);
        const L = tokens.length;
        for (const [r, row] of rows.entries()) {
          const alone = await computeLogProbs(model, padBatch([row], "right"), opts);
          const [lp, ent] = scoreBits(alone);
          const [tlp, tent] = scoreBits(together!).map((b) => b.slice(r * L, (r + 1) * L));
          t.deepEqual(tlp, lp, `tiles ${tiles} row ${r}: log-probs, bit for bit`);
          t.deepEqual(tent, ent, `tiles ${tiles} row ${r}: entropy, bit for bit`);
        }
        // layer by layer (the reference's sharded pass): each layer's weights as bits, shared alike
        const values = Qwen2Model.randomParameters(model.config, { seed: 9, std: 0.3 });
        let byLayer: { logProbs: Float32Array; entropy?: Float32Array }[] = [];
        const layerProducts = await mlpRows(async () => {
          byLayer = await layerwiseLogProbs(
            model,
            rows.map((row) => ({ tokens: padBatch([row], "right"), options: opts })),
            async (i) =>
              new Map(
                [...values]
                  .filter(([name]) => name.startsWith(`model.layers.${i}.`))
                  .map(([name, v]) => {
                    const spec = model.specs.find((s) => s.name === name)!;
                    const half = HalfArray.fromFloat32(v, "bfloat16");
                    return [
                      name,
                      spec.shape.length === 2
                        ? bitsOnlyTensor(half, spec.shape as [number, number])
                        : widenedTensor(half, [...spec.shape]),
                    ];
                  }),
              ),
          );
        });
        t.deepEqual(layerProducts, expected, `tiles ${tiles}: layer by layer, the MLP's products`);
        for (const [r, one] of byLayer.entries())
          t.deepEqual(
            scoreBits(one),
            scoreBits(together!).map((b) => b.slice(r * L, (r + 1) * L)),
            `tiles ${tiles} row ${r}: layer by layer, bit for bit`,
          );
        // micro-batches of 8 rows or fewer each keep products of their own (another kernel)
        const short = padBatch(
          rows.map((row) => row.slice(0, 8)),
          "right",
        );
        const few = await mlpRows(() =>
          computeLogProbs(model, short, { ...opts, scoreColumns: { from: 2, to: 8 }, microBatchSize: 1 }),
        );
        t.deepEqual(few, Array(6 * layers).fill(8), `tiles ${tiles}: 8 rows each, alone`);
      });
    } finally {
      model.dispose();
    }
  },
);

test.serial(
  "a bfloat16 matrix in the tiles' layout (a frozen reference's): a linear layer gives the row-major matrix's bits, on the tiles and off; its transposed product and its widening are refused",
  async (t) => {
    const blas = nativeAddon(t);
    if (!blas) return;
    const [k, n, m] = [64, 96, 12];
    const { values, x } = productOperands(k, n, m);
    const laid = new Uint16Array(k * n);
    blas.packBf16Tiles(values.bits, k, n, 0, laid);
    const tiled = new HalfArray("bfloat16", laid);
    try {
      await forEachTileSetting(blas, async (tiles) => {
        const rows = bitsOnlyTensor(values, [k, n]);
        const inTiles = bitsOnlyTensor(tiled, [k, n], "tiles");
        t.is(bf16BitsOf(inTiles)!.layout, "tiles");
        const want = linear(x, rows);
        const got = linear(x, inTiles);
        t.deepEqual(got.dataSync(), want.dataSync(), `tiles ${tiles}: the same bits`);
        t.throws(() => linearTransposed(tf.zeros([m, n]) as tf.Tensor2D, inTiles), {
          message: /in the tile layout is read as \[k, n\] only/,
        });
        tf.dispose([rows, inTiles, want, got]);
      });
    } finally {
      blas.setAmx(blas.amx().supported);
      x.dispose();
    }
    t.throws(() => bitsOnlyTensor(new HalfArray("bfloat16", new Uint16Array(48 * 32)), [48, 32], "tiles"), {
      message: /k and n multiples of 32, not \[48,32\]/,
    });
    await tf.setBackend("cpu");
    try {
      t.throws(() => bitsOnlyTensor(tiled, [k, n], "tiles"), {
        message: /read by the addon's products on wasm only; this process runs cpu/,
      });
    } finally {
      await tf.setBackend("wasm");
    }
  },
);
