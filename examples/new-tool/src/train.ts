/**
 * Trains a model with the calculator tool using the stock trainer (RayPPOTrainer) and the stock TIR
 * rollout. The tool is chosen by configuration: `actor_rollout_ref.rollout.tool.config` names the
 * module and export of the Tool class, and the worker processes import it. No rollout code changes.
 *
 *   pnpm tsx examples/new-tool/src/train.ts [configs/calculator.yaml] [k=v ...]
 *
 * The default model is the tiny ToRL base (packages/verl-ts/assets/tiny-base); pass
 * actor_rollout_ref.model.path=<dir> for another HF-format directory.
 */
import { existsSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type CliCommand, defineCommand, runScript, UsageError } from "@torl-ts/core";
import {
  type ChatMessage,
  loadTrainerConfig,
  questionOf,
  RayPPOTrainer,
  type RlDatasetRow,
  registerPromptTemplate,
  type ToolSpec,
  type TrainerConfig,
  TrainerConfigError,
  type TrainingSummary,
} from "@torl-ts/verl";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";

export const DEFAULT_CONFIG = fileURLToPath(new URL("../configs/calculator.yaml", import.meta.url));
export const TINY_BASE = TINY_BASE_DIR;

/** The prompt: tells the model how to call the calculator. Registered as data.template_type=calculator. */
export function calculatorTemplate(messages: readonly ChatMessage[]): string {
  return (
    "Compute with <calc>expression</calc>; the result follows in <output></output>. " +
    `Put the final answer within \\boxed{}.\nUser: ${questionOf(messages)}\nAssistant:\n`
  );
}
registerPromptTemplate("calculator", calculatorTemplate);

/**
 * The Tool spec the trainer hands to its worker processes, read from the config:
 * `actor_rollout_ref.rollout.tool.config.{module, export, options}`; module paths are resolved against
 * `baseDir` (the config file's folder). null when num_llm_calls_available is 0.
 */
export function toolSpecFromConfig(cfg: TrainerConfig, baseDir: string): ToolSpec | null {
  const rollout = cfg.actor_rollout_ref.rollout;
  if (rollout.num_llm_calls_available === 0) return null;
  const tool = (rollout as { tool?: { config?: Record<string, unknown> } }).tool ?? {};
  const c = tool.config ?? {};
  if (typeof c.module !== "string")
    throw new TrainerConfigError([
      {
        key: "actor_rollout_ref.rollout.tool.config.module",
        message: "actor_rollout_ref.rollout.tool.config.module must name the tool's module",
      },
    ]);
  const path = isAbsolute(c.module) ? c.module : resolve(baseDir, c.module);
  if (!existsSync(path))
    throw new TrainerConfigError([
      {
        key: "actor_rollout_ref.rollout.tool.config.module",
        message: `actor_rollout_ref.rollout.tool.config.module: ${path} does not exist`,
      },
    ]);
  return {
    module: pathToFileURL(path).href,
    exportName: typeof c.export === "string" ? c.export : "default",
    args: c.options === undefined ? [] : [c.options],
  };
}

/** Arithmetic questions with exact integer answers, as RL dataset rows. */
export function calculatorRows(count: number, seed = 1): RlDatasetRow[] {
  let state = seed >>> 0;
  const random = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  return Array.from({ length: count }, (_, index) => {
    const a = 100 + Math.floor(random() * 900);
    const b = 10 + Math.floor(random() * 90);
    return {
      data_source: "calculator_arith",
      prompt: [{ role: "user", content: `What is ${a} times ${b}?` }],
      ability: "math",
      reward_model: { ground_truth: String(a * b), style: "rule" },
      extra_info: { index },
    };
  });
}

/** A training run of this example: the config file, the `k=v` overrides, and where its output goes. */
export interface ExampleTrainOptions {
  configFile?: string;
  overrides?: string[];
  runsDir?: string;
  log?: (line: string) => void;
  workerEnv?: Record<string, string>;
}

/** The stock trainer on calculator questions (one batch per step, no validation). */
export function fitOnCalculatorRows(
  cfg: TrainerConfig,
  o: ExampleTrainOptions,
  tool?: ToolSpec | null,
): Promise<TrainingSummary> {
  const trainer = new RayPPOTrainer(cfg, {
    ...(tool !== undefined ? { tool } : {}),
    trainRows: calculatorRows(cfg.data.train_batch_size * Math.max(1, cfg.trainer.total_training_steps ?? 1)),
    valRows: [],
    ...(o.runsDir ? { runsDir: o.runsDir } : {}),
    ...(o.log ? { log: o.log } : {}),
    ...(o.workerEnv ? { workerEnv: o.workerEnv } : {}),
  });
  return trainer.fit();
}

export async function trainWithCalculator(o: ExampleTrainOptions = {}): Promise<TrainingSummary> {
  const configFile = o.configFile ?? DEFAULT_CONFIG;
  const overrides = o.overrides ?? [];
  const hasModel = overrides.some((kv) => kv.startsWith("actor_rollout_ref.model.path="));
  const cfg = loadTrainerConfig({
    files: [configFile],
    overrides: hasModel ? overrides : [`actor_rollout_ref.model.path=${TINY_BASE}`, ...overrides],
  });
  return fitOnCalculatorRows(cfg, o, toolSpecFromConfig(cfg, dirname(configFile)));
}

/**
 * A script's command line, `[CONFIG.yaml] [key.path=value ...]` (the file a path from the current
 * directory): trains with `train` and prints the training summary as JSON.
 */
export function exampleTrainCommand(
  summary: string,
  usage: string,
  train: (o: ExampleTrainOptions) => Promise<TrainingSummary>,
): CliCommand {
  return defineCommand({
    summary,
    usage,
    flags: {},
    positionals: true,
    async run(_flags, positionals) {
      const file = positionals[0] && !positionals[0].includes("=") ? positionals.shift() : undefined;
      if (file !== undefined && !existsSync(file))
        throw new UsageError(`config file not found: ${file} (resolved to ${resolve(file)})`);
      const result = await train({ ...(file ? { configFile: resolve(file) } : {}), overrides: positionals });
      console.log(JSON.stringify(result));
    },
  });
}

export const trainCalculatorCommand: CliCommand = exampleTrainCommand(
  "train with the calculator tool on the stock trainer",
  [
    "usage: pnpm tsx examples/new-tool/src/train.ts [CONFIG.yaml] [key.path=value ...]",
    "",
    "Trains with the calculator tool (RayPPOTrainer, the stock TIR rollout). CONFIG.yaml (a path from the",
    "current directory) defaults to examples/new-tool/configs/calculator.yaml; the overrides use veRL's",
    "keys, e.g. trainer.total_training_steps=20 actor_rollout_ref.model.path=DIR (default: the tiny ToRL base).",
    "Prints the training summary as JSON.",
  ].join("\n"),
  trainWithCalculator,
);

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  runScript(trainCalculatorCommand, "pnpm tsx examples/new-tool/src/train.ts");
