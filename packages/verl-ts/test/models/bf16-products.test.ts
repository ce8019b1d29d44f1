/**
 * A bfloat16 model's generation reads its matrices straight from the bits (the addon's matmulBf16,
 * native-matmul-bf16.ts): the same logits and greedy tokens as float32 compute on the rounded weights (the
 * widened path), with no float32 copy of any matrix made. The log-prob passes, passes under a tape, and
 * float16 models widen as before.
 */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  computeLogProbs,
  forwardBackward,
  generate,
  HalfArray,
  installNativeMatmul,
  padBatch,
  Qwen2Model,
  selectBackend,
} from "../../src/index.js";
import type { Qwen2Config } from "../../src/models/config.js";
import { MATMUL_BF16_KERNEL } from "../../src/models/native-matmul-bf16.js";
import { WIDEN_KERNEL } from "../../src/models/wasm-host-kernels.js";
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

/** max |a - b| / max(1, |b|). */
function maxRel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!) / Math.max(1, Math.abs(b[i]!)));
  return m;
}

/** The kernels a function ran, by name, and the ranks of the weights it widened whole. */
async function kernelsOf(
  f: () => tf.Tensor | Promise<unknown>,
): Promise<{ names: Set<string>; widenedRanks: Set<number> }> {
  const info = await tf.profile(async () => {
    const r = await f();
    if (r instanceof tf.Tensor) r.dispose();
  });
  const widened = info.kernels.filter((k) => k.name === WIDEN_KERNEL);
  return {
    names: new Set(info.kernelNames),
    widenedRanks: new Set(widened.flatMap((k) => k.outputShapes.map((s) => s!.length))),
  };
}

/** Bytes of the model's 1-D weights (norms, biases) in float32: all a pass of bits still widens. */
function vectorBytes(model: Qwen2Model): number {
  return model.specs.filter((s) => s.shape.length === 1).reduce((a, s) => a + 4 * s.shape[0]!, 0);
}

for (const tied of [true, false])
  test.serial(
    `bf16 generation reads the bits: logits and greedy tokens of the widened path; log-prob passes widen (tied head: ${tied})`,
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
        // the log-prob passes widen: their numbers are those the update's tape computes, bit for bit
        const [a, b] = [await lp(bf16), await lp(fp32)];
        t.deepEqual(a, b);
        const scoring = await kernelsOf(() => lp(bf16));
        t.false(scoring.names.has(MATMUL_BF16_KERNEL));
        t.true(scoring.widenedRanks.has(2));

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

test.serial("under a gradient tape, and for float16, the weights are widened as before", async (t) => {
  if (!nativeAddon(t)) return;
  const config = tinyTestConfig(tok.vocabSize);
  const values = Qwen2Model.randomParameters(config, { seed: 3, std: 0.3 });
  const bf16 = new Qwen2Model(config, values, { dtype: "bfloat16" });
  const kernels = await kernelsOf(async () => {
    const { loss, grads } = await forwardBackward(
      bf16,
      batch,
      (mb) => tf.neg(tf.mean(mb.scores.logProbs)) as tf.Scalar,
    );
    t.true(Number.isFinite(loss));
    for (const g of grads.values()) g.dispose();
  });
  t.true(kernels.widenedRanks.has(2), "the matrices are widened");
  t.false(kernels.names.has(MATMUL_BF16_KERNEL), "the bits kernel has no gradient: not under a tape");
  bf16.releaseComputeWeights();
  bf16.dispose();
  const [fp16, fp32] = pair(config, "float16");
  const f16 = await kernelsOf(() => fp16.forward(batch));
  t.true(f16.widenedRanks.has(2));
  t.false(f16.names.has(MATMUL_BF16_KERNEL));
  for (const m of [fp16, fp32]) {
    m.releaseComputeWeights();
    m.dispose();
  }
});
