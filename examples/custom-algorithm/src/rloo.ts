/**
 * RLOO (REINFORCE Leave-One-Out, Ahmadian et al. 2024) written against the actor API and DataProto
 * alone: no trainer, no worker group, no config system. Read it top to bottom.
 *
 *   pnpm tsx examples/custom-algorithm/src/rloo.ts [--steps 20] [--replicas 2] [--reward exact_match] ...
 *   pnpm tsx examples/custom-algorithm/src/rloo.ts --task tiny --tool python --reward verifier   # ToRL-style
 *
 * For each step:
 *   1. every policy replica (an actor) samples k responses for its share of the prompts, calling the
 *      Python tool when `tool` is python (the TIR rollout; tool output is masked out of the loss);
 *   2. the driver scores each response with the reward function (e.g. the project's verifier);
 *   3. the driver computes RLOO advantages: A_ij = r_ij - mean_{l != j} r_il over the k samples of prompt i;
 *   4. every replica takes a REINFORCE step on its rows; gradients are averaged by a collective
 *      all-reduce, so the replicas stay identical;
 *   5. metrics are printed and appended to <runDir>/metrics.jsonl.
 */
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createCollectiveGroup, get, init, isInitialized, shutdown } from "@torl-ts/actors";
import { type CliCommand, type FlagSpec, InputError, parseFlags, runScript } from "@torl-ts/core";
import {
  type CodeInterpreterToolConfig,
  DataProto,
  executionInfoFromRollout,
  PolicyReplicaActor,
  type PolicyUpdateStats,
} from "@torl-ts/verl";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";
import {
  extractAnswer,
  makeQuestions,
  promptFor,
  type RewardName,
  rewardFn,
  TASKS,
  type TaskName,
} from "./task.js";

// ---------------------------------------------------------------------------------------------------
// Hyperparameters: every knob of the run, named in one place.
// ---------------------------------------------------------------------------------------------------

/** The tool the policy may call while it writes a response. */
export type ToolChoice = "none" | "python";

export interface Args {
  /** HF-format model directory (config.json, model.safetensors, tokenizer.json). */
  modelDir: string;
  /** Policy replicas, one actor process each; the prompts of a step are split evenly among them. */
  replicas: number;
  /** Optimisation steps. */
  steps: number;
  /** Prompts per step (a multiple of `replicas`). */
  promptsPerStep: number;
  /** k: responses sampled per prompt; RLOO needs k >= 2 for its leave-one-out baseline. */
  samplesPerPrompt: number;
  /** Most response tokens per sample, generated and tool-appended together. */
  maxNewTokens: number;
  temperature: number;
  learningRate: number;
  /** The reward function (REWARDS in task.ts). */
  reward: RewardName;
  /** Where the questions come from (task.ts). */
  task: TaskName;
  /** The tool the policy may call: none (plain generation) or python (ToRL's code interpreter in a sandbox). */
  tool: ToolChoice;
  /** Most tool calls per response (ToRL's C, num_llm_calls_available). */
  maxToolCalls: number;
  /** Prompt template (a data.template_type name): tir_base_0309 (ToRL's raw text) or chat. */
  template: string;
  seed: number;
  /** Tensor backend of the replicas (TORL_BACKEND): auto, wasm, cpu, node, node-gpu, webgpu. */
  backend: string;
  /** metrics.jsonl and summary.json go here. */
  runDir: string;
}

const TOOLS: readonly ToolChoice[] = ["none", "python"];
/** ToRL's Python tool (createCodeInterpreterTool's keys): two warm interpreters in each replica's process. */
const PYTHON_TOOL: CodeInterpreterToolConfig = { sandbox_actors: 0, sandbox_workers: 2, run_timeout: 10 };
/** The collective group of the replicas. */
const GROUP = "rloo";

const TINY_BASE = TINY_BASE_DIR;

export const DEFAULT_ARGS: Args = {
  modelDir: TINY_BASE,
  replicas: 2,
  steps: 20,
  promptsPerStep: 8,
  samplesPerPrompt: 4,
  maxNewTokens: 48,
  temperature: 1.0,
  learningRate: 1e-5,
  reward: "exact_match",
  task: "arithmetic",
  tool: "none",
  maxToolCalls: 1,
  template: "tir_base_0309",
  seed: 1,
  backend: "auto",
  runDir: "runs/rloo",
};

/** What `train` returns: the last step's metrics and the weights' fingerprints before and after. */
export interface Summary {
  steps: number;
  lastMetrics: Record<string, number>;
  fingerprintBefore: [number, number];
  /** One per replica: all equal when the all-reduce kept the replicas in sync. */
  fingerprintsAfter: [number, number][];
}

/** Thrown for arguments that cannot work together. */
export class ArgsError extends InputError {
  override name = "ArgsError";
}

// ---------------------------------------------------------------------------------------------------
// The algorithm.
// ---------------------------------------------------------------------------------------------------

/** RLOO advantages: each sample's reward minus the mean reward of the other samples of its prompt. */
export function rlooAdvantages(rewards: Float32Array, samplesPerPrompt: number): Float32Array {
  const k = samplesPerPrompt;
  const out = new Float32Array(rewards.length);
  for (let start = 0; start < rewards.length; start += k) {
    let total = 0;
    for (let j = 0; j < k; j++) total += rewards[start + j]!;
    for (let j = 0; j < k; j++)
      out[start + j] = rewards[start + j]! - (total - rewards[start + j]!) / (k - 1);
  }
  return out;
}

export async function train(
  overrides: Partial<Args> = {},
  log: (line: string) => void = console.log,
): Promise<Summary> {
  const args: Args = { ...DEFAULT_ARGS, ...overrides };
  if (args.samplesPerPrompt < 2)
    throw new ArgsError(`samplesPerPrompt must be >= 2 for RLOO, got ${args.samplesPerPrompt}`);
  if (args.promptsPerStep % args.replicas !== 0)
    throw new ArgsError(
      `promptsPerStep (${args.promptsPerStep}) must be a multiple of replicas (${args.replicas})`,
    );
  if (!TASKS.includes(args.task))
    throw new ArgsError(`task must be one of ${TASKS.join(", ")}, got ${args.task}`);
  if (!TOOLS.includes(args.tool))
    throw new ArgsError(`tool must be one of ${TOOLS.join(", ")}, got ${args.tool}`);
  if (!existsSync(join(args.modelDir, "config.json")))
    throw new ArgsError(
      `modelDir ${args.modelDir} holds no config.json (make one with createRandomPretrained)`,
    );
  const reward = rewardFn(args.reward);
  const questions = makeQuestions(args.steps * args.promptsPerStep, args.seed, args.task);
  mkdirSync(args.runDir, { recursive: true });
  const metricsFile = join(args.runDir, "metrics.jsonl");
  writeFileSync(metricsFile, "");

  // Setup: the runtime, one actor per replica, a collective group over them, identical weights.
  const startedRuntime = !isInitialized();
  if (startedRuntime) await init({ numCpus: args.replicas });
  const env: Record<string, string> = args.backend === "auto" ? {} : { TORL_BACKEND: args.backend };
  const replicas = Array.from({ length: args.replicas }, () =>
    PolicyReplicaActor.options({ env }).remote(args.modelDir, {
      learningRate: args.learningRate,
      tool: args.tool === "python" ? PYTHON_TOOL : null,
    }),
  );
  let group: Awaited<ReturnType<typeof createCollectiveGroup>> | undefined;
  try {
    const backends = await get(replicas.map((r) => r.setup()));
    group = await createCollectiveGroup(replicas, { name: GROUP });
    await get(replicas.map((r) => r.broadcastWeights(0, GROUP)));
    const fingerprintBefore = await replicas[0]!.weightsFingerprint();
    log(
      `rloo: ${args.replicas} replicas on ${backends.join(", ")}, ${args.steps} steps of ${args.promptsPerStep} prompts x ${args.samplesPerPrompt}`,
    );

    let lastMetrics: Record<string, number> = {};
    for (let step = 1; step <= args.steps; step++) {
      const t0 = performance.now();
      const batchQuestions = questions.slice((step - 1) * args.promptsPerStep, step * args.promptsPerStep);
      const perReplica = args.promptsPerStep / args.replicas;

      // 1. Rollout: each replica samples for its slice of the prompts.
      const sampling = {
        samplesPerPrompt: args.samplesPerPrompt,
        maxNewTokens: args.maxNewTokens,
        temperature: args.temperature,
        maxToolCalls: args.maxToolCalls,
      };
      const shards = await get(
        replicas.map((r, i) =>
          r.rollout(
            batchQuestions
              .slice(i * perReplica, (i + 1) * perReplica)
              .map((q) => promptFor(q.question, args.template)),
            { ...sampling, seed: args.seed * 100_003 + step * 101 + i },
          ),
        ),
      );
      const t1 = performance.now();

      // 2. Reward: rows are prompt-major (the k samples of a prompt are adjacent), shard after shard.
      const answers = batchQuestions.flatMap((q) =>
        Array.from({ length: args.samplesPerPrompt }, () => q.answer),
      );
      // Shards differ in width (each is padded to its own longest row): read them column by column.
      const rollout = shards.map((w) => DataProto.fromWire(w));
      const responses = rollout.flatMap((d) => d.column<string>("response_text"));
      const rowValues = (key: string) => rollout.flatMap((d) => Array.from(d.tensor(key).data, Number));
      const toolCalls = rowValues("num_tool_calls");
      const toolPasses = rowValues("num_tool_passes");
      const passes = rowValues("execution_passes");
      const rewards = Float32Array.from(responses, (text, i) =>
        reward(
          text,
          answers[i]!,
          executionInfoFromRollout({ executionPasses: passes[i]!, numToolCalls: toolCalls[i]! }),
        ),
      );

      // 3. Advantages on the driver.
      const advantages = rlooAdvantages(rewards, args.samplesPerPrompt);

      // 4. Update: each replica gets back its own rows, now with advantages; gradients are all-reduced.
      const rowsPerReplica = perReplica * args.samplesPerPrompt;
      const updates = shards.map((wire, i) => {
        const shard = DataProto.fromWire(wire);
        const adv = advantages.slice(i * rowsPerReplica, (i + 1) * rowsPerReplica);
        shard.union(DataProto.fromDict({ advantages: { data: adv, shape: [rowsPerReplica] } }));
        return replicas[i]!.update(
          shard.select(["input_ids", "attention_mask", "responses", "loss_mask", "advantages"]).toWire(),
          GROUP,
        );
      });
      const stats: PolicyUpdateStats[] = await get(updates);
      const t2 = performance.now();

      // 5. Metrics, grouped by kind as in CleanRL.
      const mean = (xs: ArrayLike<number>) => Array.from(xs).reduce((a, b) => a + b, 0) / xs.length;
      const allCalls = toolCalls.reduce((a, b) => a + b, 0);
      lastMetrics = {
        step,
        "charts/reward_mean": mean(rewards),
        "charts/reward_max": Math.max(...rewards),
        "charts/exact_match": mean(responses.map((text, i) => (extractAnswer(text) === answers[i] ? 1 : 0))),
        "tool/code_ratio": mean(Array.from(toolCalls, (c) => (c > 0 ? 1 : 0))),
        "tool/pass_ratio": allCalls === 0 ? 0 : toolPasses.reduce((a, b) => a + b, 0) / allCalls,
        "charts/response_tokens_mean": stats.reduce((a, s) => a + s.response_tokens, 0) / rewards.length,
        "losses/policy_loss": mean(stats.map((s) => s.policy_loss)),
        "losses/grad_norm": stats[0]!.grad_norm,
        "losses/advantage_abs_mean": mean(advantages.map(Math.abs)),
        "perf/rollout_s": (t1 - t0) / 1000,
        "perf/update_s": (t2 - t1) / 1000,
        "perf/step_s": (performance.now() - t0) / 1000,
      };
      appendFileSync(metricsFile, `${JSON.stringify(lastMetrics)}\n`);
      log(
        `step ${step}/${args.steps} reward ${lastMetrics["charts/reward_mean"]!.toFixed(3)} exact ${lastMetrics["charts/exact_match"]!.toFixed(3)} ` +
          `loss ${lastMetrics["losses/policy_loss"]!.toFixed(4)} ${lastMetrics["perf/step_s"]!.toFixed(1)}s`,
      );
    }

    const fingerprintsAfter = await get(replicas.map((r) => r.weightsFingerprint()));
    const summary: Summary = { steps: args.steps, lastMetrics, fingerprintBefore, fingerprintsAfter };
    writeFileSync(join(args.runDir, "summary.json"), `${JSON.stringify(summary, null, 2)}\n`);
    return summary;
  } finally {
    // Destroying the group also releases replicas blocked in a collective (e.g. after one of them died).
    await group?.destroy();
    await Promise.allSettled(replicas.map((r) => r.close()));
    if (startedRuntime) await shutdown();
  }
}

// ---------------------------------------------------------------------------------------------------
// Command line: --kebab-name value (or --kebab-name=value) for every key of Args.
// ---------------------------------------------------------------------------------------------------
const flagOf = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** Parses the flags into Args keys; throws UsageError naming a bad flag. */
export function parseArgs(argv: string[]): Partial<Args> {
  const spec: Record<string, FlagSpec> = {};
  for (const [key, value] of Object.entries(DEFAULT_ARGS))
    spec[flagOf(key)] = typeof value === "number" ? { type: "number" } : { type: "string" };
  const { flags } = parseFlags(argv, spec);
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(DEFAULT_ARGS))
    if (flags[flagOf(key)] !== undefined) out[key] = flags[flagOf(key)];
  return out as Partial<Args>;
}

export const rlooCommand: CliCommand = {
  summary: "train with RLOO on the actor API alone",
  usage: [
    "usage: pnpm tsx examples/custom-algorithm/src/rloo.ts [--flag value ...]",
    "",
    "Trains with RLOO (one policy actor per replica, gradients all-reduced) and prints the last metrics.",
    "flags (default):",
    ...Object.entries(DEFAULT_ARGS).map(([k, v]) => `  --${flagOf(k).padEnd(20)} ${String(v)}`),
  ].join("\n"),
  async run(args) {
    const summary = await train(parseArgs(args));
    console.log(JSON.stringify(summary.lastMetrics));
    return 0;
  },
};

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  runScript(rlooCommand, "pnpm tsx examples/custom-algorithm/src/rloo.ts");
