/**
 * Trains a chat model with two tools, the calculator of this example and the sandbox code interpreter,
 * through veRL's multi-turn agent loop on the stock trainer (RayPPOTrainer). The tools come from the tool
 * config file named by `actor_rollout_ref.rollout.multi_turn.tool_config_path`; the worker processes
 * import and build them. No rollout code changes.
 *
 *   pnpm tsx examples/new-tool/src/train-agent.ts [configs/agent.yaml] actor_rollout_ref.model.path=DIR [k=v ...]
 *
 * The model must be a chat model: its tokenizer_config.json carries the chat template (with tools, as
 * Qwen2.5-Instruct's does) and its EOS ends an assistant turn.
 */
import { existsSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type CliCommand, parseFlags, runScript, UsageError } from "@torl-ts/core";
import { loadTrainerConfig, multiTurnConfig, RayPPOTrainer, type TrainingSummary } from "@torl-ts/verl";
import { calculatorRows } from "./train.js";

export const AGENT_CONFIG = fileURLToPath(new URL("../configs/agent.yaml", import.meta.url));
export const AGENT_TOOLS = fileURLToPath(new URL("../configs/agent-tools.yaml", import.meta.url));

export interface TrainAgentOptions {
  configFile?: string;
  overrides?: string[];
  runsDir?: string;
  log?: (line: string) => void;
  workerEnv?: Record<string, string>;
}

export async function trainAgent(o: TrainAgentOptions = {}): Promise<TrainingSummary> {
  const configFile = o.configFile ?? AGENT_CONFIG;
  const cfg = loadTrainerConfig({ files: [configFile], overrides: o.overrides ?? [] });
  if (!cfg.actor_rollout_ref.model.path)
    throw new UsageError("actor_rollout_ref.model.path is required: a chat model directory");
  // A relative tool config path is read from the config file's folder (veRL reads it from the cwd).
  const mt = multiTurnConfig(cfg);
  if (mt.tool_config_path && !isAbsolute(mt.tool_config_path))
    mt.tool_config_path = resolve(dirname(configFile), mt.tool_config_path);
  const trainer = new RayPPOTrainer(cfg, {
    trainRows: calculatorRows(cfg.data.train_batch_size * Math.max(1, cfg.trainer.total_training_steps ?? 1)),
    valRows: [],
    ...(o.runsDir ? { runsDir: o.runsDir } : {}),
    ...(o.log ? { log: o.log } : {}),
    ...(o.workerEnv ? { workerEnv: o.workerEnv } : {}),
  });
  return trainer.fit();
}

export const trainAgentCommand: CliCommand = {
  summary: "train a chat model with the calculator and the code interpreter (multi-turn agent loop)",
  usage: [
    "usage: pnpm tsx examples/new-tool/src/train-agent.ts [CONFIG.yaml] actor_rollout_ref.model.path=DIR [key.path=value ...]",
    "",
    "Trains with two tools through the multi-turn agent loop (RayPPOTrainer). CONFIG.yaml defaults to",
    "examples/new-tool/configs/agent.yaml. DIR is a chat model whose tokenizer_config.json has a chat template.",
    "Prints the training summary as JSON.",
  ].join("\n"),
  async run(args) {
    const { positionals } = parseFlags(args, {}, { positionals: true });
    const file = positionals[0] && !positionals[0].includes("=") ? positionals.shift() : undefined;
    if (file !== undefined && !existsSync(file))
      throw new UsageError(`config file not found: ${file} (resolved to ${resolve(file)})`);
    const summary = await trainAgent({
      ...(file ? { configFile: resolve(file) } : {}),
      overrides: positionals,
    });
    console.log(JSON.stringify(summary));
    return 0;
  },
};

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  runScript(trainAgentCommand, "pnpm tsx examples/new-tool/src/train-agent.ts");
