/**
 * `pnpm torl model tiny --out DIR`: writes the tiny base model this package ships (HF format: config.json,
 * model.safetensors, tokenizer.json, ...) into DIR, so a project outside the repository has a model to
 * train, evaluate and scaffold with. Any Hugging Face Qwen2 directory works in its place.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { type CliCommand, parseFlags, UsageError } from "@torl-ts/core";
import { TINY_BASE_DIR } from "./tiny-model.js";

/** Copies the tiny base model's files into `out` (created; refused if it holds files, unless `force`). */
export function writeTinyBase(out: string, options: { force?: boolean } = {}): string[] {
  const dir = resolve(out);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new UsageError(`--out ${out} is a file, not a directory`);
    if (readdirSync(dir).length > 0 && !options.force)
      throw new UsageError(`--out ${out} exists and is not empty (pass --force to write into it anyway)`);
  }
  const files = readdirSync(TINY_BASE_DIR).filter((f) => statSync(join(TINY_BASE_DIR, f)).isFile());
  if (!files.includes("config.json"))
    throw new Error(
      `the tiny base model is missing from this installation: ${TINY_BASE_DIR} has no config.json`,
    );
  mkdirSync(dir, { recursive: true });
  for (const f of files) copyFileSync(join(TINY_BASE_DIR, f), join(dir, f));
  return files.sort();
}

export const modelTinyCommand: CliCommand = {
  summary: "write the tiny base model (a ~0.2M-parameter Qwen2, HF format) into DIR",
  usage: `usage: pnpm torl model tiny --out DIR [--force]

Writes the tiny ToRL base model into DIR: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json, and how it was made (trainer_state.json,
pretrain_eval.json). It is a Qwen2-architecture causal LM pretrained on tool-integrated solutions to
the tiny recipe's arithmetic problems, small enough to train on a CPU. Use it wherever a model
directory goes; any Hugging Face Qwen2 directory (config.json, model.safetensors, tokenizer.json)
works the same way:
  pnpm torl data tiny --out data
  pnpm torl eval --model DIR --data data/test.parquet
  pnpm torl train my.yaml actor_rollout_ref.model.path=DIR data.train_files=data/train.parquet
  --force   write into a DIR that already holds files`,
  async run(args) {
    const { flags } = parseFlags(args, { out: { type: "string" }, force: { type: "boolean" } });
    if (!flags.out) throw new UsageError("--out DIR is required");
    const files = writeTinyBase(flags.out, { force: flags.force });
    console.log(`wrote the tiny base model to ${resolve(flags.out)} (${files.join(", ")})`);
    return 0;
  },
};
