/**
 * The main job end to end, as CI runs it: `pnpm torl` (mainCommand) with tiny.yaml's code path, two
 * steps on a tiny batch: 2 FSDP actor ranks with colocated TIR rollout, the reward manager actor and
 * sandbox actors through the runtime, greedy validation before training and at the last step.
 * TORL_RECIPE_TEST_MODEL=DIR runs it on another model directory (default: the committed tiny base).
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isInitialized } from "@torl-ts/actors";
import { readMetrics } from "@torl-ts/verl";
import test from "ava";
import { mainCommand } from "../src/recipe.js";
import { capturingConsole } from "./console-lines.js";

const FRACTIONS = [
  "val_acc_initial",
  "val_acc_final",
  "code_ratio_initial",
  "code_ratio_final",
  "pass_ratio_final",
] as const;

test.serial("pnpm torl: a two-step main job writes metrics, summary, samples and the report", async (t) => {
  const runsDir = mkdtempSync(join(tmpdir(), "torl-recipe-runs-"));
  const model = process.env.TORL_RECIPE_TEST_MODEL;
  const lines: string[] = [];
  const code = await capturingConsole(lines, () =>
    mainCommand.run([
      ...(model ? [`actor_rollout_ref.model.path=${model}`] : []),
      "trainer.total_training_steps=2",
      "trainer.test_freq=2",
      "data.train_batch_size=4",
      "actor_rollout_ref.rollout.n=4",
      "actor_rollout_ref.actor.ppo_mini_batch_size=4",
      "data.max_response_length=64",
      "data.val_batch_size=20",
      "torl.train_problems=64",
      "torl.val_problems=20",
      `torl.runs_dir=${runsDir}`,
      "torl.run_name=ci",
    ]),
  );
  t.log(lines.join("\n"));
  t.is(code, 0);
  t.false(isInitialized(), "the runtime the job started is shut down");
  const runDir = join(runsDir, "ci");
  t.is(lines.at(-1), runDir, "the run directory is the last line printed");

  const metrics = readMetrics(join(runDir, "metrics.jsonl"));
  t.deepEqual(
    metrics.map((m) => m.step),
    [0, 1, 2],
  );
  for (const m of metrics.slice(1)) {
    for (const key of [
      "tool/code_ratio",
      "tool/pass_ratio",
      "tool/effective_code_ratio",
      "critic/score/mean",
      "actor/pg_loss",
      "response_length/mean",
      "timing_s/gen",
      "timing_s/step",
    ]) {
      t.true(Number.isFinite(m[key]), `step ${m.step} has ${key}`);
    }
    for (const key of ["tool/code_ratio", "tool/pass_ratio", "tool/effective_code_ratio"])
      t.true(m[key]! >= 0 && m[key]! <= 1, `${key} is a fraction`);
  }
  for (const m of [metrics[0]!, metrics[2]!]) {
    t.true(Number.isFinite(m["val/acc"]), `validation at step ${m.step}`);
    t.true(
      Object.keys(m).some((k) => /^val\/tiny\/[a-z_]+\/acc$/.test(k)),
      "accuracy per problem kind (data_source tiny/<kind>)",
    );
  }

  const summary = JSON.parse(readFileSync(join(runDir, "summary.json"), "utf8"));
  t.is(summary.steps, 2);
  t.is(summary.num_llm_calls_available, 1);
  t.like(summary, { trainer_seed: 1, data_seed: 1, split_seed: 1 }, "the run's seeds");
  t.true(summary.wall_seconds > 0);
  // Figure 4c: the pass ratio split by the answer, where such responses called the tool
  for (const m of metrics.slice(1))
    for (const k of ["tool/pass_ratio_correct", "tool/pass_ratio_wrong"])
      if (k in m) t.true(m[k]! >= 0 && m[k]! <= 1, `step ${m.step}: ${k} is a fraction`);
  t.true(
    metrics.some((m) => "tool/pass_ratio_correct" in m || "tool/pass_ratio_wrong" in m),
    "some step splits the pass ratio by the answer",
  );
  for (const k of FRACTIONS) {
    const v = summary[k];
    t.true(typeof v === "number" && v >= 0 && v <= 1, `summary.${k} = ${v} is a fraction`);
  }
  for (const k of [
    "val_acc_hard_initial",
    "val_acc_hard_final",
    "val_acc_easy_initial",
    "val_acc_easy_final",
  ]) {
    const v = summary[k];
    t.true(typeof v === "number" && v >= 0 && v <= 1, `summary.${k} = ${v} is a fraction`);
  }
  t.is(summary.val_acc_initial, metrics[0]!["val/acc"]);
  t.is(summary.val_acc_final, metrics[2]!["val/acc"]);

  const samples = readFileSync(join(runDir, "samples.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.true(samples.some((s) => s.split === "val" && s.step === 0));
  t.true(samples.some((s) => s.split === "val" && s.step === 2));
  t.true(samples.some((s) => s.split === "train" && s.step === 1));
  t.true(samples.every((s) => typeof s.response === "string" && typeof s.prompt === "string" && s.prompt));
  t.true(existsSync(join(runDir, "config.yaml")));
  t.true(existsSync(join(runDir, "report.html")) && existsSync(join(runDir, "report.png")), "the report");
});
