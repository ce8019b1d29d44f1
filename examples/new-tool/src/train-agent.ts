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
import { dirname, isAbsolute, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type CliCommand, runScript, UsageError } from "@torl-ts/core";
import { loadTrainerConfig, multiTurnConfig, type TrainingSummary } from "@torl-ts/verl";
import { type ExampleTrainOptions, exampleTrainCommand, fitOnCalculatorRows } from "./train.js";

export const AGENT_CONFIG = fileURLToPath(new URL("../configs/agent.yaml", import.meta.url));
export const AGENT_TOOLS = fileURLToPath(new URL("../configs/agent-tools.yaml", import.meta.url));

export async function trainAgent(o: ExampleTrainOptions = {}): Promise<TrainingSummary> {
  const configFile = o.configFile ?? AGENT_CONFIG;
  const cfg = loadTrainerConfig({ files: [configFile], overrides: o.overrides ?? [] });
  if (!cfg.actor_rollout_ref.model.path)
    throw new UsageError("actor_rollout_ref.model.path is required: a chat model directory");
  // A relative tool config path is read from the config file's folder (veRL reads it from the cwd).
  const mt = multiTurnConfig(cfg);
  if (mt.tool_config_path && !isAbsolute(mt.tool_config_path))
    mt.tool_config_path = resolve(dirname(configFile), mt.tool_config_path);
  return fitOnCalculatorRows(cfg, o);
}

export const trainAgentCommand: CliCommand = exampleTrainCommand(
  "train a chat model with the calculator and the code interpreter (multi-turn agent loop)",
  [
    "usage: pnpm tsx examples/new-tool/src/train-agent.ts [CONFIG.yaml] actor_rollout_ref.model.path=DIR [key.path=value ...]",
    "",
    "Trains with two tools through the multi-turn agent loop (RayPPOTrainer). CONFIG.yaml defaults to",
    "examples/new-tool/configs/agent.yaml. DIR is a chat model whose tokenizer_config.json has a chat template.",
    "Prints the training summary as JSON.",
  ].join("\n"),
  trainAgent,
);

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  runScript(trainAgentCommand, "pnpm tsx examples/new-tool/src/train-agent.ts");
