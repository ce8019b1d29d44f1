import { advantageEstimatorRequirements, listAdvantageEstimators } from "../algorithms/advantage.js";
import { listPromptTemplates } from "../data/templates.js";
import { loraKeyIssues } from "../models/lora.js";
import { trainerConfigSchema } from "./load.js";
import {
  type ConfigIssue,
  type ConfigNode,
  type ConfigSchema,
  didYouMean,
  getPath,
  TrainerConfigError,
} from "./schema.js";
import type { TrainerConfig } from "./types.js";

const INTERP = /\$\{([A-Za-z0-9_.-]+)\}/g;
const INTERP_FULL = /^\$\{([A-Za-z0-9_.-]+)\}$/;

/** A default as it reads in `cfg`: "${a.b}" takes a.b's value there (the same rule as the loader's). */
function defaultIn(cfg: ConfigNode, value: unknown): unknown {
  if (typeof value !== "string" || !value.includes("${")) return value;
  const full = INTERP_FULL.exec(value);
  if (full) return getPath(cfg, full[1]!);
  return value.replace(INTERP, (_, ref: string) => String(getPath(cfg, ref)));
}

function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * Keys the schema marks unsupported ("unsupported:" in its YAML) must keep their default: each one set
 * to anything else is an issue naming the key, the value, that it is not supported here and what to do
 * instead. A default that refers to another key ("${a.b}") is compared with that key's value.
 */
export function checkUnsupportedKeys(cfg: TrainerConfig | ConfigNode, schema: ConfigSchema): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const node = cfg as ConfigNode;
  for (const key of schema.keys()) {
    const spec = schema.get(key)!;
    if (!spec.unsupported) continue;
    const value = getPath(node, key);
    if (value === undefined) continue;
    const expected = defaultIn(node, spec.default);
    if (sameValue(value, expected) || sameValue(value, spec.default)) continue;
    issues.push({
      key,
      message:
        `${key}=${JSON.stringify(value)} is not supported here (only its default ${JSON.stringify(expected)} is): ` +
        spec.unsupported,
    });
  }
  return issues;
}

/** The destinations trainer.logger may name. */
export const LOGGER_NAMES = ["console", "file", "tensorboard", "wandb", "mlflow"] as const;
export type LoggerName = (typeof LOGGER_NAMES)[number];

/** Unknown names in trainer.logger, each with a did-you-mean hint. */
export function checkLoggerNames(names: readonly string[]): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  for (const name of names) {
    if ((LOGGER_NAMES as readonly string[]).includes(name)) continue;
    const hint = didYouMean(name, LOGGER_NAMES);
    issues.push({
      key: "trainer.logger",
      message: `trainer.logger "${name}" is not a logger (known: ${LOGGER_NAMES.join(", ")})${hint}`,
    });
  }
  return issues;
}

export interface CheckTrainerConfigOptions {
  /** Workers (GPUs / worker processes): enables the batch-divisibility checks. */
  worldSize?: number;
  /** The schema whose unsupported keys are refused; the built-in trainer schema when omitted. */
  schema?: ConfigSchema;
}

/**
 * Checks that go beyond key names and types, so a bad config stops before any work starts: keys this
 * implementation does not support set away from their defaults, names that must be registered
 * (advantage estimator, prompt template), ranges, and combinations. Returns every problem, each once.
 */
export function checkTrainerConfig(cfg: TrainerConfig, opts: CheckTrainerConfigOptions = {}): ConfigIssue[] {
  const issues: ConfigIssue[] = checkUnsupportedKeys(cfg, opts.schema ?? trainerConfigSchema());
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  issues.push(...checkLoggerNames(cfg.trainer.logger));
  const est = listAdvantageEstimators();
  const adv = cfg.algorithm.adv_estimator;
  if (!est.includes(adv))
    add(
      "algorithm.adv_estimator",
      `"${adv}" is not a registered estimator (known: ${est.join(", ")})${didYouMean(adv, est)}`,
    );
  const tpl = listPromptTemplates();
  const template = cfg.data.template_type;
  if (!tpl.includes(template))
    add(
      "data.template_type",
      `"${template}" is not a registered template (known: ${tpl.join(", ")})${didYouMean(template, tpl)}`,
    );
  const positive: [string, number][] = [
    ["data.train_batch_size", cfg.data.train_batch_size],
    ["data.max_prompt_length", cfg.data.max_prompt_length],
    ["data.max_response_length", cfg.data.max_response_length],
    ["actor_rollout_ref.rollout.n", cfg.actor_rollout_ref.rollout.n],
    ["actor_rollout_ref.actor.ppo_mini_batch_size", cfg.actor_rollout_ref.actor.ppo_mini_batch_size],
    ["actor_rollout_ref.actor.ppo_epochs", cfg.actor_rollout_ref.actor.ppo_epochs],
    ["trainer.n_gpus_per_node", cfg.trainer.n_gpus_per_node],
    ["trainer.nnodes", cfg.trainer.nnodes],
  ];
  const ro = cfg.actor_rollout_ref.rollout;
  const a = cfg.actor_rollout_ref.actor;
  const t = cfg.trainer;
  const nullablePositive: [string, number | null | undefined][] = [
    ["trainer.total_training_steps", t.total_training_steps],
    ["data.val_batch_size", cfg.data.val_batch_size],
    ["actor_rollout_ref.actor.ppo_micro_batch_size", a.ppo_micro_batch_size],
    ["actor_rollout_ref.rollout.log_prob_micro_batch_size", ro.log_prob_micro_batch_size as number | null],
    ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", ro.log_prob_micro_batch_size_per_gpu],
    ["actor_rollout_ref.ref.log_prob_micro_batch_size", cfg.actor_rollout_ref.ref.log_prob_micro_batch_size],
    [
      "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
      cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
    ],
    ["trainer.max_actor_ckpt_to_keep", t.max_actor_ckpt_to_keep as number | null],
  ];
  positive.push(
    ["trainer.total_epochs", t.total_epochs],
    ["actor_rollout_ref.rollout.val_kwargs.n", ro.val_kwargs.n],
    ["actor_rollout_ref.rollout.max_num_seqs", ro.max_num_seqs as number],
    ["actor_rollout_ref.rollout.tool.sandbox_workers", ro.tool.sandbox_workers],
    ["actor_rollout_ref.rollout.tool.run_timeout", ro.tool.run_timeout],
    ["actor_rollout_ref.rollout.tool.memory_limit_mb", ro.tool.memory_limit_mb],
    ["actor_rollout_ref.rollout.tool.max_concurrency", ro.tool.max_concurrency],
    ["actor_rollout_ref.rollout.tool.max_observation_chars", ro.tool.max_observation_chars],
    ["actor_rollout_ref.rollout.tool.call_timeout", ro.tool.call_timeout],
    ["reward_model.score_timeout", cfg.reward_model.score_timeout],
    ["actor_rollout_ref.actor.grad_clip", a.grad_clip],
    ["trainer.ray_wait_register_center_timeout", t.ray_wait_register_center_timeout],
  );
  for (const [k, v] of positive) if (!(v > 0)) add(k, `must be > 0, got ${v}`);
  for (const [k, v] of nullablePositive)
    if (v !== null && v !== undefined && !(v > 0)) add(k, `must be > 0 or null, got ${v}`);
  const nonNegative: [string, number][] = [
    ["trainer.log_val_generations", t.log_val_generations as number],
    ["trainer.critic_warmup", t.critic_warmup],
    ["actor_rollout_ref.actor.optim.weight_decay", a.optim.weight_decay],
    ["critic.optim.weight_decay", cfg.critic.optim.weight_decay],
    ["critic.optim.lr", cfg.critic.optim.lr],
    ["actor_rollout_ref.rollout.tool.sandbox_actors", ro.tool.sandbox_actors],
  ];
  for (const [k, v] of nonNegative) if (!(v >= 0)) add(k, `must be >= 0, got ${v}`);
  // probabilities and fractions
  const unit: [string, number | null][] = [
    ["actor_rollout_ref.rollout.val_kwargs.top_p", ro.val_kwargs.top_p],
    ["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", a.optim.lr_warmup_steps_ratio],
    ["actor_rollout_ref.actor.optim.min_lr_ratio", a.optim.min_lr_ratio],
    ["critic.optim.lr_warmup_steps_ratio", cfg.critic.optim.lr_warmup_steps_ratio],
    ["critic.optim.min_lr_ratio", cfg.critic.optim.min_lr_ratio],
    ["algorithm.gamma", cfg.algorithm.gamma],
    ["algorithm.lam", cfg.algorithm.lam],
  ];
  for (const [k, v] of unit) if (v !== null && !(v >= 0 && v <= 1)) add(k, `must be in [0, 1], got ${v}`);
  for (const [section, betas] of [
    ["actor_rollout_ref.actor.optim", a.optim.betas],
    ["critic.optim", cfg.critic.optim.betas],
  ] as const) {
    const b = betas as unknown as number[];
    if (b.length !== 2 || !b.every((x) => x >= 0 && x < 1))
      add(`${section}.betas`, `must be two numbers in [0, 1), got ${JSON.stringify(b)}`);
  }
  if (!(a.clip_ratio_c > 1))
    add("actor_rollout_ref.actor.clip_ratio_c", `must be > 1 (dual clip bound), got ${a.clip_ratio_c}`);
  for (const k of ["clip_ratio", "clip_ratio_low", "clip_ratio_high"] as const) {
    if (!(a[k] >= 0)) add(`actor_rollout_ref.actor.${k}`, `must be >= 0, got ${a[k]}`);
  }
  if (!(a.optim.lr >= 0)) add("actor_rollout_ref.actor.optim.lr", `must be >= 0, got ${a.optim.lr}`);
  if (!(ro.num_llm_calls_available >= 0)) {
    add(
      "actor_rollout_ref.rollout.num_llm_calls_available",
      `must be >= 0, got ${ro.num_llm_calls_available}`,
    );
  }
  if (!(ro.top_p > 0 && ro.top_p <= 1))
    add("actor_rollout_ref.rollout.top_p", `must be in (0, 1], got ${ro.top_p}`);
  if (!(ro.temperature >= 0))
    add("actor_rollout_ref.rollout.temperature", `must be >= 0, got ${ro.temperature}`);
  const minGroup = advantageEstimatorRequirements(adv)?.minGroupSize ?? 1;
  if (ro.n < minGroup) {
    add(
      "actor_rollout_ref.rollout.n",
      `is ${ro.n}: ${adv} compares responses to the same prompt and needs n >= ${minGroup}`,
    );
  }
  if (!(t.test_freq > 0 || t.test_freq === -1))
    add("trainer.test_freq", `must be > 0 or -1 (never), got ${t.test_freq}`);
  if (!(t.save_freq > 0 || t.save_freq === -1))
    add("trainer.save_freq", `must be > 0 or -1 (never), got ${t.save_freq}`);
  if (cfg.trainer.resume_mode === "resume_path" && !cfg.trainer.resume_from_path) {
    add("trainer.resume_from_path", 'must be set when trainer.resume_mode is "resume_path"');
  }
  issues.push(...checkTrainingMode(cfg));
  const model = cfg.actor_rollout_ref.model;
  issues.push(...loraKeyIssues(model));
  const criticModel = cfg.critic.model;
  issues.push(...loraKeyIssues(criticModel, "critic.model"));
  // an estimator not registered yet (external_lib) is checked when the workers have imported it
  const estimator = advantageEstimatorRequirements(adv);
  if (criticModel.lora_rank > 0 && estimator && !estimator.critic)
    add(
      "critic.model.lora_rank",
      `is ${criticModel.lora_rank} but algorithm.adv_estimator ${adv} trains no critic; remove the key, or use an estimator with a critic (gae)`,
    );
  if (model.lora_rank > 0 && cfg.actor_rollout_ref.ref.fsdp_config.param_offload)
    add(
      "actor_rollout_ref.ref.fsdp_config.param_offload",
      "is true but with lora_rank > 0 the reference is the actor's base with the adapters off (no weights of its own to offload); remove the key",
    );
  if (model.compute_dtype === "bfloat16" && model.dtype !== "bfloat16")
    add(
      "actor_rollout_ref.model.compute_dtype",
      `is bfloat16 but model.dtype is ${model.dtype}: bfloat16 activations go with bfloat16 weights (set model.dtype=bfloat16, or remove the key)`,
    );
  if (model.lora_rank > 0 && !cfg.actor_rollout_ref.ref.fsdp_config.reshard_after_forward)
    add(
      "actor_rollout_ref.ref.fsdp_config.reshard_after_forward",
      "is false but with lora_rank > 0 the reference is the actor's base with the adapters off (no weights of its own to keep gathered); remove the key",
    );
  if (opts.worldSize) {
    const rows = cfg.data.train_batch_size * ro.n;
    if (rows % opts.worldSize !== 0) {
      add(
        "data.train_batch_size",
        `x rollout.n = ${rows} rows must divide evenly over ${opts.worldSize} workers`,
      );
    }
  }
  return issues;
}

/**
 * trainer.mode and the keys that act only in some modes: the async_training section and the rollout IS
 * correction need separate rollout workers; the separate-rollout modes train critic-free estimators
 * without dynamic sampling or a greedy baseline.
 */
export function checkTrainingMode(cfg: TrainerConfig): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  const mode = cfg.trainer.mode;
  const alg = cfg.algorithm;
  const at = cfg.async_training;
  const defaults = trainerConfigSchema();
  if (mode !== "fully_async")
    for (const k of [
      "staleness_threshold",
      "trigger_parameter_sync_step",
      "require_batches",
      "partial_rollout",
    ] as const)
      if (at[k] !== defaults.get(`async_training.${k}`)!.default)
        add(`async_training.${k}`, `acts only with trainer.mode=fully_async (trainer.mode is ${mode})`);
  if (!(at.staleness_threshold >= 0))
    add("async_training.staleness_threshold", `must be >= 0, got ${at.staleness_threshold}`);
  if (!(Number.isInteger(at.trigger_parameter_sync_step) && at.trigger_parameter_sync_step >= 1))
    add(
      "async_training.trigger_parameter_sync_step",
      `must be an integer >= 1, got ${at.trigger_parameter_sync_step}`,
    );
  const rb = at.require_batches;
  if (!(Number.isInteger(rb) && rb >= 1))
    add("async_training.require_batches", `must be an integer >= 1, got ${rb}`);
  else if (mode === "fully_async") {
    const step = rb * cfg.actor_rollout_ref.actor.ppo_mini_batch_size;
    if (cfg.data.train_batch_size % step !== 0)
      add(
        "async_training.require_batches",
        `x actor.ppo_mini_batch_size = ${step} prompts per training step must divide data.train_batch_size ${cfg.data.train_batch_size} (the prompts drawn at a time)`,
      );
  }
  if (at.partial_rollout && mode === "fully_async" && cfg.actor_rollout_ref.rollout.multi_turn.enable)
    add(
      "async_training.partial_rollout",
      "is not supported with actor_rollout_ref.rollout.multi_turn.enable (the agent loop cannot continue a response under new weights; the TIR rollout can)",
    );
  for (const k of ["nnodes", "n_gpus_per_node"] as const)
    if (!(Number.isInteger(cfg.rollout[k]) && cfg.rollout[k] >= 1))
      add(`rollout.${k}`, `must be an integer >= 1, got ${cfg.rollout[k]}`);
  const th = alg.rollout_is_threshold;
  if (th !== null) {
    if (mode === "sync")
      add(
        "algorithm.rollout_is_threshold",
        "needs trainer.mode one_step_off or fully_async: in sync mode the actor generates with the weights it trains, so every ratio is 1",
      );
    if (!(th > 0)) add("algorithm.rollout_is_threshold", `must be > 0 or null, got ${th}`);
    const lo = alg.rollout_is_threshold_lower;
    if (lo !== null && !(lo > 0 && lo <= th))
      add("algorithm.rollout_is_threshold_lower", `must be in (0, rollout_is_threshold], got ${lo}`);
  } else if (alg.rollout_is) add("algorithm.rollout_is", "needs algorithm.rollout_is_threshold set");
  const veto = alg.rollout_is_veto_threshold;
  if (veto !== null && !(veto > 0 && veto < 1))
    add("algorithm.rollout_is_veto_threshold", `must be in (0, 1) or null, got ${veto}`);
  if (mode !== "sync") {
    const why = `is not supported with trainer.mode=${mode} (its rollout workers generate one batch per step)`;
    if (advantageEstimatorRequirements(alg.adv_estimator)?.critic)
      add("algorithm.adv_estimator", `${alg.adv_estimator} needs a critic, which ${why}`);
    if (advantageEstimatorRequirements(alg.adv_estimator)?.greedyBaseline)
      add("algorithm.adv_estimator", `${alg.adv_estimator} needs a greedy baseline, which ${why}`);
    if (alg.filter_groups.enable) add("algorithm.filter_groups.enable", why);
    if (cfg.actor_rollout_ref.model.lora_rank > 0)
      add(
        "actor_rollout_ref.model.lora_rank",
        `is not supported with trainer.mode=${mode}: its rollout workers take the actor's whole weights after each update, and LoRA trains adapters only; use trainer.mode=sync`,
      );
  }
  return issues;
}

/** checkTrainerConfig, throwing TrainerConfigError listing every problem. */
export function assertTrainerConfig(cfg: TrainerConfig, opts: CheckTrainerConfigOptions = {}): void {
  const issues = checkTrainerConfig(cfg, opts);
  if (issues.length) throw new TrainerConfigError(issues);
}
