/** The model's hyperparameters, read from and written to an HF `config.json` (Qwen2/2.5, Qwen3 dense, Llama 3). */
import { ModelFormatError } from "./errors.js";

/**
 * Llama 3's frequency-dependent rescaling of the rotary frequencies (rope_type `llama3`): wavelengths
 * above original_max_position_embeddings / low_freq_factor are divided by `factor`, those below
 * original_max_position_embeddings / high_freq_factor kept, those between interpolated.
 */
export interface Llama3RopeScaling {
  type: "llama3";
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

export interface Qwen2Config {
  /**
   * `Qwen2ForCausalLM` (q/k/v biases), `Qwen3ForCausalLM` (per-head RMSNorm of q and k, no biases) or
   * `LlamaForCausalLM` (no biases).
   */
  architecture: "Qwen2ForCausalLM" | "Qwen3ForCausalLM" | "LlamaForCausalLM";
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  /** GQA: heads of K and V; each serves numAttentionHeads / numKeyValueHeads query heads. */
  numKeyValueHeads: number;
  headDim: number;
  ropeTheta: number;
  /** Llama 3's rotary scaling; absent for plain rotary embeddings. */
  ropeScaling?: Llama3RopeScaling;
  rmsNormEps: number;
  tieWordEmbeddings: boolean;
  /** q/k/v biases: Qwen2 has them, Qwen3 and Llama do not. */
  attentionBias: boolean;
  maxPositionEmbeddings: number;
  bosTokenId?: number;
  eosTokenId?: number | number[];
  /** dtype to save in (`float32`, `bfloat16`, `float16`). */
  torchDtype: string;
}

/** Alias for the recipe code that speaks of "the model config". */
export type ModelConfig = Qwen2Config;

const ARCHITECTURES = ["Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"] as const;

/** Whether a config's attention norms q and k per head (Qwen3's q_norm / k_norm). */
export function hasQkNorm(c: Pick<Qwen2Config, "architecture">): boolean {
  return c.architecture === "Qwen3ForCausalLM";
}

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
    ...(p.ropeScaling ? { ropeScaling: p.ropeScaling } : {}),
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

/** The model_type of each supported architecture. */
const MODEL_TYPES: Record<Qwen2Config["architecture"], string> = {
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  LlamaForCausalLM: "llama",
};

/** The architecture a config.json names (architectures first, then model_type); others are refused by name. */
function architectureOf(j: Record<string, unknown>, file: string): Qwen2Config["architecture"] {
  const supported = `supported: ${ARCHITECTURES.join(", ")}`;
  const archs = j.architectures;
  if (Array.isArray(archs) && archs.length > 0) {
    const found = archs.find((a) => (ARCHITECTURES as readonly unknown[]).includes(a));
    if (!found || archs.length > 1)
      throw new ModelFormatError(
        `unknown architecture ${JSON.stringify(archs)} (an MoE, vision or other model torl-ts does not implement); ${supported}`,
        file,
        "architectures",
      );
    const architecture = found as Qwen2Config["architecture"];
    if (j.model_type !== undefined && j.model_type !== MODEL_TYPES[architecture])
      throw new ModelFormatError(
        `model_type ${JSON.stringify(j.model_type)} does not match architecture ${architecture} (model_type ${MODEL_TYPES[architecture]})`,
        file,
        "model_type",
      );
    return architecture;
  }
  const byType = ARCHITECTURES.find((a) => MODEL_TYPES[a] === j.model_type);
  if (byType) return byType;
  throw new ModelFormatError(
    `unknown architecture (model_type ${JSON.stringify(j.model_type)}); ${supported}`,
    file,
    "architectures",
  );
}

/** True for a value that leaves the model's function as the plain architecture computes it. */
function isOff(v: unknown): boolean {
  return v === undefined || v === null || v === false || v === 0;
}

/**
 * Refuses the config.json keys that change what the model computes and that torl-ts does not implement
 * (a model that loaded anyway would compute something else than transformers does, without a word).
 */
function refuseUnimplemented(j: Record<string, unknown>, architecture: string, file: string): void {
  const refuse = (key: string, why: string) =>
    new ModelFormatError(`${why} (got ${JSON.stringify(j[key])}); torl-ts does not implement it`, file, key);
  if (j.hidden_act !== undefined && j.hidden_act !== "silu")
    throw new ModelFormatError(
      `only silu is supported, got ${JSON.stringify(j.hidden_act)}`,
      file,
      "hidden_act",
    );
  if (j.use_sliding_window === true) throw refuse("use_sliding_window", "sliding-window attention");
  if (j.layer_types !== undefined) {
    const types = j.layer_types;
    if (!Array.isArray(types) || types.some((t) => t !== "full_attention"))
      throw refuse("layer_types", "only full_attention layers are implemented");
  }
  if (architecture !== "Qwen2ForCausalLM" && !isOff(j.attention_bias))
    throw refuse("attention_bias", "attention biases on q, k, v and o");
  if (!isOff(j.mlp_bias)) throw refuse("mlp_bias", "MLP biases");
  if (!isOff(j.attention_dropout)) throw refuse("attention_dropout", "attention dropout");
  if (j.partial_rotary_factor !== undefined && j.partial_rotary_factor !== 1)
    throw refuse("partial_rotary_factor", "rotary embedding on part of each head");
  for (const key of [
    "quantization_config",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "num_experts",
    "num_local_experts",
    "vision_config",
  ])
    if (!isOff(j[key])) throw refuse(key, `${key}`);
}

/** What rotary embeddings a config asks for: the base, and the llama3 frequency rescaling if any. */
function ropeOf(j: Record<string, unknown>, file: string): { theta: number; scaling?: Llama3RopeScaling } {
  const params = j.rope_parameters;
  const scaling = j.rope_scaling;
  // transformers >= 5 writes rope_parameters (theta and scaling in one object); older ones rope_theta and
  // rope_scaling. Either is read; where both are present they must agree.
  let fromParams: { theta: number; scaling?: Llama3RopeScaling } | undefined;
  if (params !== undefined && params !== null) {
    const [p, key] = ropeObject(params, file, "rope_parameters");
    if (p.rope_theta === undefined)
      throw new ModelFormatError("missing rope_theta", file, `${key}.rope_theta`);
    fromParams = { theta: num(p, "rope_theta", file), scaling: ropeScaling(p, key, file, ["rope_theta"]) };
  }
  let fromLegacy: { theta: number; scaling?: Llama3RopeScaling } | undefined;
  if (j.rope_theta !== undefined || (scaling !== undefined && scaling !== null)) {
    const theta = num(j, "rope_theta", file, fromParams?.theta ?? 10000);
    let s: Llama3RopeScaling | undefined;
    if (scaling !== undefined && scaling !== null) {
      const [p, key] = ropeObject(scaling, file, "rope_scaling");
      s = ropeScaling(p, key, file, ["rope_theta"]);
    }
    fromLegacy = { theta, scaling: s };
  }
  if (fromParams && fromLegacy) {
    if (fromParams.theta !== fromLegacy.theta)
      throw new ModelFormatError(
        `rope_theta ${fromLegacy.theta} disagrees with rope_parameters.rope_theta ${fromParams.theta}`,
        file,
        "rope_theta",
      );
    if (
      scaling !== undefined &&
      scaling !== null &&
      JSON.stringify(fromParams.scaling) !== JSON.stringify(fromLegacy.scaling)
    )
      throw new ModelFormatError("rope_scaling disagrees with rope_parameters", file, "rope_scaling");
  }
  return fromParams ?? fromLegacy ?? { theta: 10000 };
}

function ropeObject(v: unknown, file: string, key: string): [Record<string, unknown>, string] {
  if (typeof v !== "object" || v === null || Array.isArray(v))
    throw new ModelFormatError(`expected an object, got ${JSON.stringify(v)}`, file, key);
  return [v as Record<string, unknown>, key];
}

const LLAMA3_KEYS = ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"];

/** The scaling of a rope_parameters / rope_scaling object: none for `default`, llama3's, or refused. */
function ropeScaling(
  p: Record<string, unknown>,
  key: string,
  file: string,
  also: string[],
): Llama3RopeScaling | undefined {
  const type = p.rope_type ?? p.type ?? "default";
  const typeKey = p.rope_type !== undefined ? "rope_type" : "type";
  const known = new Set(["rope_type", "type", ...also]);
  const unknownKeys = (allowed: string[]) =>
    Object.keys(p).filter((k) => !known.has(k) && !allowed.includes(k) && !isIdentity(k, p[k]));
  if (type === "default") {
    const extra = unknownKeys([]);
    if (extra.length > 0)
      throw new ModelFormatError(
        `${extra.map((k) => `${k}=${JSON.stringify(p[k])}`).join(", ")}: not implemented for default rotary embeddings`,
        file,
        `${key}.${extra[0]}`,
      );
    return undefined;
  }
  if (type !== "llama3")
    throw new ModelFormatError(
      `rotary scaling ${JSON.stringify(type)} is not implemented (implemented: default, llama3)`,
      file,
      `${key}.${typeKey}`,
    );
  const extra = unknownKeys(LLAMA3_KEYS);
  if (extra.length > 0)
    throw new ModelFormatError(
      `${extra.join(", ")}: not implemented for llama3 rotary scaling`,
      file,
      `${key}.${extra[0]}`,
    );
  const field = (k: string) => {
    const v = p[k];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
      throw new ModelFormatError(
        `llama3 scaling needs a positive number, got ${JSON.stringify(v)}`,
        file,
        `${key}.${k}`,
      );
    return v;
  };
  const s: Llama3RopeScaling = {
    type: "llama3",
    factor: field("factor"),
    lowFreqFactor: field("low_freq_factor"),
    highFreqFactor: field("high_freq_factor"),
    originalMaxPositionEmbeddings: field("original_max_position_embeddings"),
  };
  if (s.highFreqFactor <= s.lowFreqFactor)
    throw new ModelFormatError(
      `high_freq_factor ${s.highFreqFactor} must exceed low_freq_factor ${s.lowFreqFactor}`,
      file,
      `${key}.high_freq_factor`,
    );
  return s;
}

/** Keys of a rotary object whose value changes nothing (transformers writes some of them by default). */
function isIdentity(k: string, v: unknown): boolean {
  return (k === "partial_rotary_factor" || k === "attention_factor") && (v === 1 || v === null);
}

/** Parses an HF config.json object; `file` names it in errors. */
export function parseHfConfig(json: unknown, file = "config.json"): Qwen2Config {
  if (!json || typeof json !== "object" || Array.isArray(json))
    throw new ModelFormatError("not a JSON object", file);
  const j = json as Record<string, unknown>;
  const architecture = architectureOf(j, file);
  refuseUnimplemented(j, architecture, file);
  const rope = ropeOf(j, file);
  const hiddenSize = posInt(j, "hidden_size", file);
  const numAttentionHeads = posInt(j, "num_attention_heads", file);
  const numKeyValueHeads = posInt(j, "num_key_value_heads", file, numAttentionHeads);
  if (numAttentionHeads % numKeyValueHeads !== 0)
    throw new ModelFormatError(
      `num_attention_heads ${numAttentionHeads} is not a multiple of num_key_value_heads ${numKeyValueHeads}`,
      file,
      "num_key_value_heads",
    );
  // transformers' Qwen3Config defaults head_dim to 128, not hidden_size / num_attention_heads
  const headDim = posInt(
    j,
    "head_dim",
    file,
    architecture === "Qwen3ForCausalLM" ? 128 : hiddenSize / numAttentionHeads,
  );
  if (headDim % 2 !== 0)
    throw new ModelFormatError(`head dim ${headDim} must be even for rotary embeddings`, file, "head_dim");
  const tie = j.tie_word_embeddings ?? false;
  const eos = j.eos_token_id;
  const dtype = j.dtype ?? j.torch_dtype;
  return {
    architecture,
    vocabSize: posInt(j, "vocab_size", file),
    hiddenSize,
    intermediateSize: posInt(j, "intermediate_size", file),
    numHiddenLayers: posInt(j, "num_hidden_layers", file),
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    ropeTheta: rope.theta,
    ...(rope.scaling ? { ropeScaling: rope.scaling } : {}),
    rmsNormEps: num(j, "rms_norm_eps", file, 1e-6),
    tieWordEmbeddings: tie === true,
    attentionBias: architecture === "Qwen2ForCausalLM",
    maxPositionEmbeddings: posInt(j, "max_position_embeddings", file, 32768),
    bosTokenId: typeof j.bos_token_id === "number" ? j.bos_token_id : undefined,
    eosTokenId: typeof eos === "number" || Array.isArray(eos) ? (eos as number | number[]) : undefined,
    torchDtype: typeof dtype === "string" ? dtype : "float32",
  };
}

/**
 * The HF config.json object for a config. Rotary settings go under rope_theta / rope_scaling, which
 * transformers 4 reads and transformers 5 converts to its rope_parameters.
 */
export function toHfConfig(c: Qwen2Config): Record<string, unknown> {
  const s = c.ropeScaling;
  const byArchitecture: Record<Qwen2Config["architecture"], Record<string, unknown>> = {
    Qwen2ForCausalLM: { use_sliding_window: false },
    Qwen3ForCausalLM: { head_dim: c.headDim, attention_bias: false, use_sliding_window: false },
    LlamaForCausalLM: { head_dim: c.headDim, attention_bias: false, mlp_bias: false },
  };
  return {
    architectures: [c.architecture],
    model_type: MODEL_TYPES[c.architecture],
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
    ...(s
      ? {
          rope_scaling: {
            rope_type: "llama3",
            factor: s.factor,
            low_freq_factor: s.lowFreqFactor,
            high_freq_factor: s.highFreqFactor,
            original_max_position_embeddings: s.originalMaxPositionEmbeddings,
          },
        }
      : {}),
    rms_norm_eps: c.rmsNormEps,
    tie_word_embeddings: c.tieWordEmbeddings,
    ...byArchitecture[c.architecture],
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
  const layer = attn + mlp + 2 * h + (hasQkNorm(c) ? 2 * c.headDim : 0);
  return c.vocabSize * h * (c.tieWordEmbeddings ? 1 : 2) + c.numHiddenLayers * layer + h;
}
