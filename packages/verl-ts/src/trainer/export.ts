/**
 * A trained policy leaves the framework: the actor shards of a trainer checkpoint (written by any number
 * of ranks, see workers/checkpoint-files.ts) become a Hugging Face model directory that transformers,
 * vLLM and our own loader read: config.json, model.safetensors (or model-0000i-of-0000n.safetensors
 * shards with model.safetensors.index.json above the shard size), generation_config.json and the
 * tokenizer files.
 *
 * The tokenizer_config.json written makes transformers tokenize by the tokenizer.json exactly as
 * torl-ts does (see writeHfTokenizerConfig).
 *
 * The architecture and the tokenizer come from `<step>/actor/huggingface/`, which the trainer fills
 * from actor_rollout_ref.model.path at every checkpoint (veRL keeps the same folder), or from a model
 * directory given explicitly (the one the run started from).
 *
 * A LoRA run's checkpoint holds the adapters only, and its huggingface/ folder PEFT's adapter_config.json
 * (the base model's directory in base_model_name_or_path): the export is either the base with the
 * adapters merged in (a plain model directory) or a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors, PEFT's tensor names) that PEFT loads onto the base.
 */
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { InputError } from "@torl-ts/core";
import { toHfConfig } from "../models/config.js";
import { HalfArray, type StoredValues, type WeightDtype } from "../models/half-precision.js";
import {
  ADAPTER_CONFIG_FILE,
  adapterSpecs,
  type LoraConfig,
  type LoraKeys,
  loraConfigOf,
  mergeAdapterValues,
  peftAdapterConfig,
  readPeftAdapterConfig,
  writePeftAdapterDir,
} from "../models/lora.js";
import { loadModelConfig, loadModelValues, transpose2d } from "../models/pretrained.js";
import { parameterSpecs } from "../models/qwen2.js";
import { type NamedTensor, type SafetensorsDtype, writeCheckpointDir } from "../models/safetensors.js";
import { loadTokenizer, writeHfTokenizerConfig } from "../models/tokenizer.js";
import { readAllShards } from "../workers/checkpoint-files.js";
import { LATEST_FILE } from "./checkpoint.js";

/** The folder of a checkpoint's actor/ that holds config.json and the tokenizer files. */
export const HF_METADATA_DIR = "huggingface";

/** Files copied from the model directory next to the weights (those that exist). */
export const HF_METADATA_FILES = [
  "config.json",
  "generation_config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "chat_template.jinja",
] as const;

export type ExportDtype = "bf16" | "fp16" | "fp32";
export const EXPORT_DTYPES: readonly ExportDtype[] = ["bf16", "fp16", "fp32"];
/** The export dtype of a model storage dtype (a checkpoint's actor_rollout_ref.model.dtype). */
export const EXPORT_DTYPE_OF: Record<WeightDtype, ExportDtype> = {
  float32: "fp32",
  bfloat16: "bf16",
  float16: "fp16",
};
const SAFETENSORS_DTYPE: Record<ExportDtype, SafetensorsDtype> = { bf16: "BF16", fp16: "F16", fp32: "F32" };
const TORCH_DTYPE: Record<ExportDtype, string> = { bf16: "bfloat16", fp16: "float16", fp32: "float32" };

/** Hugging Face's default largest shard (save_pretrained's max_shard_size="5GB"). */
export const DEFAULT_MAX_SHARD_BYTES = 5e9;

/**
 * A checkpoint that cannot be exported, or an output directory that cannot be used; names the path.
 * Bad input: the CLI exits 2.
 */
export class ExportError extends InputError {
  override name = "ExportError";
}

/**
 * Copies the files of HF_METADATA_FILES that `src` has into `dest` (except those in `skip`). Beside a
 * tokenizer.json, tokenizer_config.json (its keys kept) is written by writeHfTokenizerConfig, so that
 * transformers tokenizes by tokenizer.json as torl-ts does. Returns the files written.
 */
function copyHfMetadata(src: string, dest: string, skip: readonly string[] = []): string[] {
  const copied: string[] = [];
  for (const f of HF_METADATA_FILES) {
    if (skip.includes(f) || f === "tokenizer_config.json" || !existsSync(join(src, f))) continue;
    copyFileSync(join(src, f), join(dest, f));
    copied.push(f);
  }
  const configFile = join(src, "tokenizer_config.json");
  if (existsSync(join(src, "tokenizer.json"))) {
    copied.push(...writeHfTokenizerConfig(dest, existsSync(configFile) ? readJson(configFile) : {}));
  } else if (existsSync(configFile)) {
    copyFileSync(configFile, join(dest, "tokenizer_config.json"));
    copied.push("tokenizer_config.json");
  }
  return copied;
}

/**
 * Copies the model directory's config and tokenizer files into `<actorDir>/huggingface/`; with LoRA keys
 * set (`lora`: actor_rollout_ref.model), PEFT's adapter_config.json beside them, naming the base.
 */
export function saveHfMetadata(modelDir: string, actorDir: string, lora?: LoraKeys): string[] {
  const dest = join(actorDir, HF_METADATA_DIR);
  mkdirSync(dest, { recursive: true });
  const files = copyHfMetadata(modelDir, dest);
  const setting = lora && loraConfigOf(lora);
  if (setting) {
    const config = peftAdapterConfig(setting, resolve(modelDir));
    writeFileSync(join(dest, ADAPTER_CONFIG_FILE), `${JSON.stringify(config, null, 2)}\n`);
    files.push(ADAPTER_CONFIG_FILE);
  }
  return files;
}

/**
 * The actor shard directory of `path`: a trainer's checkpoint root (default_local_dir: its latest
 * step), a `global_step_<N>` directory, or the `actor` directory itself.
 */
export function resolveActorDir(path: string): string {
  if (!existsSync(path)) throw new ExportError(`checkpoint ${path} does not exist`);
  if (!statSync(path).isDirectory())
    throw new ExportError(`checkpoint ${path} is a file; give the checkpoint's directory`);
  const isShardDir = (d: string) => existsSync(d) && readdirSync(d).some((f) => /^rank_\d+\.json$/.test(f));
  if (isShardDir(path)) return path;
  if (isShardDir(join(path, "actor"))) return join(path, "actor");
  const latest = join(path, LATEST_FILE);
  if (existsSync(latest)) {
    const step = readFileSync(latest, "utf8").trim();
    const dir = join(path, `global_step_${step}`, "actor");
    if (isShardDir(dir)) return dir;
    throw new ExportError(`${latest} names step ${step}, but ${dir} holds no rank_<r>.json shards`);
  }
  throw new ExportError(
    `${path} is not a checkpoint: expected rank_<r>.json shards, an actor/ folder with them, or ${LATEST_FILE}`,
  );
}

export interface ExportOptions {
  /** The output directory (created; must be empty if it exists). */
  out: string;
  /**
   * Weight dtype of the export. Default the checkpoint's storage dtype (its actor_rollout_ref.model.dtype:
   * fp32 gives the float32 master weights exactly; bf16 / fp16 the weights the run generated with).
   */
  dtype?: ExportDtype;
  /** Largest weight file; above it the weights are sharded with an index. Default 5 GB. */
  maxShardBytes?: number;
  /**
   * A model directory with config.json and the tokenizer, for checkpoints without huggingface/; for a
   * LoRA checkpoint, the base model (default: the adapter_config.json's base_model_name_or_path).
   */
  model?: string;
  /** A LoRA checkpoint's export: the base with the adapters merged in (default), or a PEFT adapter directory. */
  adapter?: AdapterExport;
}

export type AdapterExport = "merged" | "peft";
export const ADAPTER_EXPORTS: readonly AdapterExport[] = ["merged", "peft"];

export interface ExportResult {
  out: string;
  actorDir: string;
  files: string[];
  dtype: ExportDtype;
  parameters: number;
  /** Ranks that wrote the checkpoint. */
  worldSize: number;
  /** A LoRA checkpoint's export: how the adapters were written. */
  adapter?: AdapterExport;
}

/** Writes the Hugging Face model directory of a checkpoint's actor (see the file comment). */
export function exportCheckpoint(checkpoint: string, options: ExportOptions): ExportResult {
  if (options.dtype !== undefined && !EXPORT_DTYPES.includes(options.dtype))
    throw new ExportError(`--dtype must be one of ${EXPORT_DTYPES.join(", ")}, got ${options.dtype}`);
  const actorDir = resolveActorDir(checkpoint);
  const adapterConfig = join(actorDir, HF_METADATA_DIR, ADAPTER_CONFIG_FILE);
  if (existsSync(adapterConfig)) return exportLoraCheckpoint(actorDir, options);
  if (options.adapter !== undefined)
    throw new ExportError(
      `--adapter ${options.adapter}: ${actorDir} is not a LoRA checkpoint (no ${adapterConfig})`,
    );
  const metaDir = options.model ?? join(actorDir, HF_METADATA_DIR);
  if (!existsSync(join(metaDir, "config.json")))
    throw new ExportError(
      options.model
        ? `${options.model} holds no config.json`
        : `${actorDir} has no ${HF_METADATA_DIR}/config.json (a checkpoint written before exports were supported); pass --model DIR, the model directory the run started from`,
    );
  const config = loadModelConfig(metaDir);
  const state = readAllShards(actorDir);
  const dtype = options.dtype ?? EXPORT_DTYPE_OF[state.dtype];
  const offsets = new Map<string, { offset: number; size: number }>();
  let offset = 0;
  for (const [name, size] of state.layout) {
    offsets.set(name, { offset, size });
    offset += size;
  }
  const tensors: NamedTensor[] = [];
  const specs = parameterSpecs(config);
  for (const spec of specs) {
    const at = offsets.get(spec.name);
    const size = spec.shape.reduce((a, b) => a * b, 1);
    if (!at)
      throw new ExportError(
        `${actorDir}: the checkpoint has no parameter ${spec.name}, which ${join(metaDir, "config.json")} asks for`,
      );
    if (at.size !== size)
      throw new ExportError(
        `${actorDir}: parameter ${spec.name} holds ${at.size} values, ${join(metaDir, "config.json")} needs ${size}`,
      );
    const ours = state.params.subarray(at.offset, at.offset + at.size);
    const data = spec.transposed ? transpose2d(ours, spec.shape[0]!, spec.shape[1]!) : ours.slice();
    tensors.push({ name: spec.name, shape: spec.hfShape.slice(), data });
  }
  if (offsets.size !== specs.length) {
    const known = new Set(specs.map((s) => s.name));
    const extra = [...offsets.keys()].filter((n) => !known.has(n));
    throw new ExportError(`${actorDir}: parameters ${extra.join(", ")} are not in the model's config.json`);
  }

  return {
    ...writeExport(metaDir, config, tensors, dtype, options),
    actorDir,
    parameters: state.params.length,
    worldSize: shardCount(actorDir),
  };
}

function shardCount(actorDir: string): number {
  return readdirSync(actorDir).filter((f) => /^rank_\d+\.json$/.test(f)).length;
}

/** Creates the output directory: new, or empty. */
function prepareOut(out: string): void {
  if (existsSync(out) && !statSync(out).isDirectory())
    throw new ExportError(`--out ${out} is a file; give a new directory`);
  if (existsSync(out) && readdirSync(out).length > 0)
    throw new ExportError(
      `${out} is not empty; export into a new directory (old weight shards would mix with new ones)`,
    );
  mkdirSync(out, { recursive: true });
}

/** Writes a model directory: config.json from `metaDir`'s (dtype set), the weights, tokenizer and generation config. */
function writeExport(
  metaDir: string,
  config: ReturnType<typeof loadModelConfig>,
  tensors: NamedTensor[],
  dtype: ExportDtype,
  options: ExportOptions,
): { out: string; files: string[]; dtype: ExportDtype } {
  prepareOut(options.out);
  const source = readJson(join(metaDir, "config.json"));
  // transformers 5 names the dtype `dtype`: a source that has it gets it set too, never left stale
  const dtypeKeys = {
    torch_dtype: TORCH_DTYPE[dtype],
    ...("dtype" in source ? { dtype: TORCH_DTYPE[dtype] } : {}),
  };
  writeFileSync(
    join(options.out, "config.json"),
    `${JSON.stringify({ ...source, ...toHfConfig(config), ...dtypeKeys }, null, 2)}\n`,
  );
  const files = [
    "config.json",
    ...writeCheckpointDir(
      options.out,
      tensors,
      SAFETENSORS_DTYPE[dtype],
      options.maxShardBytes ?? DEFAULT_MAX_SHARD_BYTES,
    ),
  ];
  files.push(...copyHfMetadata(metaDir, options.out, ["config.json"]));
  if (!files.includes("generation_config.json")) {
    const tok = loadTokenizer(metaDir);
    const gen = { eos_token_id: tok.eosTokenId, pad_token_id: tok.padTokenId };
    writeFileSync(join(options.out, "generation_config.json"), `${JSON.stringify(gen, null, 2)}\n`);
    files.push("generation_config.json");
  }
  return { out: options.out, files, dtype };
}

/**
 * A LoRA checkpoint's export (see the file comment): the adapters from the shards, the base from
 * `options.model` or the adapter_config.json's base_model_name_or_path.
 */
function exportLoraCheckpoint(actorDir: string, options: ExportOptions): ExportResult {
  const metaDir = join(actorDir, HF_METADATA_DIR);
  const { lora, baseModel: recorded } = readPeftAdapterConfig(metaDir);
  const baseModel = options.model ?? recorded;
  if (!existsSync(join(baseModel, "config.json")))
    throw new ExportError(
      `${baseModel} holds no config.json: the LoRA checkpoint ${actorDir} needs its base model; pass --model DIR`,
    );
  const config = loadModelConfig(baseModel);
  const state = readAllShards(actorDir);
  const dtype = options.dtype ?? EXPORT_DTYPE_OF[state.dtype];
  const adapters = new Map<string, Float32Array>();
  let offset = 0;
  for (const [name, size] of state.layout) {
    adapters.set(name, state.params.subarray(offset, offset + size));
    offset += size;
  }
  checkAdapterLayout(actorDir, config, lora, adapters);
  const common = { actorDir, parameters: state.params.length, worldSize: shardCount(actorDir) };
  if ((options.adapter ?? "merged") === "peft") {
    prepareOut(options.out);
    const files = writePeftAdapterDir(
      options.out,
      config,
      lora,
      adapters,
      resolve(baseModel),
      SAFETENSORS_DTYPE[dtype],
    );
    // the base's tokenizer beside the adapters, so that `torl eval --model` reads the directory alone
    files.push(...copyHfMetadata(baseModel, options.out, ["config.json", "generation_config.json"]));
    return { out: options.out, files, dtype, ...common, adapter: "peft" };
  }
  const merged = mergeAdapterValues(config, lora, loadModelValues(baseModel).values, adapters);
  const tensors = parameterSpecs(config).map((spec) => {
    const v = float32Of(merged.get(spec.name)!);
    const data = spec.transposed ? transpose2d(v, spec.shape[0]!, spec.shape[1]!) : v;
    return { name: spec.name, shape: spec.hfShape.slice(), data };
  });
  return { ...writeExport(baseModel, config, tensors, dtype, options), ...common, adapter: "merged" };
}

function float32Of(v: StoredValues): Float32Array {
  return v instanceof HalfArray ? v.toFloat32() : v;
}

/** The checkpoint's parameters are the adapters adapter_config.json and the base's config.json describe. */
function checkAdapterLayout(
  actorDir: string,
  config: ReturnType<typeof loadModelConfig>,
  lora: LoraConfig,
  adapters: Map<string, Float32Array>,
): void {
  const want = new Map(adapterSpecs(config, lora).map((s) => [s.name, s.shape[0]! * s.shape[1]!]));
  for (const [name, v] of adapters)
    if (want.get(name) !== v.length)
      throw new ExportError(
        `${actorDir}: parameter ${name} (${v.length} values) is not an adapter of rank ${lora.rank} on the base model`,
      );
  for (const name of want.keys())
    if (!adapters.has(name)) throw new ExportError(`${actorDir}: the checkpoint has no adapter ${name}`);
}

function readJson(file: string): Record<string, unknown> {
  return JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
}
