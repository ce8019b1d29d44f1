/**
 * One tiny run with the settings that shape what a run writes and prints: trainer.logger with
 * tensorboard, rollout_data_dir, validation_data_dir, log_val_generations, val_kwargs.n > 1, your own
 * reward function (custom_reward_function), no validation before training, and the run's timeline
 * (trainer.timeline).
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import { type Activity, clusterProcesses, metricFamilies } from "@torl-ts/core";
import test from "ava";
import { checkTrainerConfig, loadTrainerConfig } from "../../src/config/index.js";
import { RayPPOTrainer, readMetrics } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, TOOLS_MODULE, tinyConfig, vowelReward } from "./fixtures/setup.js";
import { parseEvent, readRecords } from "./tfevents-reader.js";

test.serial(
  "a run's outputs follow its settings: tensorboard, generation dumps, val@N metrics, own reward",
  async (t) => {
    await init({ numCpus: 4 });
    t.teardown(() => shutdown());
    const dir = mkdtempSync(join(tmpdir(), "torl-run-outputs-"));
    const reward = join(dir, "reward.mjs");
    writeFileSync(
      reward,
      `export function compute_score(data_source, solution_str, ground_truth, extra_info) {
  return { score: 10 + solution_str.length, acc: solution_str.length % 2 === 0 };
}
`,
    );
    const cfg = tinyConfig({
      modelPath: tinyModelDir(11),
      ckptDir: join(dir, "ckpt"),
      workers: 1,
      steps: 2,
      testFreq: 2,
      extra: [
        "trainer.val_before_train=false",
        "trainer.logger=[console,file,tensorboard]",
        `trainer.rollout_data_dir=${join(dir, "rollouts")}`,
        `trainer.validation_data_dir=${join(dir, "val")}`,
        "trainer.log_val_generations=2",
        "actor_rollout_ref.rollout.val_kwargs.n=2",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        `custom_reward_function.path=${reward}`,
        `trainer.timeline=${join(dir, "trace", "run.json")}`,
      ],
    });
    const lines: string[] = [];
    const trainer = new RayPPOTrainer(cfg, {
      trainRows: rows(8),
      valRows: rows(3, "val"),
      runsDir: join(dir, "runs"),
      workerEnv: { TORL_BACKEND: "cpu" },
      log: (l) => lines.push(l),
    });
    // what the dashboard reads while the run goes: the driver's "trainer" activity (its step and phase)
    const seen: Activity[] = [];
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const report = await clusterProcesses();
        const mine = report.processes.find((p) => p.pid === process.pid)?.activity.trainer;
        if (mine) seen.push(mine);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const summary = await trainer.fit().finally(() => {
      polling = false;
    });
    await poll;
    t.true(
      seen.some((a) => a.step === 2 && typeof a.phase === "string" && typeof a.phaseSinceMs === "number"),
      JSON.stringify(seen.slice(-3)),
    );
    t.true(seen.some((a) => a.step === 2 && typeof (a.phases as Record<string, number>).gen === "number"));
    const runDir = summary.run_dir;

    // the run's config.yaml loads and passes the checker again (the keys the trainer fills in are not in it)
    const again = loadTrainerConfig({ files: [join(runDir, "config.yaml")] });
    t.deepEqual(checkTrainerConfig(again), []);
    t.is(again.actor_rollout_ref.actor.optim.total_training_steps, -1);

    // no validation before training: no initial accuracy (the final one comes from step 2)
    t.is(summary.val_acc_initial, null);
    t.is(typeof summary.val_acc_final, "number");
    // no tool calls (C=0): the ratios over calls and over responses with code have no value
    t.is(summary.num_llm_calls_available, 0);
    t.is(summary.code_ratio_final, 0);
    t.is(summary.pass_ratio_final, null);
    t.is(summary.effective_code_ratio_final, null);

    // tensorboard: an event file in the run directory with the step metrics
    const events = readdirSync(runDir).filter((f) => f.startsWith("events.out.tfevents."));
    t.is(events.length, 1);
    const parsed = readRecords(readFileSync(join(runDir, events[0]!))).map(parseEvent);
    t.deepEqual(
      parsed.slice(1).map((e) => e.step),
      [1, 2],
    );
    const metrics = readMetrics(join(runDir, "metrics.jsonl"));
    t.is(parsed[1]!.scalars["actor/pg_loss"], Math.fround(metrics[0]!["actor/pg_loss"]!));
    t.true(parsed[2]!.wallTime >= parsed[1]!.wallTime);

    // rollout dumps: a file per step, B x n lines scored by the custom function
    for (const step of [1, 2]) {
      const dump = readFileSync(join(dir, "rollouts", `${step}.jsonl`), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      t.is(dump.length, 4 * 2);
      for (const r of dump) {
        t.deepEqual(Object.keys(r).sort(), ["acc", "gts", "input", "output", "score", "step"]);
        t.is(r.step, step);
        t.is(r.score, 10 + r.output.length, "the custom reward function scored it");
        t.regex(r.input, /q\d+: abc/, "the decoded prompt");
      }
    }
    // validation dump at step 2 only: 3 prompts x val_kwargs.n
    t.deepEqual(readdirSync(join(dir, "val")), ["2.jsonl"]);
    t.is(
      readFileSync(join(dir, "val", "2.jsonl"), "utf8")
        .trim()
        .split("\n").length,
      6,
    );
    t.true(lines.includes("[validation] step 2: 2 generations"), lines.join("\n"));
    // the backend the ranks compute on comes before any step, with whether the native kernels are on
    const backendAt = lines.findIndex((l) => l.startsWith("[torl] tensor backend: "));
    t.is(
      lines[backendAt],
      "[torl] tensor backend: cpu (requested); native kernels: not used on cpu (the OpenBLAS kernels run on wasm)",
    );
    t.true(backendAt < lines.findIndex((l) => /step 1/.test(l)), lines.join("\n"));

    // val@N metrics with veRL's names, throughput and per-token timing
    const s2 = metrics.find((m) => m.step === 2)!;
    for (const key of [
      "val-core/val/acc/mean@2",
      "val-core/val/acc/best@2/mean",
      "val-core/val/acc/maj@2/mean",
      "val-core/val/acc/pass@2",
      "val-aux/val/reward/mean@2",
      "val/test_score/val",
      "val/test_score/val_b",
      "perf/total_num_tokens",
      "perf/time_per_step",
      "perf/throughput",
      "timing_per_token_ms/gen",
      "timing_per_token_ms/update_actor",
    ])
      t.true(Number.isFinite(s2[key]), key);
    t.is(s2["perf/throughput"], s2["perf/total_num_tokens"]! / s2["perf/time_per_step"]!, "one worker");
    t.is(s2["perf/time_per_step"], s2["timing_s/step"]);

    // the run's timeline: each step's phases nested in it on the driver's row, the worker's calls on its own
    const trace = JSON.parse(readFileSync(join(dir, "trace", "run.json"), "utf8")) as {
      traceEvents: {
        name: string;
        cat?: string;
        ph: string;
        ts?: number;
        dur?: number;
        pid: number;
        tid: number;
        args?: Record<string, unknown>;
      }[];
    };
    const spans = trace.traceEvents.filter((e) => e.ph === "X");
    const names = new Map(
      trace.traceEvents.filter((e) => e.name === "process_name").map((e) => [e.pid, String(e.args?.name)]),
    );
    const steps = spans.filter((e) => e.cat === "trainer" && e.name === "step");
    t.deepEqual(
      steps.map((e) => e.args?.step),
      [1, 2],
    );
    t.regex(names.get(steps[0]!.pid)!, /^driver pid=\d+/);
    for (const phase of ["gen", "reward", "old_log_prob", "adv", "update_actor"]) {
      const p = spans.filter((e) => e.cat === "trainer" && e.name === phase);
      t.is(p.length, 2, phase);
      for (const e of p) {
        const step = steps[(e.args?.step as number) - 1]!;
        t.true(e.ts! >= step.ts! && e.ts! + e.dur! <= step.ts! + step.dur!, `${phase} inside its step`);
        t.is(e.tid, step.tid, `${phase} on its step's lane`);
        // timing_s/<phase> and the span measure the same phase
        const seconds = metrics[(e.args?.step as number) - 1]![`timing_s/${phase}`]!;
        t.true(
          Math.abs(e.dur! / 1e6 - seconds) < 0.05 + seconds * 0.05,
          `${phase}: ${e.dur! / 1e6} s vs ${seconds} s`,
        );
      }
    }
    const workerCalls = spans.filter(
      (e) => e.cat === "actor_call" && names.get(e.pid) !== names.get(steps[0]!.pid),
    );
    t.true(workerCalls.length > 0, "the worker's method calls");
    t.true(
      spans.some((e) => e.cat === "call" && e.pid === steps[0]!.pid),
      "the driver's calls to the worker",
    );

    // /metrics: each phase of each step observed in the driver's histogram, as timing_s/<phase> says
    const hist = metricFamilies().find((f) => f.name === "torl_trainer_phase_duration_seconds")!;
    t.is(hist.type, "histogram");
    const sample = (phase: string, suffix: string) =>
      hist.samples.find(
        (s) => s.name === `torl_trainer_phase_duration_seconds${suffix}` && s.labels.phase === phase,
      )?.value;
    t.is(sample("step", "_count"), 2, "a whole step observed once per step");
    for (const phase of ["gen", "reward", "update_actor"]) {
      t.is(sample(phase, "_count"), 2, `${phase} observed once per step`);
      const seconds = metrics[0]![`timing_s/${phase}`]! + metrics[1]![`timing_s/${phase}`]!;
      t.true(
        Math.abs(sample(phase, "_sum")! - seconds) < 0.1 + seconds * 0.05,
        `${phase}: ${sample(phase, "_sum")} s vs ${seconds} s`,
      );
    }
  },
);

test.serial(
  "rollout.tool.stop set to a string the tool does not stop at fails the run, naming the key",
  async (t) => {
    await init({ numCpus: 4 });
    t.teardown(() => shutdown());
    const dir = mkdtempSync(join(tmpdir(), "torl-tool-stop-"));
    const cfg = tinyConfig({
      modelPath: tinyModelDir(11),
      ckptDir: join(dir, "ckpt"),
      steps: 1,
      calls: 1,
      extra: ["actor_rollout_ref.rollout.tool.stop=<never>"],
    });
    const trainer = new RayPPOTrainer(cfg, {
      trainRows: rows(4),
      valRows: [],
      reward: vowelReward,
      runsDir: join(dir, "runs"),
      tool: { module: TOOLS_MODULE, exportName: "VowelCounterTool" },
      workerEnv: { TORL_BACKEND: "cpu" },
      log: () => {},
    });
    await t.throwsAsync(trainer.fit(), {
      message: /actor_rollout_ref\.rollout\.tool\.stop is "<never>" but the tool .* stops at/,
    });
  },
);

test.serial(
  "adv_estimator=remax: a greedy baseline rollout per prompt; greedy samples get zero advantage",
  async (t) => {
    await init({ numCpus: 4 });
    t.teardown(() => shutdown());
    const dir = mkdtempSync(join(tmpdir(), "torl-remax-"));
    // a score that tells any two texts apart (a random model's bytes rarely hold vowels)
    const reward = join(dir, "text-hash.mjs");
    writeFileSync(
      reward,
      "export const compute_score = (ds, s) => [...s].reduce((a, c) => a + c.codePointAt(0), 0) % 97;\n",
    );
    const run = async (extra: string[]) => {
      const cfg = tinyConfig({
        modelPath: tinyModelDir(11),
        ckptDir: join(dir, `ckpt-${extra.length}`),
        steps: 1,
        extra: [
          "algorithm.adv_estimator=remax",
          "actor_rollout_ref.rollout.n=2",
          `custom_reward_function.path=${reward}`,
          ...extra,
        ],
      });
      const trainer = new RayPPOTrainer(cfg, {
        trainRows: rows(4),
        valRows: [],
        runsDir: join(dir, "runs"),
        runName: `remax-${extra.length}`,
        workerEnv: { TORL_BACKEND: "cpu" },
        log: () => {},
      });
      const summary = await trainer.fit();
      return readMetrics(join(summary.run_dir, "metrics.jsonl")).find((m) => m.step === 1)!;
    };
    // sampling greedily, every response is its prompt's greedy baseline: nothing to learn from
    const greedy = await run(["actor_rollout_ref.rollout.do_sample=false"]);
    t.true(Number.isFinite(greedy["timing_s/gen_max"]), "the baseline rollout ran");
    t.not(greedy["critic/score/max"], greedy["critic/score/min"], "the prompts' greedy scores differ");
    t.is(greedy["critic/advantages/max"], 0);
    t.is(greedy["critic/advantages/min"], 0);
    // sampled responses differ from the greedy one: advantages are score - baseline, not all zero
    const sampled = await run([]);
    t.true(sampled["critic/advantages/max"]! > 0 || sampled["critic/advantages/min"]! < 0);
  },
);
