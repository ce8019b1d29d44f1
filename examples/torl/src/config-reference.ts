/**
 * Writes docs/configuration.md: every key of the recipe's config (the trainer's keys from
 * @torl-ts/verl's ppo-trainer.yaml plus the recipe's `torl.` keys), with its type, default, whether it
 * acts or is refused unless left at its default, and its doc comment: the table is read from the schema,
 * so it is the code.
 *
 *   pnpm tsx examples/torl/src/config-reference.ts > docs/configuration.md
 *   pnpm tsx examples/torl/src/config-reference.ts --sft > docs/sft.md   (the SFT trainer's keys)
 *
 * examples/torl/test/config-reference.test.ts fails when the committed file differs from what this
 * prints, and when a key the page says acts is read by no code.
 */
import { fileURLToPath } from "node:url";
import { type ConfigKeySpec, type ConfigSchema, formatConfigType, sftConfigSchema } from "@torl-ts/verl";
import { recipeConfigSchema } from "./recipe.js";

const cell = (s: string) => s.replace(/\|/g, "\\|").replace(/\n+/g, " ");

function formatDefault(v: unknown): string {
  if (v === null) return "`null`";
  if (typeof v === "string") return v === "" ? '`""`' : v.includes("`") ? `<code>${v}</code>` : `\`${v}\``;
  return `\`${JSON.stringify(v)}\``;
}

/** Meanings of keys whose YAML has no comment (veRL's semantics; the YAML's own comment wins). */
const MEANINGS: Record<string, string> = {
  "data.train_files":
    "training parquet/JSONL file(s) with veRL's RL columns (prompt, data_source, reward_model, ...)",
  "data.val_files": "validation file(s); null: no validation",
  "data.prompt_key": "column holding the chat messages of the prompt",
  "data.max_prompt_length": "longest prompt in tokens (left-padded to this)",
  "data.max_response_length": "most response tokens per sample, tool observations included",
  "data.train_batch_size": "prompts per training step (before rollout.n)",
  "data.val_batch_size": "prompts per validation batch; null: all at once",
  "data.shuffle": "shuffle the training rows every epoch",
  "data.seed":
    "seed of the training rows' shuffle (their order in each epoch); the tiny recipe's train/held-out " +
    "split is torl.split_seed's, so a seed sweep keeps the data fixed",
  "data.filter_overlong_prompts": "drop prompts longer than the limit instead of failing",
  "data.truncation": "what to do with a prompt over max_prompt_length when not filtered",
  "data.execution_error_penalty_value": "ToRL: the amount subtracted when execution_error_penalty is on",
  "actor_rollout_ref.model.path":
    "HF-format model directory (config.json, model.safetensors, tokenizer.json) of a Qwen2/Qwen2.5, Qwen3 (dense) or Llama 3/3.1/3.2 model; other architectures (MoE, vision) and config.json settings that are not implemented (yarn/linear/dynamic rope scaling, sliding window, attention or MLP biases on Llama/Qwen3) are refused naming the key",
  "actor_rollout_ref.model.lora_rank":
    "LoRA rank (veRL's key); 0: full fine-tuning. With a rank the base weights are frozen (stored in model.dtype, sharded at rest) and only the adapters (A: rank x in, B: out x rank, B starting at zero) get gradients, AdamW state and FSDP shards; the reference policy is the base with the adapters switched off (no second copy of the weights); checkpoints hold the adapters, `torl export` writes merged weights or a PEFT adapter directory",
  "actor_rollout_ref.model.lora_alpha":
    "LoRA scaling: the adapters' product is multiplied by lora_alpha / lora_rank (PEFT's scaling); refused when lora_rank is 0",
  "actor_rollout_ref.model.target_modules":
    "LoRA: the linear layers adapted, all-linear (every one but the LM head, as PEFT) or a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; an unknown name is refused, and so is a list when lora_rank is 0",
  "actor_rollout_ref.model.external_lib":
    "a module of yours (path, file: URL or package name) imported by the driver and every worker before the model is built, e.g. one that calls registerPolicyLoss",
  "actor_rollout_ref.actor.ppo_mini_batch_size":
    "prompts per optimizer step (x rollout.n rows); must divide data.train_batch_size",
  "actor_rollout_ref.actor.ppo_micro_batch_size":
    "rows per forward/backward over all workers (deprecated form)",
  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu":
    "rows per forward/backward per worker (gradient accumulation)",
  "actor_rollout_ref.actor.use_dynamic_bsz":
    "token-budget micro-batches: rows sorted by length and packed up to ppo_max_token_len_per_gpu (same gradients, less padding)",
  "actor_rollout_ref.actor.ppo_max_token_len_per_gpu":
    "with use_dynamic_bsz: tokens per micro-batch on one worker (rows x longest row, padding included)",
  "actor_rollout_ref.actor.grad_clip": "global gradient-norm clip",
  "actor_rollout_ref.actor.clip_ratio": "PPO clip epsilon (both sides unless the low/high keys differ)",
  "actor_rollout_ref.actor.clip_ratio_low": "PPO clip: lower bound 1 - clip_ratio_low",
  "actor_rollout_ref.actor.clip_ratio_high": "PPO clip: upper bound 1 + clip_ratio_high",
  "actor_rollout_ref.actor.clip_ratio_c": "dual-clip constant for negative advantages",
  "actor_rollout_ref.actor.loss_agg_mode": "how token losses become one number",
  "actor_rollout_ref.actor.entropy_coeff": "entropy bonus weight (0: off)",
  "actor_rollout_ref.actor.use_kl_loss": "add a KL-to-reference term to the actor loss (GRPO style)",
  "actor_rollout_ref.actor.kl_loss_coef": "weight of the KL loss",
  "actor_rollout_ref.actor.kl_loss_type": "KL estimator of the KL loss",
  "actor_rollout_ref.actor.ppo_epochs": "passes over each batch",
  "actor_rollout_ref.actor.optim.lr": "AdamW learning rate",
  "actor_rollout_ref.actor.optim.lr_warmup_steps": "warmup steps; -1: use lr_warmup_steps_ratio",
  "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "warmup as a fraction of the total steps",
  "actor_rollout_ref.actor.optim.min_lr_ratio": "cosine schedule floor as a fraction of lr",
  "actor_rollout_ref.actor.optim.warmup_style": "schedule after warmup",
  "actor_rollout_ref.actor.optim.weight_decay": "AdamW decoupled weight decay",
  "actor_rollout_ref.actor.optim.betas": "AdamW betas",
  "actor_rollout_ref.actor.optim.eps": "AdamW epsilon",
  "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "rows per reference forward per worker",
  "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "token-budget micro-batches for the reference forward",
  "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu":
    "with log_prob_use_dynamic_bsz: tokens per micro-batch",
  "actor_rollout_ref.rollout.temperature": "sampling temperature",
  "actor_rollout_ref.rollout.top_k": "top-k sampling; -1: off",
  "actor_rollout_ref.rollout.top_p": "nucleus sampling mass",
  "actor_rollout_ref.rollout.response_length": "most response tokens the rollout generates",
  "actor_rollout_ref.rollout.max_num_seqs": "rows decoded together in one worker",
  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "rows per log-prob forward per worker",
  "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz":
    "token-budget micro-batches for the old-log-prob forward",
  "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu":
    "with log_prob_use_dynamic_bsz: tokens per micro-batch",
  "actor_rollout_ref.rollout.do_sample": "sample (true) or greedy (false)",
  "actor_rollout_ref.rollout.n": "responses sampled per prompt (the GRPO group size)",
  "actor_rollout_ref.rollout.seed":
    "seed of validation sampling (with val_kwargs sampling; greedy validation has no randomness) and of " +
    "the policy losses' random token picks (clip_cov, kl_cov); training rollouts draw theirs from trainer.seed",
  "actor_rollout_ref.rollout.val_kwargs.top_k": "validation sampling: top-k",
  "actor_rollout_ref.rollout.val_kwargs.top_p": "validation sampling: nucleus mass",
  "actor_rollout_ref.rollout.val_kwargs.temperature": "validation sampling: temperature (0: greedy)",
  "actor_rollout_ref.rollout.val_kwargs.n": "validation samples per prompt",
  "actor_rollout_ref.rollout.val_kwargs.do_sample": "validation: sample or greedy",
  "actor_rollout_ref.rollout.tool.run_timeout": "ToRL: seconds per code run",
  "actor_rollout_ref.rollout.tool.memory_limit_mb": "ToRL: memory limit per code run",
  "actor_rollout_ref.rollout.tool.max_concurrency": "ToRL: code runs in flight at once",
  "actor_rollout_ref.rollout.tool.config":
    "free-form settings of the tool (examples/new-tool reads module/export/options here)",
  "critic.rollout_n":
    "responses per prompt (the critic's mini-batches hold ppo_mini_batch_size x rollout_n rows)",
  "critic.model.lora_rank":
    "LoRA rank of the value model (veRL's key); 0: full fine-tuning. With a rank the backbone is frozen (float32, sharded at rest) and the adapters and the value head (trained in full) get gradients, AdamW state and FSDP shards; checkpoints hold them. Refused when algorithm.adv_estimator trains no critic",
  "critic.model.lora_alpha":
    "LoRA scaling of the value model's adapters (lora_alpha / lora_rank, PEFT's); refused when lora_rank is 0",
  "critic.model.target_modules":
    "LoRA: the value model's linear layers adapted, all-linear or a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; an unknown name is refused, and so is a list when lora_rank is 0",
  "critic.optim.lr": "critic AdamW learning rate",
  "critic.optim.lr_warmup_steps": "warmup steps; -1: use lr_warmup_steps_ratio",
  "critic.optim.lr_warmup_steps_ratio": "warmup as a fraction of the total steps",
  "critic.optim.min_lr_ratio": "cosine schedule floor as a fraction of lr",
  "critic.optim.warmup_style": "schedule after warmup",
  "critic.optim.weight_decay": "AdamW decoupled weight decay",
  "critic.optim.betas": "AdamW betas",
  "critic.optim.eps": "AdamW epsilon",
  "critic.ppo_mini_batch_size": "prompts per critic update (x rollout_n rows), over all workers",
  "critic.ppo_micro_batch_size": "rows per forward/backward over all workers (deprecated: use _per_gpu)",
  "critic.ppo_micro_batch_size_per_gpu":
    "rows per forward/backward on one worker; null: the whole local mini-batch",
  "critic.forward_micro_batch_size_per_gpu": "rows per value forward (no gradient) on one worker",
  "critic.use_dynamic_bsz": "token-budget micro-batches for the critic (see the actor's)",
  "critic.ppo_max_token_len_per_gpu":
    "with use_dynamic_bsz: tokens per critic update micro-batch on one worker",
  "critic.forward_max_token_len_per_gpu":
    "with use_dynamic_bsz: tokens per value forward micro-batch on one worker",
  "critic.ppo_epochs": "passes over each batch in the critic update",
  "critic.grad_clip": "global gradient-norm clip of the critic",
  "critic.cliprange_value": "value clipping around the old values in the value loss",
  "critic.loss_agg_mode": "how the value loss is averaged over tokens and rows",
  "algorithm.gamma": "discount (GAE)",
  "algorithm.lam": "GAE lambda",
  "algorithm.adv_estimator":
    "advantage estimator registered by name (registerAdvantageEstimator): grpo, grpo_passk, opo, gpg, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax (a greedy baseline rollout per prompt), gae (runs a critic), or one a module in actor_rollout_ref.model.external_lib registers",
  "algorithm.norm_adv_by_std_in_grpo": "GRPO: divide by the group's std (false: Dr.GRPO)",
  "algorithm.use_kl_in_reward": "subtract a KL penalty from the token rewards",
  "algorithm.kl_penalty": "KL estimator of the in-reward penalty",
  "algorithm.kl_ctrl.type": "fixed or adaptive KL coefficient",
  "algorithm.kl_ctrl.kl_coef": "(initial) KL coefficient",
  "algorithm.kl_ctrl.horizon": "adaptive controller horizon",
  "algorithm.kl_ctrl.target_kl": "adaptive controller target",
  "trainer.balance_batch":
    "reorder each batch so every worker gets about the same number of tokens (veRL's balance_batch; global_seqlen/* metrics)",
  "trainer.total_epochs": "passes over the training data",
  "trainer.total_training_steps": "stop after this many steps; null: from epochs",
  "trainer.project_name": "project name (part of trainer.default_local_dir)",
  "trainer.experiment_name": "run name: runs/<name>/",
  "trainer.nnodes": "machines; workers = nnodes x n_gpus_per_node",
  "trainer.n_gpus_per_node": "workers per machine (one GPU each when GPUs exist)",
  "trainer.save_freq": "checkpoint every N steps; -1: never",
  "trainer.resume_mode": "auto: resume from the latest checkpoint; disable; resume_path",
  "trainer.resume_from_path": "checkpoint directory for resume_mode=resume_path",
  "trainer.val_before_train": "validate at step 0",
  "trainer.val_only": "validate and stop",
  "trainer.test_freq": "validate every N steps; -1: never",
  "trainer.critic_warmup":
    "the actor is updated from global step critic_warmup on (veRL); earlier steps train the critic only",
  "trainer.default_local_dir": "checkpoint directory",
  "trainer.max_actor_ckpt_to_keep": "keep this many checkpoints; null: all",
  "trainer.seed":
    "seed of the training rollouts: each step's sampling seed is drawn from it (rank r samples with that " +
    "seed + r x 1000003; the stream is saved in checkpoints). The actor loads pretrained weights and the " +
    "critic's value head (GAE) starts from a fixed seed, so this and data.seed are a GRPO run's seeds",
};

/** The key's state: it acts, or it is refused unless left at its default (with what to do instead). */
export function keyState(spec: ConfigKeySpec): "acts" | "refused" {
  return spec.unsupported ? "refused" : "acts";
}

/** The reference page for `schema` (default: the recipe's, which holds the trainer's keys). */
export function configReference(schema: ConfigSchema = recipeConfigSchema()): string {
  const keys = schema.keys();
  const sections = [...new Set(keys.map((k) => k.split(".")[0]!))];
  const refused = keys.filter((k) => keyState(schema.get(k)!) === "refused").length;
  const out = [
    "# Configuration reference",
    "",
    "<!-- generated by `pnpm tsx examples/torl/src/config-reference.ts > docs/configuration.md`, then `pnpm biome format --write docs`; do not edit -->",
    "",
    "Every key of the trainer config (`packages/verl-ts/src/config/ppo-trainer.yaml`) and of the ToRL recipe",
    "(`torl.`, `examples/torl/src/recipe.ts`), with its type and default. Names follow veRL's",
    "`ppo_trainer.yaml`; keys marked ToRL are this project's additions. Set them in a YAML file (merged over",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the text shows the YAML interpolation syntax
    "the defaults) or with `a.b.c=value` overrides; `${a.b}` takes the value of key `a.b`, and `${oc.env:VAR}`",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the text shows the YAML interpolation syntax
    "(or `${oc.env:VAR,default}`) the environment variable `VAR`, as a string (unset and no default: an error",
    "naming the key; any other resolver is refused). Unknown keys and",
    "wrong types are refused with the key's name and a did-you-mean hint; `+a.b=value` adds a key the schema",
    "does not know.",
    "",
    "Every key either acts (**acts**: it changes what a run does) or is refused (**refused**): a veRL key",
    "this implementation does not have, accepted only at its default; any other value stops the run before",
    "a worker starts, with an error that names the key and says what to do instead (the text shown here).",
    "",
    `${keys.length} keys (${keys.length - refused} act, ${refused} refused unless at their default) in ${sections.length} sections: ${sections.map((s) => `[${s}](#${s})`).join(", ")}.`,
  ];
  out.push(...keyTables(schema, MEANINGS));
  return `${out.join("\n")}\n`;
}

/** One table per top-level section: key, type, default, state, meaning. */
function keyTables(schema: ConfigSchema, meanings: Record<string, string>): string[] {
  const keys = schema.keys();
  const sections = [...new Set(keys.map((k) => k.split(".")[0]!))];
  const out: string[] = [];
  for (const section of sections) {
    out.push(
      "",
      `## ${section}`,
      "",
      "| key | type | default | state | meaning |",
      "| --- | --- | --- | --- | --- |",
    );
    for (const key of keys.filter((k) => k.split(".")[0] === section)) {
      const spec = schema.get(key)!;
      const doc = spec.doc || meanings[key] || "";
      const state = keyState(spec);
      const meaning = state === "refused" ? `not supported here: ${spec.unsupported}` : doc;
      out.push(
        `| \`${key}\` | ${cell(formatConfigType(spec.types))} | ${cell(formatDefault(spec.default))} | ${state === "acts" ? "acts" : "**refused**"} | ${cell(meaning)} |`,
      );
    }
  }
  return out;
}

/** The SFT trainer's page (docs/sft.md): how to run it, its data, and every key of sft-trainer.yaml. */
export function sftConfigReference(schema: ConfigSchema = sftConfigSchema()): string {
  const keys = schema.keys();
  const out = [
    "# The SFT trainer",
    "",
    "<!-- generated by `pnpm tsx examples/torl/src/config-reference.ts --sft > docs/sft.md`, then `pnpm biome format --write docs`; do not edit -->",
    "",
    "`pnpm torl sft <config.yaml ...> [key.path=value ...] [--runs-dir DIR]` (the installed `torl sft` is the",
    "same command) fine-tunes a chat model on conversations with veRL's SFT trainer keys",
    "(`fsdp_sft_trainer.yaml`), on the PPO trainer's FSDP workers: the model sharded over",
    "`trainer.n_gpus_per_node` ranks, AdamW on each rank's shard, `data.micro_batch_size_per_gpu` rows per",
    "forward/backward with the gradients accumulated into one step of `data.train_batch_size` rows.",
    "",
    "- Data: parquet or JSONL rows. Single-turn: a `data.prompt_key` column (a string, or a list of",
    "  `{role, content}` messages) and a `data.response_key` column (the assistant's answer). Multi-turn",
    "  (`data.multiturn.enable=true`): a `data.multiturn.messages_key` column of messages (system, user,",
    "  assistant, tool) and optionally `data.multiturn.tools_key` (OpenAI function schemas, or their JSON",
    "  text) for the chat template to list.",
    "- Loss: the negative log-likelihood of the assistant turns only, averaged over every trained token of",
    "  the step. Each conversation goes through the model's chat template (`tokenizer_config.json`'s",
    "  `chat_template`, the same Jinja path the rollout uses); an assistant turn's trained tokens are its",
    "  text and its end-of-turn token (the tokenizer's `eos_token`, where the multi-turn agent loop stops a",
    "  turn), tokenized as the rollout tokenizes a turn; the headers, system, user and tool turns are",
    "  context. A conversation without an assistant turn, a missing column, an empty file or a template",
    "  that does not end assistant turns with the eos token stops the run before it starts, naming the",
    "  file, row and column.",
    "- Outputs: what the PPO trainer writes: a line per step, `<runs-dir>/<experiment_name>/metrics.jsonl`",
    "  (`train/loss`, `train/lr`, `train/grad_norm`, `train/loss_tokens`, `val/loss` every",
    "  `trainer.test_freq` steps and at the end, timings), the `trainer.logger` sinks, `config.yaml`,",
    "  `summary.json`; checkpoints every `trainer.save_freq` steps in `trainer.default_local_dir`, from which",
    "  a rerun continues exactly (`trainer.resume_mode=auto`) and which `pnpm torl export CKPT --out DIR`",
    "  turns into a model directory for `pnpm torl train` or `pnpm torl eval`.",
    "- LoRA: `model.lora_rank` > 0 needs workers with LoRA adapters (`actor_rollout_ref.model.lora_rank` in the",
    "  trainer config); without them it is refused by name, and `model.lora_rank: 0` is full fine-tuning.",
    "",
    "Unknown keys and wrong types are refused with the key's name and a did-you-mean hint.",
    "",
    `${keys.length} keys:`,
  ];
  out.push(...keyTables(schema, {}));
  return `${out.join("\n")}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  process.stdout.write(process.argv.includes("--sft") ? sftConfigReference() : configReference());
