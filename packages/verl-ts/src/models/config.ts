/** The model's hyperparameters, read from and written to an HF `config.json` (Qwen2 or Llama). */
import { ModelFormatError } from "./errors.js";

export interface Qwen2Config {
  /** `Qwen2ForCausalLM` or `LlamaForCausalLM`. */
  architecture: "Qwen2ForCausalLM" | "LlamaForCausalLM";
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  /** GQA: heads of K and V; each serves numAttentionHeads / numKeyValueHeads query heads. */
  numKeyValueHeads: number;
  headDim: number;
  ropeTheta: number;
  rmsNormEps: number;
  tieWordEmbeddings: boolean;
  /** Qwen2 has q/k/v biases; Llama has none unless `attention_bias`. */
  attentionBias: boolean;
  maxPositionEmbeddings: number;
  bosTokenId?: number;
  eosTokenId?: number | number[];
  /** dtype to save in (`float32`, `bfloat16`, `float16`). */
  torchDtype: string;
}

/** Alias for the recipe code that speaks of "the model config". */
export type ModelConfig = Qwen2Config;

const ARCHITECTURES = ["Qwen2ForCausalLM", "LlamaForCausalLM"] as const;

/** Builds a config from parts; unspecified values follow Qwen2's defaults. */
export function makeQwen2Config(
  p: Partial<Qwen2Config> & Pick<Qwen2Config, "vocabSize" | "hiddenSize">,
): Qwen2Config {
  const heads = p.numAttentionHeads ?? 4;
  return {
    architecture: p.architecture ?? "Qwen2ForCausalLM",
    vocabSize: p.vocabSize,
    hiddenSize: p.hiddenSize,
    intermediateSize: p.intermediateSize ?? p.hiddenSize * 4,
    numHiddenLayers: p.numHiddenLayers ?? 2,
    numAttentionHeads: heads,
    numKeyValueHeads: p.numKeyValueHeads ?? heads,
    headDim: p.headDim ?? p.hiddenSize / heads,
    ropeTheta: p.ropeTheta ?? 10000,
    rmsNormEps: p.rmsNormEps ?? 1e-6,
    tieWordEmbeddings: p.tieWordEmbeddings ?? true,
    attentionBias: p.attentionBias ?? (p.architecture ?? "Qwen2ForCausalLM") === "Qwen2ForCausalLM",
    maxPositionEmbeddings: p.maxPositionEmbeddings ?? 4096,
    bosTokenId: p.bosTokenId,
    eosTokenId: p.eosTokenId,
    torchDtype: p.torchDtype ?? "float32",
  };
}

function num(json: Record<string, unknown>, key: string, file: string, fallback?: number): number {
  const v = json[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ModelFormatError("missing required key", file, key);
  }
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new ModelFormatError(`expected a number, got ${JSON.stringify(v)}`, file, key);
  return v;
}

function posInt(json: Record<string, unknown>, key: string, file: string, fallback?: number): number {
  const v = num(json, key, file, fallback);
  if (!Number.isInteger(v) || v <= 0)
    throw new ModelFormatError(`expected a positive integer, got ${v}`, file, key);
  return v;
}

/** Parses an HF config.json object; `file` names it in errors. */
export function parseHfConfig(json: unknown, file = "config.json"): Qwen2Config {
  if (!json || typeof json !== "object" || Array.isArray(json))
    throw new ModelFormatError("not a JSON object", file);
  const j = json as Record<string, unknown>;
  const archs = j.architectures;
  let architecture: Qwen2Config["architecture"];
  if (Array.isArray(archs) && archs.length > 0) {
    const found = archs.find((a) => (ARCHITECTURES as readonly unknown[]).includes(a));
    if (!found)
      throw new ModelFormatError(
        `unknown architecture ${JSON.stringify(archs)}; supported: ${ARCHITECTURES.join(", ")}`,
        file,
        "architectures",
      );
    architecture = found as Qwen2Config["architecture"];
  } else if (j.model_type === "qwen2") architecture = "Qwen2ForCausalLM";
  else if (j.model_type === "llama") architecture = "LlamaForCausalLM";
  else
    throw new ModelFormatError(
      `unknown architecture (model_type ${JSON.stringify(j.model_type)}); supported: ${ARCHITECTURES.join(", ")}`,
      file,
      "architectures",
    );
  if (j.hidden_act !== undefined && j.hidden_act !== "silu")
    throw new ModelFormatError(
      `only silu is supported, got ${JSON.stringify(j.hidden_act)}`,
      file,
      "hidden_act",
    );
  if (j.rope_scaling !== undefined && j.rope_scaling !== null)
    throw new ModelFormatError("rope_scaling is not supported", file, "rope_scaling");
  const hiddenSize = posInt(j, "hidden_size", file);
  const numAttentionHeads = posInt(j, "num_attention_heads", file);
  const numKeyValueHeads = posInt(j, "num_key_value_heads", file, numAttentionHeads);
  if (numAttentionHeads % numKeyValueHeads !== 0)
    throw new ModelFormatError(
      `num_attention_heads ${numAttentionHeads} is not a multiple of num_key_value_heads ${numKeyValueHeads}`,
      file,
      "num_key_value_heads",
    );
  const headDim = posInt(j, "head_dim", file, hiddenSize / numAttentionHeads);
  if (headDim % 2 !== 0)
    throw new ModelFormatError(`head dim ${headDim} must be even for rotary embeddings`, file, "head_dim");
  const tie = j.tie_word_embeddings ?? false;
  const eos = j.eos_token_id;
  return {
    architecture,
    vocabSize: posInt(j, "vocab_size", file),
    hiddenSize,
    intermediateSize: posInt(j, "intermediate_size", file),
    numHiddenLayers: posInt(j, "num_hidden_layers", file),
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    ropeTheta: num(j, "rope_theta", file, 10000),
    rmsNormEps: num(j, "rms_norm_eps", file, 1e-6),
    tieWordEmbeddings: tie === true,
    attentionBias: architecture === "Qwen2ForCausalLM" ? true : j.attention_bias === true,
    maxPositionEmbeddings: posInt(j, "max_position_embeddings", file, 32768),
    bosTokenId: typeof j.bos_token_id === "number" ? j.bos_token_id : undefined,
    eosTokenId: typeof eos === "number" || Array.isArray(eos) ? (eos as number | number[]) : undefined,
    torchDtype: typeof j.torch_dtype === "string" ? j.torch_dtype : "float32",
  };
}

/** The HF config.json object for a config. */
export function toHfConfig(c: Qwen2Config): Record<string, unknown> {
  const qwen = c.architecture === "Qwen2ForCausalLM";
  return {
    architectures: [c.architecture],
    model_type: qwen ? "qwen2" : "llama",
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numHiddenLayers,
    num_attention_heads: c.numAttentionHeads,
    num_key_value_heads: c.numKeyValueHeads,
    ...(c.headDim !== c.hiddenSize / c.numAttentionHeads ? { head_dim: c.headDim } : {}),
    hidden_act: "silu",
    max_position_embeddings: c.maxPositionEmbeddings,
    rope_theta: c.ropeTheta,
    rms_norm_eps: c.rmsNormEps,
    tie_word_embeddings: c.tieWordEmbeddings,
    ...(qwen ? { use_sliding_window: false } : { attention_bias: c.attentionBias }),
    ...(c.bosTokenId !== undefined ? { bos_token_id: c.bosTokenId } : {}),
    ...(c.eosTokenId !== undefined ? { eos_token_id: c.eosTokenId } : {}),
    torch_dtype: c.torchDtype,
    use_cache: true,
  };
}

/** Parameter count of a config. */
export function countParameters(c: Qwen2Config): number {
  const h = c.hiddenSize;
  const q = c.numAttentionHeads * c.headDim;
  const kv = c.numKeyValueHeads * c.headDim;
  const attn = h * q + 2 * h * kv + q * h + (c.attentionBias ? q + 2 * kv : 0);
  const mlp = 3 * h * c.intermediateSize;
  const layer = attn + mlp + 2 * h;
  return c.vocabSize * h * (c.tieWordEmbeddings ? 1 : 2) + c.numHiddenLayers * layer + h;
}
