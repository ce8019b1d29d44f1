/**
 * A real-size model without downloads: the exact shapes of Qwen2.5-0.5B, Qwen3-0.6B or Llama-3.2-1B (their
 * config.json values) with seeded random weights, written as an HF model directory in bf16 one tensor at a time (only one tensor's values exist
 * at once, so writing ~1 GB of weights costs little memory). `pnpm torl bench scale` loads it.
 */
import { statSync } from "node:fs";
import { join } from "node:path";
import { gaussian, mulberry32 } from "../random.js";
import { makeQwen2Config, type Qwen2Config } from "./config.js";
import { HalfArray, type HalfDtype } from "./half-precision.js";
import { writeModelMetadata } from "./pretrained.js";
import { parameterSpecs } from "./qwen2.js";
import { SAFETENSORS_DTYPE_OF, SAFETENSORS_FILE, writeSafetensorsFrom } from "./safetensors.js";
import { Tokenizer } from "./tokenizer.js";

/** Qwen2.5-0.5B's config.json values (494M parameters, tied embeddings). */
export const QWEN2_5_0_5B_SHAPES: Qwen2Config = makeQwen2Config({
  vocabSize: 151936,
  hiddenSize: 896,
  numHiddenLayers: 24,
  numAttentionHeads: 14,
  numKeyValueHeads: 2,
  intermediateSize: 4864,
  tieWordEmbeddings: true,
  ropeTheta: 1e6,
  rmsNormEps: 1e-6,
  maxPositionEmbeddings: 32768,
  attentionBias: true,
  torchDtype: "bfloat16",
});

/** Qwen3-0.6B's config.json values (596M parameters, tied embeddings, head_dim 128 with hidden 1024). */
export const QWEN3_0_6B_SHAPES: Qwen2Config = makeQwen2Config({
  architecture: "Qwen3ForCausalLM",
  vocabSize: 151936,
  hiddenSize: 1024,
  numHiddenLayers: 28,
  numAttentionHeads: 16,
  numKeyValueHeads: 8,
  headDim: 128,
  intermediateSize: 3072,
  tieWordEmbeddings: true,
  ropeTheta: 1e6,
  rmsNormEps: 1e-6,
  maxPositionEmbeddings: 40960,
  torchDtype: "bfloat16",
});

/** Llama-3.2-1B's config.json values (1.24B parameters, tied embeddings, llama3 rotary scaling). */
export const LLAMA_3_2_1B_SHAPES: Qwen2Config = makeQwen2Config({
  architecture: "LlamaForCausalLM",
  vocabSize: 128256,
  hiddenSize: 2048,
  numHiddenLayers: 16,
  numAttentionHeads: 32,
  numKeyValueHeads: 8,
  headDim: 64,
  intermediateSize: 8192,
  tieWordEmbeddings: true,
  ropeTheta: 500000,
  ropeScaling: {
    type: "llama3",
    factor: 32,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 8192,
  },
  rmsNormEps: 1e-5,
  maxPositionEmbeddings: 131072,
  bosTokenId: 128000,
  eosTokenId: 128001,
  torchDtype: "bfloat16",
});

/** The shapes `bench scale --arch` offers, by name. */
export const SCALE_SHAPES = {
  "qwen2.5-0.5b": QWEN2_5_0_5B_SHAPES,
  "qwen3-0.6b": QWEN3_0_6B_SHAPES,
  "llama-3.2-1b": LLAMA_3_2_1B_SHAPES,
} as const;

/**
 * `config` with `layers` decoder layers instead of its own (every other shape kept), or `config` itself
 * when `layers` is undefined: `bench scale --layers N` profiles a real-size vocabulary and real-size
 * layers in a fraction of the full model's memory.
 */
export function withLayers(config: Qwen2Config, layers: number | undefined): Qwen2Config {
  if (layers === undefined) return config;
  if (!Number.isInteger(layers) || layers < 1)
    throw new RangeError(`layers must be a positive integer, got ${layers}`);
  return { ...config, numHiddenLayers: layers };
}

/**
 * The tokenizer a probe of `config` runs with, from Qwen's (the one tokenizer shipped): as it is where the
 * model's vocabulary holds all of Qwen's ids; else (Llama-3.2-1B's 128256) with padding on id 0, so that
 * every id the model reads is one of its own (random weights: which text an id stands for is moot).
 */
export function scaleTokenizer(config: Qwen2Config, qwen: Tokenizer): Tokenizer {
  if (qwen.padTokenId < config.vocabSize) return qwen;
  return new Tokenizer(qwen.json, { ...qwen.config, pad_token: qwen.idToTokenString(0) }, qwen.source);
}

export interface RandomModelOptions {
  seed?: number;
  /** Standard deviation of the matrices (Qwen2's initializer_range). Default 0.02. */
  std?: number;
  /** Weight dtype of the file. Default bfloat16. */
  dtype?: HalfDtype;
}

/**
 * Writes config.json, model.safetensors (random weights: normal(0, std) matrices, unit norms, zero
 * biases) and the tokenizer files into dir. Returns the bytes of the weight file.
 */
export function writeRandomModelDir(
  dir: string,
  config: Qwen2Config,
  tokenizer: Tokenizer,
  options: RandomModelOptions = {},
): { weightBytes: number; parameters: number } {
  const dtype = options.dtype ?? "bfloat16";
  const std = options.std ?? 0.02;
  const rng = mulberry32(options.seed ?? 0);
  const full = { ...config, eosTokenId: config.eosTokenId ?? tokenizer.eosTokenId, torchDtype: dtype };
  writeModelMetadata(dir, full, SAFETENSORS_DTYPE_OF[dtype], tokenizer);
  const specs = parameterSpecs(full);
  const byName = new Map(specs.map((s) => [s.name, s]));
  let parameters = 0;
  const file = join(dir, SAFETENSORS_FILE);
  writeSafetensorsFrom(
    file,
    specs.map((s) => ({ name: s.name, shape: s.hfShape })),
    SAFETENSORS_DTYPE_OF[dtype],
    (name) => {
      const s = byName.get(name)!;
      const n = s.hfShape.reduce((a, b) => a * b, 1);
      parameters += n;
      const values = new Float32Array(n);
      if (s.init === "ones") values.fill(1);
      else if (s.init === "normal") for (let i = 0; i < n; i++) values[i] = gaussian(rng) * std;
      return HalfArray.fromFloat32(values, dtype);
    },
  );
  return { weightBytes: statSync(file).size, parameters };
}
