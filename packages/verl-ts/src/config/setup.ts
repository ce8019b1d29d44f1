/**
 * The checks a trainer run needs beyond the config's own (checkTrainerConfig): files that must exist,
 * the policy loss's registration, the batch sizes against the workers, the multi-turn settings, and
 * what the advantage estimator and the policy loss need of the run (asked of their registries).
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { advantageEstimatorRequirements } from "../algorithms/advantage.js";
import { listPolicyLosses, policyLossRequirements } from "../algorithms/policy-loss-registry.js";
import { type AlgorithmRequirements, mergeRequirements } from "../algorithms/requirements.js";
import { customRewardModuleExists } from "../reward/custom-function.js";
import { checkOverlongBuffer, OverlongBufferError } from "../reward/overlong.js";
import { checkTrainerConfig } from "./check.js";
import { miniBatchRows, trainerWorldSize } from "./derived.js";
import type { ConfigIssue } from "./schema.js";
import type { TrainerConfig } from "./types.js";

/** What a trainer is given besides its config, as far as the checks look at it. */
export interface TrainerSetupOptions {
  /** The text-trigger rollout tool (the workers' ToolSpec): it must name its module. */
  tool?: { module?: string; exportName?: string; args?: unknown[] } | null;
  /** Training rows given directly: data.train_files is then not read (nor checked). */
  trainRows?: readonly unknown[];
  /** Validation rows given directly: data.val_files is then not read (nor checked). */
  valRows?: readonly unknown[];
}

/**
 * What the run's advantage estimator and policy loss need together (the largest group size, a critic,
 * a greedy baseline), as their registries declare; a name not registered (yet) adds nothing.
 */
export function runRequirements(cfg: TrainerConfig): Required<AlgorithmRequirements> {
  return mergeRequirements(
    advantageEstimatorRequirements(cfg.algorithm.adv_estimator) ?? {},
    policyLossRequirements(cfg.actor_rollout_ref.actor.policy_loss.loss_mode) ?? {},
  );
}

/**
 * The policy loss's own needs checked against the config (the estimator's are checkTrainerConfig's).
 * A loss that a module in actor_rollout_ref.model.external_lib registers is checked once that module
 * is imported.
 */
export function checkPolicyLossRequirements(cfg: TrainerConfig): ConfigIssue[] {
  const mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode;
  const n = cfg.actor_rollout_ref.rollout.n;
  const min = policyLossRequirements(mode)?.minGroupSize ?? 1;
  if (n >= min) return [];
  const key = "actor_rollout_ref.rollout.n";
  return [
    {
      key,
      message: `${key} is ${n}: the policy loss "${mode}" compares responses to the same prompt and needs n >= ${min}`,
    },
  ];
}

const MULTI_TURN = "actor_rollout_ref.rollout.multi_turn";

/** Problems of the multi-turn settings, each naming its key (empty when the mode is off). */
export function checkMultiTurnConfig(cfg: TrainerConfig): ConfigIssue[] {
  const mt = cfg.actor_rollout_ref.rollout.multi_turn;
  const issues: ConfigIssue[] = [];
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  if (!mt?.enable) return issues;
  if (cfg.data.template_type !== "model")
    add(
      "data.template_type",
      `is "${cfg.data.template_type}": the multi-turn agent loop renders prompts with the model's chat template and the tools' schemas; set data.template_type=model`,
    );
  if (mt.tool_config_path !== null && !existsSync(mt.tool_config_path))
    add(`${MULTI_TURN}.tool_config_path`, `names ${mt.tool_config_path}, which does not exist`);
  if (
    mt.max_assistant_turns !== null &&
    !(Number.isInteger(mt.max_assistant_turns) && mt.max_assistant_turns >= 1)
  )
    add(
      `${MULTI_TURN}.max_assistant_turns`,
      `must be an integer >= 1 or null, got ${mt.max_assistant_turns}`,
    );
  if (!(Number.isInteger(mt.max_parallel_calls) && mt.max_parallel_calls >= 1))
    add(`${MULTI_TURN}.max_parallel_calls`, `must be an integer >= 1, got ${mt.max_parallel_calls}`);
  if (!(Number.isInteger(mt.max_tool_response_length) && mt.max_tool_response_length >= 1))
    add(
      `${MULTI_TURN}.max_tool_response_length`,
      `must be an integer >= 1, got ${mt.max_tool_response_length}`,
    );
  return issues;
}

/**
 * Every check of a trainer run (checkTrainerConfig with the workers' count, then ranges, names,
 * divisibility and files), so a bad setup stops before any worker starts. Returns every problem found.
 */
export function checkTrainerSetup(cfg: TrainerConfig, opts: TrainerSetupOptions = {}): ConfigIssue[] {
  const W = trainerWorldSize(cfg);
  const issues: ConfigIssue[] = checkTrainerConfig(cfg, { worldSize: W });
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  // a token budget of a dynamic micro-batch (use_dynamic_bsz); a row longer than it still runs alone
  const budget = (key: string, v: number | undefined) => {
    if (!(Number.isInteger(v) && v! > 0))
      add(key, `must be a positive number of tokens with use_dynamic_bsz, got ${v}`);
  };
  const a = cfg.actor_rollout_ref.actor;
  // the mini-batches of an update (actor, critic) must split the batch and the workers evenly
  const batchSizes = (section: string, role: "actor" | "critic", micro: number | null) => {
    const mini = (role === "actor" ? a : cfg.critic).ppo_mini_batch_size;
    const rows = miniBatchRows(cfg, role);
    if (mini > 0 && cfg.data.train_batch_size % mini !== 0)
      add(
        `${section}.ppo_mini_batch_size`,
        `(${mini}) must divide data.train_batch_size (${cfg.data.train_batch_size})`,
      );
    if (W > 0 && rows % W !== 0)
      add(`${section}.ppo_mini_batch_size`, `x rollout.n = ${rows} rows must split evenly over ${W} workers`);
    if (micro !== null && !(micro > 0))
      add(`${section}.ppo_micro_batch_size_per_gpu`, `must be > 0, got ${micro}`);
  };
  const path = cfg.actor_rollout_ref.model.path;
  if (!path) add("actor_rollout_ref.model.path", "must name an HF model directory");
  else if (!existsSync(join(path, "config.json")))
    add("actor_rollout_ref.model.path", `${path} holds no config.json`);
  const ob = cfg.reward_model.overlong_buffer;
  if (ob.enable) {
    try {
      checkOverlongBuffer({
        len: ob.len,
        penaltyFactor: ob.penalty_factor,
        maxResponseLength: cfg.data.max_response_length,
      });
    } catch (e) {
      if (!(e instanceof OverlongBufferError)) throw e;
      issues.push({ key: "reward_model.overlong_buffer", message: e.message });
    }
  }
  const fg = cfg.algorithm.filter_groups;
  if (!(Number.isInteger(fg.max_num_gen_batches) && fg.max_num_gen_batches >= 0))
    add(
      "algorithm.filter_groups.max_num_gen_batches",
      `must be an integer >= 0, got ${fg.max_num_gen_batches}`,
    );
  const lossMode = a.policy_loss.loss_mode;
  // a loss from external_lib is registered when the workers import it (they check the name then)
  if (!cfg.actor_rollout_ref.model.external_lib && !listPolicyLosses().includes(lossMode))
    add(
      "actor_rollout_ref.actor.policy_loss.loss_mode",
      `"${lossMode}" is not a registered policy loss (have: ${listPolicyLosses().join(", ")}); register your own in a module named by actor_rollout_ref.model.external_lib`,
    );
  issues.push(...checkPolicyLossRequirements(cfg));
  if (runRequirements(cfg).critic) {
    const c = cfg.critic;
    if (c.model.path && !existsSync(join(c.model.path, "config.json")))
      add("critic.model.path", `${c.model.path} holds no config.json`);
    batchSizes("critic", "critic", c.ppo_micro_batch_size_per_gpu);
    if (c.use_dynamic_bsz) {
      budget("critic.ppo_max_token_len_per_gpu", c.ppo_max_token_len_per_gpu);
      budget("critic.forward_max_token_len_per_gpu", c.forward_max_token_len_per_gpu);
    }
  }
  if (a.use_dynamic_bsz)
    budget("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", a.ppo_max_token_len_per_gpu);
  for (const role of ["ref", "rollout"] as const) {
    const section = cfg.actor_rollout_ref[role];
    if (section.log_prob_use_dynamic_bsz)
      budget(
        `actor_rollout_ref.${role}.log_prob_max_token_len_per_gpu`,
        section.log_prob_max_token_len_per_gpu,
      );
  }
  batchSizes("actor_rollout_ref.actor", "actor", a.ppo_micro_batch_size_per_gpu);
  if (!opts.trainRows) {
    const files = [cfg.data.train_files].flat();
    for (const f of files) if (!existsSync(f)) add("data.train_files", `names ${f}, which does not exist`);
  }
  if (!opts.valRows && cfg.data.val_files) {
    for (const f of [cfg.data.val_files].flat())
      if (!existsSync(f)) add("data.val_files", `names ${f}, which does not exist`);
  }
  if (cfg.trainer.resume_mode === "resume_path" && cfg.trainer.resume_from_path) {
    if (!existsSync(join(cfg.trainer.resume_from_path, "trainer_state.json")))
      add("trainer.resume_from_path", `${cfg.trainer.resume_from_path} is not a complete checkpoint`);
  }
  if (opts.tool && !opts.tool.module) add("tool", "spec needs a module URL");
  const calls = cfg.actor_rollout_ref.rollout.num_llm_calls_available;
  if (opts.tool === null && calls > 0 && !cfg.actor_rollout_ref.rollout.multi_turn?.enable)
    add(
      "tool",
      `is null while actor_rollout_ref.rollout.num_llm_calls_available is ${calls}: ` +
        "leave tool out for the Python code interpreter, or set num_llm_calls_available=0 for no tool",
    );
  // a tool given for a run that calls none would be dropped without a word (the no-tool control
  // leaves the tool out)
  if (opts.tool && calls === 0 && !cfg.actor_rollout_ref.rollout.multi_turn?.enable)
    add(
      "tool",
      "is given while actor_rollout_ref.rollout.num_llm_calls_available is 0, so it would never run: " +
        "leave the tool out for the no-tool control, or allow calls (num_llm_calls_available > 0)",
    );
  const custom = cfg.custom_reward_function;
  if (custom.path && !customRewardModuleExists(custom.path))
    add("custom_reward_function.path", `names ${custom.path}, which does not exist`);
  issues.push(...checkMultiTurnConfig(cfg));
  const multiTurn = cfg.actor_rollout_ref.rollout.multi_turn?.enable;
  if (opts.tool && multiTurn)
    add(
      "tool",
      "is the text-trigger tool; with multi_turn.enable the tools come from multi_turn.tool_config_path",
    );
  if (cfg.actor_rollout_ref.rollout.ignore_eos && multiTurn)
    add(
      "actor_rollout_ref.rollout.ignore_eos",
      "is not supported with multi_turn.enable: each assistant turn ends at its end-of-turn token",
    );
  return issues;
}
