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
import { join } from "node:path";
import { InputError } from "@torl-ts/core";
import { toHfConfig } from "../models/config.js";
import type { WeightDtype } from "../models/half-precision.js";
import { loadModelConfig, transpose2d } from "../models/pretrained.js";
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

/** Copies the model directory's config and tokenizer files into `<actorDir>/huggingface/`. */
export function saveHfMetadata(modelDir: string, actorDir: string): string[] {
  const dest = join(actorDir, HF_METADATA_DIR);
  mkdirSync(dest, { recursive: true });
  return copyHfMetadata(modelDir, dest);
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
  /** A model directory with config.json and the tokenizer, for checkpoints without huggingface/. */
  model?: string;
}

export interface ExportResult {
  out: string;
  actorDir: string;
  files: string[];
  dtype: ExportDtype;
  parameters: number;
  /** Ranks that wrote the checkpoint. */
  worldSize: number;
}

/** Writes the Hugging Face model directory of a checkpoint's actor (see the file comment). */
export function exportCheckpoint(checkpoint: string, options: ExportOptions): ExportResult {
  if (options.dtype !== undefined && !EXPORT_DTYPES.includes(options.dtype))
    throw new ExportError(`--dtype must be one of ${EXPORT_DTYPES.join(", ")}, got ${options.dtype}`);
  const actorDir = resolveActorDir(checkpoint);
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

  if (existsSync(options.out) && !statSync(options.out).isDirectory())
    throw new ExportError(`--out ${options.out} is a file; give a new directory`);
  if (existsSync(options.out) && readdirSync(options.out).length > 0)
    throw new ExportError(
      `${options.out} is not empty; export into a new directory (old weight shards would mix with new ones)`,
    );
  mkdirSync(options.out, { recursive: true });
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
  return {
    out: options.out,
    actorDir,
    files,
    dtype,
    parameters: state.params.length,
    worldSize: readdirSync(actorDir).filter((f) => /^rank_\d+\.json$/.test(f)).length,
  };
}

function readJson(file: string): Record<string, unknown> {
  return JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
}
