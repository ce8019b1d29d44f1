/**
 * The installed `torl train` is @torl-ts/verl's train command (its `cli` registry), without this recipe's
 * code: on the tiny recipe's task and base model it trains with the Python code interpreter of
 * actor_rollout_ref.rollout.tool, as `pnpm torl train` does here, and with
 * num_llm_calls_available=0 (the documented control) with none.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readMetrics, tinyDataset, writeParquetRows } from "@torl-ts/verl";
import { cliCommands } from "@torl-ts/verl/cli";
import test from "ava";
import { capturingConsole } from "./console-lines.js";

const TINY_BASE = fileURLToPath(new URL("../../../packages/verl-ts/assets/tiny-base", import.meta.url));

test.serial(
  "the package's own train command trains with the Python tool by default: tool metrics above 0",
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "torl-verl-train-"));
    writeParquetRows(join(dir, "train.parquet"), tinyDataset({ trainCount: 64, valCount: 8 }).train);
    const config = join(dir, "tiny.yaml");
    writeFileSync(
      config,
      `data:
  train_files: ${join(dir, "train.parquet")}
  val_files: null
  train_batch_size: 4
  max_prompt_length: 80
  max_response_length: 64
  template_type: tir_base_0309
actor_rollout_ref:
  model: { path: ${TINY_BASE} }
  actor: { ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 16, optim: { lr: 5.0e-4 } }
  rollout:
    n: 4
    log_prob_micro_batch_size_per_gpu: 16
    tool: { run_timeout: 5.0, memory_limit_mb: 512 }
algorithm: { adv_estimator: grpo }
trainer:
  n_gpus_per_node: 1
  total_training_steps: 2
  test_freq: -1
  val_before_train: false
  resume_mode: disable
  experiment_name: installed
  logger: [console]
  seed: 1
`,
    );
    const train = await cliCommands.train!();
    const lines: string[] = [];
    const code = await capturingConsole(lines, () => train.run([config, "--runs-dir", join(dir, "runs")]));
    t.log(lines.join("\n"));
    t.is(code, 0);
    t.true(
      lines.includes(
        "[trainer] rollout tool: the Python code interpreter (1 sandbox actor(s) x 2 interpreters per rollout worker; run_timeout 5 s, memory_limit_mb 512)",
      ),
    );
    const metrics = readMetrics(join(dir, "runs", "installed", "metrics.jsonl"));
    t.deepEqual(
      metrics.map((m) => m.step),
      [1, 2],
    );
    // the model wrote code and the interpreter ran it: calls made, and some of them passed
    t.true(
      metrics.some((m) => m["tool/code_ratio"]! > 0),
      JSON.stringify(metrics.map((m) => m["tool/code_ratio"])),
    );
    t.true(metrics.some((m) => m["tool/pass_ratio"]! > 0));
  },
);
