/**
 * `pnpm torl train <config.yaml ...> [a.b.c=value ...] [--tool MODULE#EXPORT] [--runs-dir DIR]`: loads
 * the config (defaults, the YAML files, the overrides), imports actor_rollout_ref.model.external_lib,
 * and trains. Here it runs the trainer of trainer.mode (createTrainer).fit(); a recipe offers its own `train` through
 * `defineTrainCommand`, with its config keys and its run (data, reward, outputs), and the same command
 * line.
 */
import { existsSync } from "node:fs";
import { type CliCommand, defineCommand, UsageError } from "@torl-ts/core";
import { loadTrainerConfig, splitConfigArgs } from "../config/load.js";
import type { TrainerConfig } from "../config/types.js";
import { resolveToolModule, type ToolSpec } from "../rollout/tool-config.js";
import { createTrainer } from "../trainer/async-trainer.js";
import { importExternalLib } from "../workers/external-lib.js";

/** What the command line adds to the config: the rollout tool and where runs go. */
export interface TrainRunFlags {
  /** --tool MODULE#EXPORT, as a module URL and export. */
  tool?: ToolSpec;
  /** --runs-dir DIR. */
  runsDir?: string;
}

/** A `train` command: its help, how it loads a config, and what it runs on it. */
export interface TrainCommandSpec {
  summary: string;
  usage: string;
  /** Refuse a command line without a config file (a recipe's settings live in its files). */
  needsConfigFile?: boolean;
  /** The config of the YAML files and key=value overrides (the flags too, where they set keys). */
  loadConfig(files: string[], overrides: string[], flags: TrainRunFlags): TrainerConfig;
  train(config: TrainerConfig, flags: TrainRunFlags): Promise<unknown>;
}

/**
 * `--tool MODULE#EXPORT`: MODULE is a package specifier (`@torl-ts/verl`, found from the current
 * directory's project), a path (./file.js, ../file.js or absolute) or a URL; EXPORT names the tool's class
 * or factory. A module that cannot be found is refused here, before anything starts.
 */
export function parseToolFlag(value: string, cwd = process.cwd()): ToolSpec {
  const at = value.lastIndexOf("#");
  const mod = at < 0 ? "" : value.slice(0, at);
  const exp = at < 0 ? "" : value.slice(at + 1);
  if (!mod || !exp) throw new UsageError(`--tool wants MODULE#EXPORT, got ${value}`);
  try {
    return { module: resolveToolModule(mod, cwd), exportName: exp };
  } catch (e) {
    throw new UsageError(`--tool ${value}: ${(e as Error).message}`);
  }
}

/** The train command of `spec`: one command line for the trainer and for every recipe. */
export function defineTrainCommand(spec: TrainCommandSpec): CliCommand {
  return defineCommand({
    summary: spec.summary,
    usage: spec.usage,
    flags: { tool: { type: "string" }, "runs-dir": { type: "string" } },
    positionals: true,
    async run(flags, positionals) {
      const tool = flags.tool === undefined ? undefined : parseToolFlag(flags.tool);
      const { files, overrides } = splitConfigArgs(positionals);
      if (spec.needsConfigFile && files.length === 0)
        throw new UsageError("train needs a config file (<config.yaml>)");
      for (const f of files) if (!existsSync(f)) throw new UsageError(`config file not found: ${f}`);
      const runFlags: TrainRunFlags = { tool, runsDir: flags["runs-dir"] };
      const config = spec.loadConfig(files, overrides, runFlags);
      // before the checks: an estimator or loss the module registers must be known to them
      await importExternalLib(config.actor_rollout_ref.model.external_lib as string | null);
      await spec.train(config, runFlags);
    },
  });
}

export const trainCommand: CliCommand = defineTrainCommand({
  summary: "train a policy with PPO/GRPO (veRL's trainer config)",
  usage: `usage: pnpm torl train <config.yaml ...> [key.path=value ...] [--tool MODULE#EXPORT] [--runs-dir DIR]

Runs PPO/GRPO training with veRL's trainer keys (every key and its default: pnpm torl config print).
  config.yaml         YAML files merged over the defaults, in order
  key.path=value      overrides, e.g. data.train_batch_size=8 trainer.total_training_steps=2
  --tool M#E          the rollout tool instead of the Python code interpreter: module M (a package,
                      e.g. @torl-ts/verl, or a path ./file.js), export E (a Tool class or factory,
                      given actor_rollout_ref.rollout.tool); refused with
                      actor_rollout_ref.rollout.num_llm_calls_available=0 (no tool runs then)
  --runs-dir DIR      where runs/<trainer.experiment_name> goes (default runs)
Metrics go to <runs-dir>/<name>/metrics.jsonl and summary.json; the run directory is printed last.
A rerun with trainer.resume_mode=auto (the default) continues from the latest checkpoint.`,
  loadConfig: (files, overrides) => loadTrainerConfig({ files, overrides }),
  train: (config, { tool, runsDir }) => createTrainer(config, { tool, runsDir }).fit(),
});
