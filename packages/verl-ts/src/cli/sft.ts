/**
 * `torl sft <config.yaml ...> [key.path=value ...] [--runs-dir DIR]`: supervised fine-tuning with veRL's
 * SFT trainer keys (sft-trainer.yaml), on the FSDP workers of the PPO trainer.
 */
import { existsSync } from "node:fs";
import { type CliCommand, defineCommand, UsageError } from "@torl-ts/core";
import { splitConfigArgs } from "../config/load.js";
import { loadSftConfig } from "../config/sft.js";
import { FSDPSFTTrainer } from "../trainer/sft-trainer.js";
import { importExternalLib } from "../workers/external-lib.js";

export const sftCommand: CliCommand = defineCommand({
  summary: "supervised fine-tuning on conversations (veRL's SFT trainer config)",
  usage: `usage: pnpm torl sft <config.yaml ...> [key.path=value ...] [--runs-dir DIR]

Fine-tunes a chat model (model.partial_pretrain) on conversations, the loss on the assistant turns
only, with veRL's SFT trainer keys (every key, its default and its doc: docs/sft.md).
  config.yaml         YAML files merged over the defaults, in order
  key.path=value      overrides, e.g. data.train_files=data/sft.parquet trainer.total_training_steps=20
  --runs-dir DIR      where runs/<trainer.experiment_name> goes (default runs)
Data: parquet or JSONL rows with data.prompt_key / data.response_key columns, or with
data.multiturn.enable=true a data.multiturn.messages_key column of {role, content} messages (and
optionally data.multiturn.tools_key: the tools the chat template lists).
Prints a line per step; metrics go to <runs-dir>/<name>/metrics.jsonl and summary.json, checkpoints
(trainer.save_freq) to trainer.default_local_dir; the run directory is printed last. A rerun with
trainer.resume_mode=auto (the default) continues from the latest checkpoint.`,
  flags: { "runs-dir": { type: "string" } },
  positionals: true,
  async run(flags, positionals) {
    const { files, overrides } = splitConfigArgs(positionals);
    for (const f of files) if (!existsSync(f)) throw new UsageError(`config file not found: ${f}`);
    const config = loadSftConfig({ files, overrides });
    await importExternalLib(config.model.external_lib);
    await new FSDPSFTTrainer(config, { runsDir: flags["runs-dir"] }).fit();
  },
});
