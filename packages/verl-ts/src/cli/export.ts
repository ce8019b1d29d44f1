/**
 * `pnpm torl export <checkpoint-dir> --out DIR [--dtype bf16|fp16|fp32] [--max-shard-size SIZE]
 * [--model DIR] [--adapter merged|peft]`: writes the Hugging Face model directory of a trainer checkpoint
 * (see export.ts); a LoRA checkpoint's merged weights or PEFT adapter directory.
 */
import { defineCommand, UsageError } from "@torl-ts/core";
import {
  ADAPTER_EXPORTS,
  DEFAULT_MAX_SHARD_BYTES,
  EXPORT_DTYPES,
  exportCheckpoint,
} from "../trainer/export.js";

const USAGE = `usage: pnpm torl export <checkpoint-dir> --out DIR [--dtype bf16|fp16|fp32] [--max-shard-size SIZE] [--model DIR]
                         [--adapter merged|peft]

Writes a Hugging Face model directory (config.json, model.safetensors or shards with
model.safetensors.index.json, generation_config.json, tokenizer files) from a trainer checkpoint,
whatever number of workers wrote it.
  checkpoint-dir       trainer.default_local_dir (its latest step), a global_step_<N> dir, or its actor/ dir
  --out DIR            the new model directory (must not exist or be empty)
  --dtype D            weight dtype: bf16, fp16 or fp32 (default: the run's actor_rollout_ref.model.dtype;
                       fp32 gives the float32 master weights exactly)
  --max-shard-size S   largest weight file, in bytes or with KB/MB/GB (default 5GB); above it: shards + index
  --model DIR          config.json and tokenizer from DIR (for a checkpoint without actor/huggingface/);
                       for a LoRA checkpoint, the base model (default: the one the run started from)
  --adapter A          a LoRA checkpoint (actor_rollout_ref.model.lora_rank > 0): merged (default), the base
                       with the adapters merged in; or peft, a PEFT adapter directory (adapter_config.json +
                       adapter_model.safetensors) for PeftModel.from_pretrained on the base
The output directory is printed last.`;

/** "5GB", "500MB", "64KB" or a byte count (decimal units, as Hugging Face's max_shard_size). */
export function parseByteSize(text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(B|KB|MB|GB)?$/i.exec(text.trim());
  if (!m) throw new UsageError(`--max-shard-size wants a size like 2GB, 500MB or 1000000, got ${text}`);
  const unit = { B: 1, KB: 1e3, MB: 1e6, GB: 1e9 }[(m[2] ?? "B").toUpperCase() as "B" | "KB" | "MB" | "GB"];
  const bytes = Math.floor(Number(m[1]) * unit);
  if (!(bytes > 0)) throw new UsageError(`--max-shard-size must be positive, got ${text}`);
  return bytes;
}

export const exportCommand = defineCommand({
  summary: "write a Hugging Face model directory from a trainer checkpoint",
  usage: USAGE,
  flags: {
    out: { type: "string" },
    dtype: { type: "string", choices: EXPORT_DTYPES },
    "max-shard-size": { type: "string" },
    model: { type: "string" },
    adapter: { type: "string", choices: ADAPTER_EXPORTS },
  },
  positionals: true,
  run(flags, positional) {
    if (positional.length !== 1)
      throw new UsageError(`give exactly one checkpoint directory, got ${positional.length}`);
    if (!flags.out) throw new UsageError("--out DIR is required");
    const result = exportCheckpoint(positional[0]!, {
      out: flags.out,
      dtype: flags.dtype,
      maxShardBytes: flags["max-shard-size"]
        ? parseByteSize(flags["max-shard-size"])
        : DEFAULT_MAX_SHARD_BYTES,
      model: flags.model,
      adapter: flags.adapter,
    });
    console.log(
      `exported ${result.parameters} ${result.adapter ? `adapter parameters (LoRA, ${result.adapter}, ` : "parameters ("}${result.dtype}, from ${result.worldSize} rank shard(s) in ${result.actorDir}): ${result.files.join(", ")}`,
    );
    console.log(result.out);
  },
});
