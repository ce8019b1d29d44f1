/**
 * `pnpm torl train <config.yaml ...> [a.b.c=value ...] [--tool MODULE#EXPORT] [--runs-dir DIR]`: loads
 * the config (defaults, the YAML files, the overrides), checks it before anything starts, and runs
 * RayPPOTrainer.fit(). The rollout tool, when given, is imported by every worker process.
 */
import { pathToFileURL } from "node:url";
import { type CliCommand, parseFlags, UsageError } from "@torl-ts/core";
import { loadTrainerConfig, splitConfigArgs } from "../config/load.js";
import { importExternalLib } from "../workers/external-lib.js";
import { RayPPOTrainer } from "./ppo-trainer.js";

const USAGE = `usage: pnpm torl train <config.yaml ...> [key.path=value ...] [--tool MODULE#EXPORT] [--runs-dir DIR]

Runs PPO/GRPO training with veRL's trainer keys (see packages/verl-ts/src/config/ppo-trainer.yaml).
  config.yaml         YAML files merged over the defaults, in order
  key.path=value      overrides, e.g. data.train_batch_size=8 trainer.total_training_steps=2
  --tool M#E          the rollout tool: module path or URL M, export E (a Tool class or factory)
  --runs-dir DIR      where runs/<trainer.experiment_name> goes (default runs)
Metrics go to <runs-dir>/<name>/metrics.jsonl and summary.json; the run directory is printed last.
A rerun with trainer.resume_mode=auto (the default) continues from the latest checkpoint.`;

export const trainCommand: CliCommand = {
  summary: "train a policy with PPO/GRPO (veRL's trainer config)",
  usage: USAGE,
  async run(args: string[]): Promise<number> {
    const { flags, positionals } = parseFlags(
      args,
      { tool: { type: "string" }, "runs-dir": { type: "string" } },
      { positionals: true },
    );
    let tool: { module: string; exportName: string } | undefined;
    if (flags.tool !== undefined) {
      const [mod, exp] = flags.tool.split("#");
      if (!mod || !exp) throw new UsageError(`--tool wants MODULE#EXPORT, got ${flags.tool}`);
      tool = { module: /^[a-z]+:/.test(mod) ? mod : pathToFileURL(mod).href, exportName: exp };
    }
    const runsDir = flags["runs-dir"] ?? "runs";
    const rest = positionals;
    const { files, overrides } = splitConfigArgs(rest);
    const config = loadTrainerConfig({ files, overrides });
    // before the checks: an estimator or loss the module registers must be known to them
    await importExternalLib(config.actor_rollout_ref.model.external_lib);
    const trainer = new RayPPOTrainer(config, { tool, runsDir });
    await trainer.fit();
    return 0;
  },
};
