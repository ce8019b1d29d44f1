/** `pnpm torl bench model [--json]`: matmul floor, training throughput and decode speed of the tiny config. */

import * as tf from "@tensorflow/tfjs";
import { defineBench } from "@torl-ts/core/cli";
import { BACKEND_NAMES, type BackendName, registerWasmFallbacks, selectBackend } from "../models/backend.js";
import { countParameters, makeQwen2Config, type Qwen2Config } from "../models/config.js";
import {
  applyGradients,
  computeLogProbs,
  forwardBackward,
  gradientsToArrays,
  maskedMean,
} from "../models/logprobs.js";
import { Qwen2Model } from "../models/qwen2.js";
import { decodeMsPerToken, randomBatch } from "../models/timing.js";
import type { TokenBatch } from "../models/token-batch.js";

/** The tiny ToRL recipe's architecture (examples/torl TINY_ARCHITECTURE: ~0.12M parameters). */
export const BENCH_TINY_CONFIG: Qwen2Config = makeQwen2Config({
  vocabSize: 600,
  hiddenSize: 64,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 192,
  tieWordEmbeddings: true,
});

/** A larger small config (~0.85M parameters), `--model small`. */
export const BENCH_SMALL_CONFIG: Qwen2Config = makeQwen2Config({
  vocabSize: 512,
  hiddenSize: 128,
  numHiddenLayers: 4,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 384,
  tieWordEmbeddings: true,
});

async function timeIt(minMs: number, f: () => Promise<unknown>): Promise<number> {
  await f();
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < minMs || n < 2) {
    await f();
    n++;
  }
  return (performance.now() - t0) / n;
}

async function matmulGflops(): Promise<number> {
  const a = tf.randomNormal([2048, 256]);
  const b = tf.randomNormal([256, 256]);
  const ms = await timeIt(1000, async () => {
    const c = tf.matMul(a as tf.Tensor2D, b as tf.Tensor2D);
    await c.data();
    c.dispose();
  });
  a.dispose();
  b.dispose();
  return (2 * 2048 * 256 * 256) / ms / 1e6;
}

/** Forward+backward FLOPs per token: 6 x matmul parameters + attention (QK^T and PV, x3 for backward). */
export function trainFlopsPerToken(c: Qwen2Config, L: number): number {
  const matmulParams =
    countParameters(c) -
    (c.tieWordEmbeddings ? 0 : c.vocabSize * c.hiddenSize) -
    (2 * c.numHiddenLayers + 1) * c.hiddenSize;
  const attn = 2 * 2 * L * c.numAttentionHeads * c.headDim * c.numHiddenLayers;
  return 3 * (2 * matmulParams + attn);
}

/** The baseline without a cache: one full forward over the context per generated token (batch 1). */
async function recomputeMsPerToken(model: Qwen2Model, ctx: number, steps: number): Promise<number> {
  const prompt = randomBatch(1, ctx, model.config.vocabSize, 7);
  const once = async () => {
    const logits = tf.tidy(() => model.forward(prompt, { lastOnly: true }));
    await logits.data();
    logits.dispose();
  };
  await once();
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) await once();
  return (performance.now() - t0) / steps;
}

/** Log-probs and the gradients of a masked-mean loss, on the current backend, for a seeded model. */
async function scoresAndGradients(
  c: Qwen2Config,
  batch: TokenBatch,
): Promise<{ logProbs: Float32Array; grads: Map<string, Float32Array> }> {
  const model = Qwen2Model.random(c, { seed: 3 });
  const ones = tf.ones([batch.batch, batch.length]);
  try {
    const { logProbs } = await computeLogProbs(model, batch, { microBatchSize: batch.batch });
    const { grads } = await forwardBackward(
      model,
      batch,
      (mb) => tf.neg(maskedMean(mb.scores.logProbs, ones)),
      {
        microBatchSize: batch.batch,
      },
    );
    return { logProbs, grads: await gradientsToArrays(grads) };
  } finally {
    ones.dispose();
    model.dispose();
  }
}

/**
 * The selected backend against a CPU reference (wasm; cpu when wasm is the one selected) on the same
 * weights and batch, in this process: the largest absolute log-prob difference, and over parameters the
 * largest max |g - g_ref| / max |g_ref| (each parameter's gradient on its own scale).
 */
export async function backendParity(
  c: Qwen2Config,
): Promise<{ reference: string; maxAbsLogprobDiff: number; maxRelGradDiff: number }> {
  const batch = randomBatch(4, 32, c.vocabSize, 5);
  const here = tf.getBackend();
  const selected = await scoresAndGradients(c, batch);
  const reference = here === "wasm" ? "cpu" : "wasm";
  if (reference === "wasm") await import("@tensorflow/tfjs-backend-wasm");
  if (!(await tf.setBackend(reference))) throw new Error(`parity: the ${reference} backend did not start`);
  let ref: Awaited<ReturnType<typeof scoresAndGradients>>;
  try {
    if (reference === "wasm") registerWasmFallbacks();
    ref = await scoresAndGradients(c, batch);
  } finally {
    await tf.setBackend(here);
  }
  let maxAbsLogprobDiff = 0;
  for (let i = 0; i < ref.logProbs.length; i++)
    maxAbsLogprobDiff = Math.max(maxAbsLogprobDiff, Math.abs(selected.logProbs[i]! - ref.logProbs[i]!));
  let maxRelGradDiff = 0;
  for (const [name, r] of ref.grads) {
    const g = selected.grads.get(name)!;
    let diff = 0;
    let scale = 1e-12;
    for (let i = 0; i < r.length; i++) {
      diff = Math.max(diff, Math.abs(g[i]! - r[i]!));
      scale = Math.max(scale, Math.abs(r[i]!));
    }
    maxRelGradDiff = Math.max(maxRelGradDiff, diff / scale);
  }
  return { reference, maxAbsLogprobDiff, maxRelGradDiff };
}

export interface ModelBenchResult {
  backend: string;
  params: number;
  hidden_size: number;
  matmul_gflops: number;
  train_tokens_per_s: number;
  train_model_gflops: number;
  train_flops_utilization: number;
  decode_tokens_per_s: number;
  decode_ms_per_token_ctx64: number;
  decode_ms_per_token_ctx512: number;
  decode_ctx512_over_ctx64: number;
  decode_ms_per_token_ctx512_recompute: number;
  decode_b64_ms_per_token_ctx64: number;
  decode_b64_ms_per_token_ctx512: number;
  decode_b64_ctx512_over_ctx64: number;
  /** The backend the parity figures compare against (wasm, or cpu when wasm is the one selected). */
  parity_reference_backend: string;
  parity_max_abs_logprob_diff: number;
  parity_max_rel_grad_diff: number;
}

export async function runModelBench(
  options: {
    backend?: BackendName | "auto";
    quick?: boolean;
    config?: Qwen2Config;
    log?: (s: string) => void;
  } = {},
): Promise<ModelBenchResult> {
  const log = options.log ?? ((s: string) => console.log(s));
  const info = await selectBackend({ backend: options.backend });
  const c = options.config ?? BENCH_TINY_CONFIG;
  const model = Qwen2Model.random(c, { seed: 1 });
  log(
    `model: hidden ${c.hiddenSize}, ${c.numHiddenLayers} layers, ${c.numAttentionHeads}/${c.numKeyValueHeads} heads, vocab ${c.vocabSize}: ${model.numParameters()} parameters; backend ${info.name}`,
  );
  const parity = await backendParity(c);
  log(
    `parity against ${parity.reference}: log-probs ${parity.maxAbsLogprobDiff.toExponential(2)} abs, gradients ${parity.maxRelGradDiff.toExponential(2)} rel`,
  );
  const gflops = await matmulGflops();
  log(`matmul floor: ${gflops.toFixed(2)} GFLOP/s ([2048x256] @ [256x256])`);
  const B = 16;
  const L = 128;
  const batch = randomBatch(B, L, c.vocabSize, 3);
  const opt = tf.train.adam(1e-4);
  const mask = tf.keep(tf.ones([8, L]));
  const step = async () => {
    const { grads } = await forwardBackward(
      model,
      batch,
      (mb) => tf.neg(maskedMean(mb.scores.logProbs, mask.slice([0, 0], [mb.batch.batch, L]))),
      {
        microBatchSize: 8,
      },
    );
    applyGradients(model, opt, grads);
  };
  const stepMs = await timeIt(options.quick ? 1 : 4000, step);
  mask.dispose();
  const tokensPerS = (B * L) / (stepMs / 1000);
  const modelGflops = (tokensPerS * trainFlopsPerToken(c, L)) / 1e9;
  log(
    `train: ${tokensPerS.toFixed(0)} tokens/s (batch ${B} x ${L}, fwd+bwd+Adam), ${modelGflops.toFixed(2)} model GFLOP/s`,
  );
  const steps = options.quick ? 2 : 16;
  const ms1at64 = await decodeMsPerToken(model, 1, 64, steps * 4);
  const ms1at512 = await decodeMsPerToken(model, 1, 512, steps * 4);
  const recompute = await recomputeMsPerToken(model, 512, options.quick ? 1 : 4);
  log(
    `decode (batch 1): ${ms1at64.toFixed(2)} ms/token at ctx 64, ${ms1at512.toFixed(2)} at ctx 512; without a cache ${recompute.toFixed(1)} ms/token at ctx 512`,
  );
  const big = options.quick ? 4 : 64; // --quick: a smoke run, figures not comparable
  const ms64 = await decodeMsPerToken(model, big, 64, steps);
  const ms512 = await decodeMsPerToken(model, big, 512, steps);
  log(`decode (batch 64): ${ms64.toFixed(3)} ms/token at ctx 64, ${ms512.toFixed(3)} ms/token at ctx 512`);
  opt.dispose();
  model.dispose();
  return {
    backend: info.name,
    params: countParameters(c),
    hidden_size: c.hiddenSize,
    matmul_gflops: round(gflops),
    train_tokens_per_s: round(tokensPerS),
    train_model_gflops: round(modelGflops),
    train_flops_utilization: round(modelGflops / gflops),
    decode_tokens_per_s: round(1000 / ms64),
    decode_ms_per_token_ctx64: round(ms1at64),
    decode_ms_per_token_ctx512: round(ms1at512),
    decode_ctx512_over_ctx64: round(ms1at512 / ms1at64),
    decode_ms_per_token_ctx512_recompute: round(recompute),
    decode_b64_ms_per_token_ctx64: round(ms64),
    decode_b64_ms_per_token_ctx512: round(ms512),
    decode_b64_ctx512_over_ctx64: round(ms512 / ms64),
    parity_reference_backend: parity.reference,
    parity_max_abs_logprob_diff: parity.maxAbsLogprobDiff,
    parity_max_rel_grad_diff: parity.maxRelGradDiff,
  };
}

function round(x: number): number {
  return Number(x.toPrecision(4));
}

export const benchModelCommand = defineBench({
  summary: "benchmark the tfjs Qwen2 model: matmul floor, training tokens/s, decode speed",
  usage: [
    "usage: pnpm torl bench model [--json] [--backend auto|node-gpu|node|webgpu|wasm|cpu] [--model tiny|small] [--quick]",
    "",
    "Measures, for the tiny recipe config (hidden 64, 2 layers, GQA 4/2 heads, vocab 600; --model small:",
    "hidden 128, 4 layers, vocab 512):",
    "  matmul_gflops              the backend's 2-D matmul rate (the floor the others are compared with)",
    "  train_tokens_per_s         forward+backward+Adam, batch 16 x 128",
    "  train_flops_utilization    model FLOP/s of training over matmul_gflops (target >= 0.3)",
    "  decode_tokens_per_s        KV-cache decode at batch 64, context 64",
    "  decode_ms_per_token_ctx64  per-token latency of one sequence (batch 1) at context 64",
    "  decode_ms_per_token_ctx512 the same at context 512 (target: ctx512/ctx64 <= 1.5)",
    "  decode_ms_per_token_ctx512_recompute  baseline: a full forward per token at context 512 (no cache)",
    "  decode_b64_ms_per_token_ctx64/ctx512  step time / batch at batch 64 (attention's share at 512)",
    "  parity_max_abs_logprob_diff / parity_max_rel_grad_diff  the selected backend against wasm (cpu when",
    "                             wasm is selected), same weights and batch (GPU targets: <= 1e-3, <= 1e-2)",
    "The last line is one JSON object with these figures. --quick: a smoke run (tiny batches), not comparable.",
  ].join("\n"),
  flags: {
    quick: { type: "boolean" },
    model: { type: "string", choices: ["tiny", "small"] },
    backend: { type: "string", choices: ["auto", ...BACKEND_NAMES] },
  },
  measure: (flags) =>
    runModelBench({
      backend: flags.backend,
      quick: flags.quick ?? false,
      config: flags.model === "small" ? BENCH_SMALL_CONFIG : BENCH_TINY_CONFIG,
      log: (s) => console.log(s),
    }),
});
