/**
 * The SFT trainer's config: veRL's fsdp_sft_trainer.yaml keys (sft-trainer.yaml next to this file holds
 * every key, its default and its doc), loaded like the PPO trainer's (defaults, YAML files, `k=v`
 * overrides; unknown keys and wrong types refused by name), and the checks beyond types.
 */
import { readFileSync } from "node:fs";
import { loraKeyIssues } from "../models/lora.js";
import { checkLoggerNames, type LoggerName } from "./check.js";
import { checkLoadOptions, loadTrainerConfig } from "./load.js";
import { type ConfigIssue, type ConfigNode, ConfigSchema, TrainerConfigError } from "./schema.js";

const SFT_DEFAULTS_URL = new URL("./sft-trainer.yaml", import.meta.url);
let sftSchema: ConfigSchema | undefined;

/** The schema of the SFT trainer's keys (sft-trainer.yaml). */
export function sftConfigSchema(): ConfigSchema {
  sftSchema ??= ConfigSchema.fromYaml(readFileSync(SFT_DEFAULTS_URL, "utf8"), SFT_DEFAULTS_URL.pathname);
  return sftSchema;
}

/** The SFT trainer's config, as loaded (see sft-trainer.yaml for each key). */
export interface SftConfig {
  data: {
    train_batch_size: number;
    micro_batch_size_per_gpu: number;
    train_files: string | string[] | null;
    val_files: string | string[] | null;
    prompt_key: string;
    response_key: string;
    multiturn: { enable: boolean; messages_key: string; tools_key: string };
    max_length: number;
    truncation: "error" | "left" | "right";
  };
  model: {
    partial_pretrain: string | null;
    external_lib: string | null;
    enable_gradient_checkpointing: boolean;
    fsdp_config: { model_dtype: "fp32" | "bf16" | "fp16" };
    lora_rank: number;
    lora_alpha: number;
    target_modules: string | string[];
  };
  optim: {
    lr: number;
    betas: number[];
    weight_decay: number;
    lr_warmup_steps_ratio: number;
    clip_grad: number;
    lr_scheduler: "cosine" | "constant";
  };
  trainer: {
    default_local_dir: string;
    project_name: string;
    experiment_name: string;
    total_epochs: number;
    total_training_steps: number | null;
    logger: LoggerName[];
    seed: number;
    save_freq: number;
    test_freq: number;
    nnodes: number;
    n_gpus_per_node: number;
    max_ckpt_to_keep: number | null;
    resume_mode: "auto" | "disable" | "resume_path";
    resume_from_path: string | null;
    ray_wait_register_center_timeout: number;
  };
}

export interface LoadSftConfigOptions {
  files?: readonly string[];
  values?: ConfigNode;
  overrides?: readonly string[];
}

/**
 * Defaults, then the files, `values` and overrides; every key and type checked, then checkSftConfig.
 * An option it does not take (`schema` too: the SFT schema is fixed) is refused, not ignored.
 */
export function loadSftConfig(opts: LoadSftConfigOptions = {}): SftConfig {
  checkLoadOptions(opts, "loadSftConfig", ["files", "values", "overrides"]);
  const cfg = loadTrainerConfig({ ...opts, schema: sftConfigSchema() }) as unknown as SftConfig;
  const issues = checkSftConfig(cfg);
  if (issues.length) throw new TrainerConfigError(issues);
  return cfg;
}

/** Checks beyond types: required keys, ranges, batch divisibility, LoRA availability. */
export function checkSftConfig(cfg: SftConfig): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const add = (key: string, message: string) => issues.push({ key, message: `${key} ${message}` });
  const d = cfg.data;
  const t = cfg.trainer;
  if (!cfg.model.partial_pretrain) add("model.partial_pretrain", "is not set (a model directory is needed)");
  if (!d.train_files || (Array.isArray(d.train_files) && d.train_files.length === 0))
    add("data.train_files", "is not set (parquet or JSONL files are needed)");
  const positive: [string, number][] = [
    ["data.train_batch_size", d.train_batch_size],
    ["data.micro_batch_size_per_gpu", d.micro_batch_size_per_gpu],
    ["data.max_length", d.max_length],
    ["optim.lr", cfg.optim.lr],
    ["trainer.total_epochs", t.total_epochs],
    ["trainer.nnodes", t.nnodes],
    ["trainer.n_gpus_per_node", t.n_gpus_per_node],
    ["trainer.ray_wait_register_center_timeout", t.ray_wait_register_center_timeout],
  ];
  for (const [k, v] of positive) if (!(v > 0)) add(k, `must be > 0, got ${v}`);
  if (d.max_length < 2) add("data.max_length", `must be at least 2 tokens, got ${d.max_length}`);
  if (t.total_training_steps !== null && !(t.total_training_steps > 0))
    add("trainer.total_training_steps", `must be > 0 or null, got ${t.total_training_steps}`);
  if (t.max_ckpt_to_keep !== null && !(t.max_ckpt_to_keep > 0))
    add("trainer.max_ckpt_to_keep", `must be > 0 or null, got ${t.max_ckpt_to_keep}`);
  const ratio = cfg.optim.lr_warmup_steps_ratio;
  if (!(ratio >= 0 && ratio <= 1)) add("optim.lr_warmup_steps_ratio", `must be in [0, 1], got ${ratio}`);
  if (cfg.optim.betas.length !== 2) add("optim.betas", `must be two numbers, got ${cfg.optim.betas.length}`);
  if (!(cfg.optim.clip_grad > 0)) add("optim.clip_grad", `must be > 0, got ${cfg.optim.clip_grad}`);
  if (cfg.optim.weight_decay < 0) add("optim.weight_decay", `must be >= 0, got ${cfg.optim.weight_decay}`);
  const W = t.nnodes * t.n_gpus_per_node;
  if (d.train_batch_size > 0 && W > 0 && d.train_batch_size % W !== 0)
    add("data.train_batch_size", `(${d.train_batch_size}) must split over the ${W} ranks`);
  if (t.resume_mode === "resume_path" && !t.resume_from_path)
    add("trainer.resume_from_path", "must be set with trainer.resume_mode=resume_path");
  // the LoRA keys: the PPO trainer's rules, named by this file's keys
  issues.push(...loraKeyIssues(cfg.model, "model"));
  issues.push(...checkLoggerNames(t.logger));
  return issues;
}
