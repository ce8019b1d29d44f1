/**
 * LoRA adapters as veRL's users set them (actor_rollout_ref.model.lora_rank / lora_alpha /
 * target_modules) and as PEFT defines them: each targeted linear layer W [out, in] gets A [rank, in]
 * (uniform in ±1/sqrt(in), PEFT's kaiming_uniform(a=sqrt(5))) and B [out, rank] (zeros), and computes with
 * W + (alpha / rank) B A. The base weights stay frozen; A and B are the trained parameters (the only ones
 * with gradients, optimizer state and FSDP shards).
 *
 * Held like the base's linear weights, transposed: A as [in, rank], B as [rank, out], so the effective
 * weight in our layout is W + scale A B. The model merges it where a decoder layer takes its weights
 * (Qwen2Model.blockWeights), so every kernel downstream (the cached decode, the checkpointed block, FSDP
 * per layer) runs unchanged; with B zero the sum is W exactly. Passes without a gradient tape keep the
 * merged weights until the adapters or the base change (generation and log-probs merge once per phase).
 *
 * Adapter names are the base weight's module path with PEFT's suffix,
 * `model.layers.0.self_attn.q_proj.lora_A.weight`; in a PEFT adapter file they carry PEFT's prefix
 * `base_model.model.` (writePeftAdapterDir, readPeftAdapterDir).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { mulberry32 } from "../random.js";
import { tapeIsRecording } from "./checkpointed-block.js";
import type { Qwen2Config } from "./config.js";
import { ModelFormatError } from "./errors.js";
import { HalfArray, type StoredValues } from "./half-precision.js";
import type { ParamSpec } from "./qwen2.js";
import { type NamedTensor, readSafetensors, writeSafetensors } from "./safetensors.js";
import { transpose2d, WeightStore } from "./weight-store.js";

/** The linear layers LoRA can adapt, by PEFT's module names (`all-linear` is all of them; not the head). */
export const LORA_TARGET_MODULES = [
  "q_proj",
  "k_proj",
  "v_proj",
  "o_proj",
  "gate_proj",
  "up_proj",
  "down_proj",
] as const;
export type LoraTargetModule = (typeof LORA_TARGET_MODULES)[number];

const MODULE_PATH: Record<LoraTargetModule, string> = {
  q_proj: "self_attn.q_proj",
  k_proj: "self_attn.k_proj",
  v_proj: "self_attn.v_proj",
  o_proj: "self_attn.o_proj",
  gate_proj: "mlp.gate_proj",
  up_proj: "mlp.up_proj",
  down_proj: "mlp.down_proj",
};

/** The prefix PEFT gives every tensor of a causal LM's adapter file. */
export const PEFT_PREFIX = "base_model.model.";
export const ADAPTER_CONFIG_FILE = "adapter_config.json";
export const ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors";

export interface LoraConfig {
  rank: number;
  alpha: number;
  /** In LORA_TARGET_MODULES order, each once. */
  targetModules: LoraTargetModule[];
}

/** PEFT's scaling of the adapters' product (no rsLoRA). */
export function loraScale(c: LoraConfig): number {
  return c.alpha / c.rank;
}

/** The LoRA keys of actor_rollout_ref.model (or critic.model), as the config holds them. */
export interface LoraKeys {
  lora_rank: number;
  lora_alpha: number;
  target_modules: string | string[];
}

const KEY = "actor_rollout_ref.model";
/** veRL's defaults of the keys that mean nothing at lora_rank 0. */
const DEFAULT_ALPHA = 16;
const ALL_LINEAR = "all-linear";

/** The problems of the LoRA keys, each naming its key under `prefix` (empty: usable). */
export function loraKeyIssues(m: LoraKeys, prefix = KEY): { key: string; message: string }[] {
  const issues: { key: string; message: string }[] = [];
  const add = (k: string, message: string) =>
    issues.push({ key: `${prefix}.${k}`, message: `${prefix}.${k} ${message}` });
  const rank = m.lora_rank;
  if (!Number.isInteger(rank) || rank < 0)
    add("lora_rank", `must be an integer >= 0 (0: full fine-tuning), got ${rank}`);
  if (!(typeof m.lora_alpha === "number" && m.lora_alpha > 0 && Number.isFinite(m.lora_alpha)))
    add("lora_alpha", `must be a number > 0, got ${JSON.stringify(m.lora_alpha)}`);
  const t = m.target_modules;
  if (typeof t === "string") {
    if (t !== ALL_LINEAR)
      add(
        "target_modules",
        `must be "${ALL_LINEAR}" or a list of module names (${LORA_TARGET_MODULES.join(", ")}), got ${JSON.stringify(t)}`,
      );
  } else if (!Array.isArray(t) || t.length === 0)
    add(
      "target_modules",
      `must be "${ALL_LINEAR}" or a non-empty list of module names, got ${JSON.stringify(t)}`,
    );
  else {
    const unknown = t.filter((n) => !(LORA_TARGET_MODULES as readonly string[]).includes(n));
    if (unknown.length)
      add(
        "target_modules",
        `names ${unknown.map((n) => JSON.stringify(n)).join(", ")}, not a linear layer of the model (known: ${LORA_TARGET_MODULES.join(", ")}, or "${ALL_LINEAR}")`,
      );
    const seen = t.filter((n, i) => t.indexOf(n) !== i);
    if (seen.length) add("target_modules", `names ${[...new Set(seen)].join(", ")} more than once`);
  }
  if (rank === 0) {
    // keys that only mean something with adapters: set at rank 0 they would be accepted and ignored
    if (m.lora_alpha !== DEFAULT_ALPHA)
      add(
        "lora_alpha",
        `is ${m.lora_alpha} but lora_rank is 0 (full fine-tuning, no adapters): set lora_rank too`,
      );
    if (JSON.stringify(t) !== JSON.stringify(ALL_LINEAR))
      add("target_modules", `is set but lora_rank is 0 (full fine-tuning, no adapters): set lora_rank too`);
  }
  return issues;
}

/**
 * The LoRA setting of the model keys under `prefix` (the actor's by default, or critic.model); null at
 * lora_rank 0 (full fine-tuning). Throws on bad keys, naming them.
 */
export function loraConfigOf(m: LoraKeys, prefix = KEY): LoraConfig | null {
  const issues = loraKeyIssues(m, prefix);
  if (issues.length) throw new RangeError(issues.map((i) => i.message).join("; "));
  if (m.lora_rank === 0) return null;
  const t = m.target_modules;
  const wanted = new Set(typeof t === "string" ? LORA_TARGET_MODULES : t);
  return {
    rank: m.lora_rank,
    alpha: m.lora_alpha,
    targetModules: LORA_TARGET_MODULES.filter((n) => wanted.has(n)),
  };
}

/** One adapter matrix: A or B of the base weight `base`. */
export interface AdapterSpec extends ParamSpec {
  base: string;
  kind: "A" | "B";
}

/** The adapters of a model, layer by layer, A then B of each targeted module in LORA_TARGET_MODULES order. */
export function adapterSpecs(c: Qwen2Config, lora: LoraConfig): AdapterSpec[] {
  const h = c.hiddenSize;
  const q = c.numAttentionHeads * c.headDim;
  const kv = c.numKeyValueHeads * c.headDim;
  const io: Record<LoraTargetModule, [number, number]> = {
    q_proj: [h, q],
    k_proj: [h, kv],
    v_proj: [h, kv],
    o_proj: [q, h],
    gate_proj: [h, c.intermediateSize],
    up_proj: [h, c.intermediateSize],
    down_proj: [c.intermediateSize, h],
  };
  const r = lora.rank;
  const specs: AdapterSpec[] = [];
  for (let i = 0; i < c.numHiddenLayers; i++)
    for (const m of lora.targetModules) {
      const path = `model.layers.${i}.${MODULE_PATH[m]}`;
      const [inp, out] = io[m];
      const base = `${path}.weight`;
      const spec = (kind: "A" | "B", rows: number, cols: number): AdapterSpec => ({
        name: `${path}.lora_${kind}.weight`,
        hfShape: [rows, cols],
        shape: [cols, rows],
        transposed: true,
        init: kind === "A" ? "normal" : "zeros",
        base,
        kind,
      });
      specs.push(spec("A", r, inp), spec("B", out, r));
    }
  return specs;
}

/**
 * PEFT's initial adapters (our layout): A uniform in ±1/sqrt(in) (kaiming_uniform with a = sqrt(5)),
 * seeded, the same on every rank; B zeros, so the adapted model starts as the base exactly.
 */
export function initialAdapterValues(c: Qwen2Config, lora: LoraConfig, seed = 0): Map<string, Float32Array> {
  const rng = mulberry32(seed);
  const values = new Map<string, Float32Array>();
  for (const s of adapterSpecs(c, lora)) {
    const v = new Float32Array(s.shape[0]! * s.shape[1]!);
    if (s.kind === "A") {
      const bound = 1 / Math.sqrt(s.shape[0]!);
      for (let i = 0; i < v.length; i++) v[i] = (rng() * 2 - 1) * bound;
    }
    values.set(s.name, v);
  }
  return values;
}

/**
 * A model's adapters (float32 tensors, trainable) and how they change its linear weights. `enabled`
 * false: the model computes as its base (the reference policy, no second copy of the weights).
 */
export class LoraAdapters {
  readonly specs: AdapterSpec[];
  readonly scale: number;
  readonly store: WeightStore;
  private enabled = true;
  /** base weight name -> its adapters' names. */
  private readonly ofBase = new Map<string, { a: string; b: string }>();
  private readonly names: Set<string>;
  /** Effective weights of passes without a tape, until the adapters or the base change. */
  private readonly merged = new Map<string, tf.Tensor>();

  constructor(
    modelConfig: Qwen2Config,
    readonly config: LoraConfig,
    values: Map<string, Float32Array> = initialAdapterValues(modelConfig, config),
  ) {
    this.specs = adapterSpecs(modelConfig, config);
    this.scale = loraScale(config);
    for (const s of this.specs) {
      const v = values.get(s.name);
      if (!v) throw new ModelFormatError("adapter missing", "<adapters>", s.name);
      if (v.length !== s.shape[0]! * s.shape[1]!)
        throw new ModelFormatError(
          `expected ${s.shape[0]! * s.shape[1]!} values, got ${v.length}`,
          "<adapters>",
          s.name,
        );
      const pair = this.ofBase.get(s.base) ?? { a: "", b: "" };
      if (s.kind === "A") pair.a = s.name;
      else pair.b = s.name;
      this.ofBase.set(s.base, pair);
    }
    this.names = new Set(this.specs.map((s) => s.name));
    this.store = new WeightStore(this.specs, values, { trainable: true });
  }

  /** Whether `name` is an adapter's. */
  has(name: string): boolean {
    return this.names.has(name);
  }

  /** Parameters in the adapters. */
  numParameters(): number {
    return this.specs.reduce((a, s) => a + s.shape[0]! * s.shape[1]!, 0);
  }

  get isEnabled(): boolean {
    return this.enabled;
  }

  /** Switches the adapters on or off (off: the base's function exactly). */
  setEnabled(on: boolean): void {
    if (on !== this.enabled) this.releaseMerged();
    this.enabled = on;
  }

  /**
   * The weight base weight `name` computes with: `base` itself when it has no adapter (or they are off),
   * else base + scale A B with A and B from `get` (default: the adapters held here). A pass without a
   * tape that takes the held adapters keeps the sum until releaseMerged.
   */
  effective(name: string, base: tf.Tensor, get?: (name: string) => tf.Tensor): tf.Tensor {
    const pair = this.ofBase.get(name);
    if (!pair || !this.enabled) return base;
    const cacheable = !get && !tapeIsRecording();
    if (cacheable) {
      const kept = this.merged.get(name);
      if (kept) return kept;
    }
    const read = get ?? ((n: string) => this.store.tensor(n));
    const sum = tf.tidy(() =>
      tf.add(base, tf.mul(tf.matMul(read(pair.a) as tf.Tensor2D, read(pair.b) as tf.Tensor2D), this.scale)),
    );
    if (cacheable) this.merged.set(name, tf.keep(sum));
    return sum;
  }

  /** Frees the merged weights kept by passes without a tape (after the adapters or the base changed). */
  releaseMerged(): number {
    let bytes = 0;
    for (const t of this.merged.values()) {
      bytes += t.size * 4;
      t.dispose();
    }
    this.merged.clear();
    return bytes;
  }

  /** Bytes of merged weights kept now. */
  mergedBytes(): number {
    let bytes = 0;
    for (const t of this.merged.values()) bytes += t.size * 4;
    return bytes;
  }

  dispose(): void {
    this.releaseMerged();
    this.store.dispose();
  }
}

/**
 * The merged weights W + scale A B of host values (our layout, linear weights [in, out]), as float32;
 * weights without adapters are returned as given. What an export of merged weights writes.
 */
export function mergeAdapterValues(
  c: Qwen2Config,
  lora: LoraConfig,
  base: Map<string, StoredValues>,
  adapters: Map<string, Float32Array>,
): Map<string, StoredValues> {
  const out = new Map(base);
  const scale = loraScale(lora);
  const specs = adapterSpecs(c, lora);
  for (let k = 0; k < specs.length; k += 2) {
    const sa = specs[k]!;
    const sb = specs[k + 1]!;
    const a = adapters.get(sa.name);
    const b = adapters.get(sb.name);
    if (!a || !b) throw new ModelFormatError("adapter missing", "<adapters>", a ? sb.name : sa.name);
    const w0 = base.get(sa.base);
    if (!w0) throw new ModelFormatError("base weight missing", "<base>", sa.base);
    const w = w0 instanceof HalfArray ? w0.toFloat32() : w0.slice();
    const [inp, r] = sa.shape as [number, number];
    const outDim = sb.shape[1]!;
    for (let i = 0; i < inp; i++)
      for (let j = 0; j < r; j++) {
        const aij = a[i * r + j]! * scale;
        if (aij === 0) continue;
        const row = i * outDim;
        const brow = j * outDim;
        for (let o = 0; o < outDim; o++) w[row + o]! += aij * b[brow + o]!;
      }
    out.set(sa.base, w);
  }
  return out;
}

/** PEFT's adapter_config.json of a LoRA setting on `baseModel`. */
export function peftAdapterConfig(lora: LoraConfig, baseModel: string): Record<string, unknown> {
  return {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: baseModel,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: 0,
    target_modules: lora.targetModules,
    bias: "none",
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    use_rslora: false,
    use_dora: false,
    modules_to_save: null,
    layers_to_transform: null,
    layers_pattern: null,
    rank_pattern: {},
    alpha_pattern: {},
  };
}

/**
 * Writes a PEFT adapter directory: adapter_config.json (base_model_name_or_path: `baseModel`) and
 * adapter_model.safetensors with PEFT's tensor names and layout ([rank, in], [out, rank]) in `dtype`.
 * Returns the files written.
 */
export function writePeftAdapterDir(
  dir: string,
  c: Qwen2Config,
  lora: LoraConfig,
  adapters: Map<string, Float32Array>,
  baseModel: string,
  dtype: "F32" | "BF16" | "F16" = "F32",
): string[] {
  writeFileSync(
    join(dir, ADAPTER_CONFIG_FILE),
    `${JSON.stringify(peftAdapterConfig(lora, baseModel), null, 2)}\n`,
  );
  const tensors: NamedTensor[] = adapterSpecs(c, lora).map((s) => {
    const v = adapters.get(s.name);
    if (!v) throw new ModelFormatError("adapter missing", "<adapters>", s.name);
    return {
      name: PEFT_PREFIX + s.name,
      shape: s.hfShape.slice(),
      data: transpose2d(v, s.shape[0]!, s.shape[1]!),
    };
  });
  writeSafetensors(join(dir, ADAPTER_WEIGHTS_FILE), tensors, dtype);
  return [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE];
}

/** Whether `dir` is a PEFT adapter directory (adapter_config.json, no config.json of its own). */
export function isPeftAdapterDir(dir: string): boolean {
  return existsSync(join(dir, ADAPTER_CONFIG_FILE)) && !existsSync(join(dir, "config.json"));
}

/**
 * The LoRA setting an adapter_config.json describes, and its base model directory (a relative path is
 * taken from the adapter directory). Anything that would change the function and is not implemented
 * (DoRA, rsLoRA, per-module ranks, biases, modules_to_save, ...) is refused naming the key.
 */
export function readPeftAdapterConfig(dir: string): { lora: LoraConfig; baseModel: string } {
  const file = join(dir, ADAPTER_CONFIG_FILE);
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
  } catch (e) {
    throw new ModelFormatError(`cannot read (${(e as Error).message})`, file);
  }
  const refuse = (key: string, why: string): never => {
    throw new ModelFormatError(`${JSON.stringify(json[key])}: ${why}`, file, key);
  };
  if (json.peft_type !== "LORA") refuse("peft_type", "only LoRA adapters are implemented");
  const off: [string, (v: unknown) => boolean, string][] = [
    ["use_dora", (v) => !v, "DoRA is not implemented"],
    ["use_rslora", (v) => !v, "rsLoRA's scaling is not implemented"],
    ["bias", (v) => v === undefined || v === "none", "adapter biases are not implemented"],
    ["fan_in_fan_out", (v) => !v, "only nn.Linear layers (fan_in_fan_out false)"],
    [
      "modules_to_save",
      (v) => v == null || (Array.isArray(v) && v.length === 0),
      "modules_to_save is not implemented",
    ],
    ["layers_to_transform", (v) => v == null, "adapters on some layers only are not implemented"],
    [
      "rank_pattern",
      (v) => v == null || Object.keys(v as object).length === 0,
      "per-module ranks are not implemented",
    ],
    [
      "alpha_pattern",
      (v) => v == null || Object.keys(v as object).length === 0,
      "per-module alphas are not implemented",
    ],
  ];
  for (const [key, ok, why] of off) if (!ok(json[key])) refuse(key, why);
  const r = json.r;
  if (!(typeof r === "number" && Number.isInteger(r) && r > 0)) refuse("r", "must be an integer > 0");
  const alpha = json.lora_alpha;
  if (!(typeof alpha === "number" && alpha > 0)) refuse("lora_alpha", "must be a number > 0");
  const t = json.target_modules;
  const list = t === ALL_LINEAR ? [...LORA_TARGET_MODULES] : t;
  if (!Array.isArray(list) || list.length === 0)
    refuse("target_modules", `must be "${ALL_LINEAR}" or a list of names`);
  const unknown = (list as unknown[]).filter((n) => !(LORA_TARGET_MODULES as readonly unknown[]).includes(n));
  if (unknown.length)
    refuse("target_modules", `${unknown.join(", ")}: not a linear layer LoRA can adapt here`);
  const base = json.base_model_name_or_path;
  if (typeof base !== "string" || !base)
    refuse("base_model_name_or_path", "the base model directory is needed");
  const wanted = new Set(list as string[]);
  return {
    lora: {
      rank: r as number,
      alpha: alpha as number,
      targetModules: LORA_TARGET_MODULES.filter((n) => wanted.has(n)),
    },
    baseModel: isAbsolute(base as string) ? (base as string) : resolve(dir, base as string),
  };
}

/**
 * The adapters of a PEFT adapter directory in our layout, checked against the model config `c`: every
 * tensor the setting needs, with its shape, and no other.
 */
export function readPeftAdapterValues(
  dir: string,
  c: Qwen2Config,
  lora: LoraConfig,
): Map<string, Float32Array> {
  const file = join(dir, ADAPTER_WEIGHTS_FILE);
  if (!existsSync(file)) throw new ModelFormatError("adapter weights not found", file);
  const tensors = readSafetensors(file);
  const values = new Map<string, Float32Array>();
  for (const s of adapterSpecs(c, lora)) {
    const t = tensors.get(PEFT_PREFIX + s.name);
    if (!t)
      throw new ModelFormatError(
        "tensor missing (adapter_config.json asks for it)",
        file,
        PEFT_PREFIX + s.name,
      );
    if (t.shape.length !== 2 || t.shape[0] !== s.hfShape[0] || t.shape[1] !== s.hfShape[1])
      throw new ModelFormatError(
        `shape ${JSON.stringify(t.shape)}, the base model and adapter_config.json need ${JSON.stringify(s.hfShape)}`,
        file,
        PEFT_PREFIX + s.name,
      );
    values.set(s.name, transpose2d(t.data, s.hfShape[0]!, s.hfShape[1]!));
    tensors.delete(PEFT_PREFIX + s.name);
  }
  for (const name of tensors.keys())
    throw new ModelFormatError("a tensor adapter_config.json does not ask for", file, name);
  return values;
}
