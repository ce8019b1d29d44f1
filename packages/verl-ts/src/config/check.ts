import { listAdvantageEstimators } from "../algorithms/advantage.js";
import { listPromptTemplates } from "../data/templates.js";
import { type ConfigIssue, editDistance, TrainerConfigError } from "./schema.js";
import type { TrainerConfig } from "./types.js";

function closest(name: string, known: string[]): string {
  let best = "";
  let score = Infinity;
  for (const k of known) {
    const d = k.startsWith(name) || name.startsWith(k) ? 1 : editDistance(name, k);
    if (d < score) {
      score = d;
      best = k;
    }
  }
  return score <= Math.max(2, Math.floor(name.length / 3)) ? ` (did you mean "${best}"?)` : "";
}

/**
 * Checks that go beyond key names and types, so a bad config stops before any work starts: names
 * that must be registered (advantage estimator, prompt template), ranges, and combinations.
 * `worldSize` (GPUs / worker processes) enables the batch-divisibility checks.
 */
export function checkTrainerConfig(cfg: TrainerConfig, opts: { worldSize?: number } = {}): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  const est = listAdvantageEstimators();
  const adv = cfg.algorithm.adv_estimator;
  if (!est.includes(adv))
    add(
      "algorithm.adv_estimator",
      `"${adv}" is not a registered estimator (known: ${est.join(", ")})${closest(adv, est)}`,
    );
  const tpl = listPromptTemplates();
  const t = cfg.data.template_type;
  if (!tpl.includes(t))
    add(
      "data.template_type",
      `"${t}" is not a registered template (known: ${tpl.join(", ")})${closest(t, tpl)}`,
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
  for (const [k, v] of positive) if (!(v > 0)) add(k, `must be > 0, got ${v}`);
  const a = cfg.actor_rollout_ref.actor;
  if (!(a.clip_ratio_c > 1))
    add("actor_rollout_ref.actor.clip_ratio_c", `must be > 1 (dual clip bound), got ${a.clip_ratio_c}`);
  for (const k of ["clip_ratio", "clip_ratio_low", "clip_ratio_high"] as const) {
    if (!(a[k] >= 0)) add(`actor_rollout_ref.actor.${k}`, `must be >= 0, got ${a[k]}`);
  }
  if (!(a.optim.lr >= 0)) add("actor_rollout_ref.actor.optim.lr", `must be >= 0, got ${a.optim.lr}`);
  const ro = cfg.actor_rollout_ref.rollout;
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
  if ((adv === "grpo" || adv === "rloo") && ro.n < 2) {
    add(
      "actor_rollout_ref.rollout.n",
      `is ${ro.n}: ${adv} compares responses to the same prompt and needs n >= 2`,
    );
  }
  if (cfg.trainer.test_freq === 0) add("trainer.test_freq", "must be > 0 or -1 (never)");
  if (cfg.trainer.save_freq === 0) add("trainer.save_freq", "must be > 0 or -1 (never)");
  if (cfg.trainer.resume_mode === "resume_path" && !cfg.trainer.resume_from_path) {
    add("trainer.resume_from_path", 'must be set when trainer.resume_mode is "resume_path"');
  }
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

/** checkTrainerConfig, throwing TrainerConfigError listing every problem. */
export function assertTrainerConfig(cfg: TrainerConfig, opts: { worldSize?: number } = {}): void {
  const issues = checkTrainerConfig(cfg, opts);
  if (issues.length) throw new TrainerConfigError(issues);
}
