/**
 * Sizes the config implies, computed here once for the checker, the driver and the workers alike.
 */
import type { TrainerConfig } from "./types.js";

/** Worker processes over all nodes: trainer.nnodes x trainer.n_gpus_per_node. */
export function trainerWorldSize(cfg: TrainerConfig): number {
  return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node;
}

/** The separate rollout workers of trainer.mode one_step_off / fully_async (rollout.nnodes x rollout.n_gpus_per_node); 0 in sync mode. */
export function rolloutWorldSize(cfg: TrainerConfig): number {
  return cfg.trainer.mode === "sync" ? 0 : cfg.rollout.nnodes * cfg.rollout.n_gpus_per_node;
}

/**
 * Rows of one global mini-batch of an update: ppo_mini_batch_size prompts times their responses
 * (the actor's rollout.n; the critic's rollout_n, which follows it by default).
 */
export function miniBatchRows(cfg: TrainerConfig, role: "actor" | "critic"): number {
  if (role === "critic") return cfg.critic.ppo_mini_batch_size * cfg.critic.rollout_n;
  const ar = cfg.actor_rollout_ref;
  return ar.actor.ppo_mini_batch_size * ar.rollout.n;
}
