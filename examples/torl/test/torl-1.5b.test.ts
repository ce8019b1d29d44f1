/**
 * The paper's recipe: configs/torl-1.5b.yaml holds the released script's settings, and one step of it
 * runs end to end on a tiny random model of the Qwen2 architecture with the real Qwen tokenizer and
 * prompts from the paper's test.parquet (tiny batch and lengths through overrides).
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  bundledQwenTokenizerDir,
  checkTrainerConfig,
  createRandomPretrained,
  loadTokenizer,
  readMetrics,
} from "@torl-ts/verl";
import test from "ava";
import { loadRecipeConfig, recipeSettings, runRecipe, TORL_1_5B_CONFIG } from "../src/recipe.js";

const TEST_PARQUET = new URL(
  "../../../packages/verl-ts/test/fixtures/core/torl-test.parquet",
  import.meta.url,
).pathname;

/** scripts/torl_1.5b.sh of GAIR-NLP/ToRL @ 1db091d9, key by key (less the key left out, below). */
const RELEASED: Record<string, unknown> = {
  "actor_rollout_ref.model.dtype": "bfloat16",
  "algorithm.adv_estimator": "grpo",
  "data.train_batch_size": 128,
  "data.val_batch_size": 2048,
  "data.max_prompt_length": 400,
  "data.max_response_length": 3072,
  "data.template_type": "tir_base_0309",
  "data.execution_error_penalty": false,
  "actor_rollout_ref.actor.optim.lr": 1e-6,
  "actor_rollout_ref.actor.use_kl_loss": false,
  "actor_rollout_ref.actor.kl_loss_coef": 0,
  "actor_rollout_ref.actor.entropy_coeff": 0,
  "actor_rollout_ref.actor.mask_tool_output": true,
  "actor_rollout_ref.rollout.n": 16,
  "actor_rollout_ref.rollout.temperature": 1,
  "actor_rollout_ref.rollout.top_p": 1,
  "actor_rollout_ref.rollout.num_llm_calls_available": 1,
  "actor_rollout_ref.rollout.tool.stop": "```output",
  "algorithm.kl_ctrl.kl_coef": 0,
  "trainer.n_gpus_per_node": 8,
  "trainer.nnodes": 1,
  "trainer.total_epochs": 300,
  "trainer.save_freq": 20,
  "trainer.test_freq": 4,
};

function at(cfg: unknown, key: string): unknown {
  return key.split(".").reduce<unknown>((o, k) => (o as Record<string, unknown>)?.[k], cfg);
}

test("torl-1.5b.yaml equals the released script", (t) => {
  const notes: string[] = [];
  const cfg = loadRecipeConfig([TORL_1_5B_CONFIG], [], notes);
  for (const [key, value] of Object.entries(RELEASED)) t.is(at(cfg, key), value, key);
  t.is(recipeSettings(cfg).data, "files");
  t.regex(String(cfg.actor_rollout_ref.model.path), /Qwen2\.5-Math-1\.5B$/);
  // The script's ppo_mini_batch_size 1024 is over the batch of 128 prompts: veRL's split of the batch
  // gives one mini-batch holding all of it, so it runs as 128.
  const raw = readFileSync(TORL_1_5B_CONFIG, "utf8");
  t.regex(raw, /ppo_mini_batch_size: 1024/);
  t.is(cfg.actor_rollout_ref.actor.ppo_mini_batch_size, 128);
  t.is(notes.length, 1);
  // vLLM's memory share is left out, with a comment why
  t.regex(raw, /# The released script trains in bfloat16/);
  t.regex(raw, /# The released script sets vLLM's gpu_memory_utilization: 0\.85\./);
  t.deepEqual(checkTrainerConfig(cfg), []);
});

test.serial("one step of the 1.5B recipe on a tiny random Qwen2 with the real Qwen tokenizer", async (t) => {
  const model = mkdtempSync(join(tmpdir(), "torl-qwen-tiny-"));
  const tokenizer = loadTokenizer(bundledQwenTokenizerDir());
  createRandomPretrained(
    model,
    tokenizer,
    {
      hiddenSize: 8,
      numHiddenLayers: 1,
      numAttentionHeads: 2,
      numKeyValueHeads: 1,
      intermediateSize: 16,
      vocabSize: 151936,
    },
    { seed: 5, std: 0.02 },
  ).dispose();
  const runsDir = mkdtempSync(join(tmpdir(), "torl-1.5b-runs-"));
  const ckpt = mkdtempSync(join(tmpdir(), "torl-1.5b-ckpt-"));
  const lines: string[] = [];
  const cfg = loadRecipeConfig(
    [TORL_1_5B_CONFIG],
    [
      `actor_rollout_ref.model.path=${model}`,
      `data.train_files=${TEST_PARQUET}`,
      `data.val_files=${TEST_PARQUET}`,
      "data.train_batch_size=2",
      "data.val_batch_size=2",
      "data.max_prompt_length=96",
      "data.max_response_length=8",
      "actor_rollout_ref.rollout.n=2",
      "actor_rollout_ref.actor.ppo_mini_batch_size=2",
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
      "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
      "trainer.n_gpus_per_node=2",
      "trainer.total_training_steps=1",
      "trainer.val_before_train=false",
      `trainer.default_local_dir=${ckpt}`,
      "torl.max_val_rows=2",
      `torl.runs_dir=${runsDir}`,
      "torl.run_name=smoke",
      "torl.report=false",
    ],
  );
  const summary = await runRecipe(cfg, { log: (l) => lines.push(l) });
  t.log(lines.join("\n"));
  const runDir = join(runsDir, "smoke");
  t.is(lines.at(-1), runDir);
  t.is(summary.steps, 1);
  const [m] = readMetrics(join(runDir, "metrics.jsonl"));
  t.is(m!.step, 1);
  for (const key of ["actor/pg_loss", "critic/score/mean", "tool/code_ratio", "val/acc", "timing_s/step"])
    t.true(Number.isFinite(m![key]), key);
  t.true(
    Object.keys(m!).some((k) => /^val\/(aime24|aime25|math500|math)[^/]*\/acc$/.test(k)),
    `validation per data_source of test.parquet: ${Object.keys(m!).filter((k) => k.startsWith("val/"))}`,
  );
  t.true(existsSync(join(ckpt, "global_step_1")), "the config's save_freq checkpoints the last step");
  const cfgOnDisk = readFileSync(join(runDir, "config.yaml"), "utf8");
  t.regex(cfgOnDisk, /template_type: tir_base_0309/);
  t.regex(cfgOnDisk, /num_llm_calls_available: 1/);
});
