// TypeScript view of the trainer config (the keys of ppo-trainer.yaml most code reads). Every section
// also takes keys added by extensions (recipes), hence the index signatures.

import type { KlPenaltyType } from "../algorithms/kl.js";
import type { LossAggMode } from "../algorithms/loss-aggregation.js";

type Open = { [key: string]: unknown };

export interface OptimConfig extends Open {
  lr: number;
  lr_warmup_steps: number;
  lr_warmup_steps_ratio: number;
  min_lr_ratio: number | null;
  warmup_style: "constant" | "cosine";
  total_training_steps: number;
  weight_decay: number;
  betas: [number, number];
  eps: number;
}

export interface ActorConfig extends Open {
  strategy: string;
  ppo_mini_batch_size: number;
  ppo_micro_batch_size: number | null;
  ppo_micro_batch_size_per_gpu: number | null;
  use_dynamic_bsz: boolean;
  ppo_max_token_len_per_gpu: number;
  grad_clip: number;
  clip_ratio: number;
  clip_ratio_low: number;
  clip_ratio_high: number;
  clip_ratio_c: number;
  loss_agg_mode: LossAggMode;
  entropy_coeff: number;
  use_kl_loss: boolean;
  kl_loss_coef: number;
  kl_loss_type: KlPenaltyType;
  ppo_epochs: number;
  shuffle: boolean;
  mask_tool_output: boolean;
  policy_loss: PolicyLossConfig;
  optim: OptimConfig;
  fsdp_config: { reshard_after_forward: boolean } & Open;
}

export interface PolicyLossConfig extends Open {
  loss_mode: string;
  clip_cov_ratio: number;
  clip_cov_lb: number;
  clip_cov_ub: number;
  kl_cov_ratio: number;
  ppo_kl_coef: number;
}

/** The keys of a log-prob pass (rollout and ref): micro-batch rows, or a token budget per micro-batch. */
export interface LogProbConfig {
  log_prob_micro_batch_size: number | null;
  log_prob_micro_batch_size_per_gpu: number | null;
  log_prob_use_dynamic_bsz: boolean;
  log_prob_max_token_len_per_gpu: number;
}

/** `actor_rollout_ref.rollout.multi_turn`: veRL's multi-turn agent loop. */
export interface MultiTurnConfig {
  enable: boolean;
  max_assistant_turns: number | null;
  tool_config_path: string | null;
  max_parallel_calls: number;
  max_tool_response_length: number;
  tool_response_truncate_side: "left" | "middle" | "right";
  format: "hermes";
}

export interface RolloutConfig extends Open, LogProbConfig {
  name: string;
  temperature: number;
  top_k: number;
  top_p: number;
  prompt_length: number;
  response_length: number;
  do_sample: boolean;
  ignore_eos: boolean;
  free_cache_engine: boolean;
  n: number;
  seed: number;
  num_llm_calls_available: number;
  multi_turn: MultiTurnConfig;
  val_kwargs: { top_k: number; top_p: number; temperature: number; n: number; do_sample: boolean } & Open;
  tool: {
    name: string;
    stop: string;
    sandbox_url: string | null;
    sandbox_actors: number;
    sandbox_workers: number;
    run_timeout: number;
    memory_limit_mb: number;
    max_concurrency: number;
    max_observation_chars: number;
    config: Open;
    call_timeout: number;
  } & Open;
}

export interface CriticConfig extends Open {
  /** The number of responses per prompt (actor_rollout_ref.rollout.n). */
  rollout_n: number;
  optim: OptimConfig;
  model: {
    path: string | null;
    tokenizer_path: string | null;
    enable_gradient_checkpointing: boolean;
    lora_rank: number;
    lora_alpha: number;
    target_modules: string | string[];
  } & Open;
  ppo_mini_batch_size: number;
  ppo_micro_batch_size: number | null;
  ppo_micro_batch_size_per_gpu: number | null;
  forward_micro_batch_size: number | null;
  forward_micro_batch_size_per_gpu: number | null;
  use_dynamic_bsz: boolean;
  ppo_max_token_len_per_gpu: number;
  forward_max_token_len_per_gpu: number;
  ppo_epochs: number;
  grad_clip: number;
  cliprange_value: number;
  loss_agg_mode: ActorConfig["loss_agg_mode"];
}

export interface TrainerConfig extends Open {
  data: {
    tokenizer: string | null;
    train_files: string | string[];
    val_files: string | string[] | null;
    prompt_key: string;
    reward_fn_key: string;
    max_prompt_length: number;
    max_response_length: number;
    train_batch_size: number;
    val_batch_size: number | null;
    shuffle: boolean;
    seed: number;
    filter_overlong_prompts: boolean;
    filter_overlong_prompts_margin: number;
    truncation: "error" | "left" | "right";
    template_type: string;
    execution_error_penalty: boolean;
    execution_error_penalty_value: number;
  } & Open;
  actor_rollout_ref: {
    hybrid_engine: boolean;
    model: {
      path: string | null;
      external_lib: string | null;
      override_config: Open;
      enable_gradient_checkpointing: boolean;
      dtype: "float32" | "bfloat16" | "float16";
      compute_dtype: "float32" | "bfloat16";
      lora_rank: number;
      lora_alpha: number;
      target_modules: string | string[];
    } & Open;
    actor: ActorConfig;
    ref: LogProbConfig & {
      fsdp_config: { param_offload: boolean; reshard_after_forward: boolean } & Open;
    } & Open;
    rollout: RolloutConfig;
  } & Open;
  critic: CriticConfig;
  reward_model: {
    enable: boolean;
    reward_manager: string;
    score_timeout: number;
    reward_kwargs: Open;
    overlong_buffer: { enable: boolean; len: number; penalty_factor: number } & Open;
  } & Open;
  custom_reward_function: { path: string | null; name: string } & Open;
  algorithm: {
    gamma: number;
    lam: number;
    adv_estimator: string;
    norm_adv_by_std_in_grpo: boolean;
    use_kl_in_reward: boolean;
    kl_penalty: KlPenaltyType;
    kl_ctrl: { type: "fixed" | "adaptive"; kl_coef: number; horizon: number; target_kl: number } & Open;
    filter_groups: { enable: boolean; metric: "acc" | "score"; max_num_gen_batches: number } & Open;
    void_turn_filter: boolean;
    rollout_is_threshold: number | null;
    rollout_is: boolean;
    rollout_is_threshold_lower: number | null;
    rollout_is_level: "token" | "sequence" | "geometric";
    rollout_is_mode: "truncate" | "mask";
    rollout_is_veto_threshold: number | null;
  } & Open;
  trainer: {
    mode: TrainingMode;
    balance_batch: boolean;
    total_epochs: number;
    total_training_steps: number | null;
    project_name: string;
    experiment_name: string;
    nnodes: number;
    n_gpus_per_node: number;
    save_freq: number;
    resume_mode: "auto" | "disable" | "resume_path";
    resume_from_path: string | null;
    val_before_train: boolean;
    test_freq: number;
    critic_warmup: number;
    default_local_dir: string;
    ray_wait_register_center_timeout: number;
    logger: string[];
    log_val_generations: number;
    rollout_data_dir: string | null;
    validation_data_dir: string | null;
    timeline: string | null;
    max_actor_ckpt_to_keep: number | null;
    seed: number;
  } & Open;
  /** The separate rollout workers of trainer.mode one_step_off / fully_async. */
  rollout: { nnodes: number; n_gpus_per_node: number } & Open;
  async_training: {
    staleness_threshold: number;
    trigger_parameter_sync_step: number;
    require_batches: number;
    partial_rollout: boolean;
  } & Open;
}

/** trainer.mode: how generation and training are scheduled. */
export type TrainingMode = "sync" | "one_step_off" | "fully_async";
