import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, isInitialized, shutdown } from "@torl-ts/actors";
import test from "ava";
import { TrainerConfigError } from "../../src/config/index.js";
import { RayPPOTrainer, readMetrics, trainCommand } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, TOOLS_MODULE, tinyConfig, vowelReward } from "./fixtures/setup.js";

const modelPath = tinyModelDir(11);

test.serial("a bad config stops in the constructor, before the runtime or any actor starts", (t) => {
  const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
  t.false(isInitialized());
  const bad = tinyConfig({ modelPath, ckptDir, extra: ["actor_rollout_ref.actor.ppo_mini_batch_size=3"] });
  const e1 = t.throws(() => new RayPPOTrainer(bad, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e1!.message, /ppo_mini_batch_size \(3\) must divide data\.train_batch_size \(4\)/);
  const noModel = tinyConfig({ modelPath: join(ckptDir, "nope"), ckptDir, workers: 3 });
  const e2 = t.throws(() => new RayPPOTrainer(noModel, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e2!.message, /actor_rollout_ref\.model\.path .*nope holds no config\.json/);
  t.regex(e2!.message, /must split evenly over 3 workers|must divide evenly over 3 workers/);
  const dynamic = tinyConfig({
    modelPath,
    ckptDir,
    extra: [
      "actor_rollout_ref.actor.use_dynamic_bsz=true",
      "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0",
    ],
  });
  const e3 = t.throws(() => new RayPPOTrainer(dynamic, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(
    e3!.message,
    /actor_rollout_ref\.actor\.ppo_max_token_len_per_gpu must be a positive number of tokens/,
  );
  const critic = tinyConfig({
    modelPath,
    ckptDir,
    extra: ["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=3", `critic.model.path=${ckptDir}`],
  });
  const e4 = t.throws(() => new RayPPOTrainer(critic, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e4!.message, /critic\.ppo_mini_batch_size \(3\) must divide data\.train_batch_size \(4\)/);
  t.regex(e4!.message, /critic\.model\.path .* holds no config\.json/);
  const unknown = tinyConfig({ modelPath, ckptDir, extra: ["algorithm.adv_estimator=ppo2"] });
  const e5 = t.throws(() => new RayPPOTrainer(unknown, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e5!.message, /algorithm\.adv_estimator "ppo2" is not a registered estimator \(known: .*gae/);
  t.is(e5!.issues.length, 1, "each problem is listed once");
  // every problem of a config is listed at once: counts, probabilities, batch sizes, refused keys
  const many = tinyConfig({
    modelPath,
    ckptDir,
    extra: [
      "trainer.total_training_steps=-5",
      "actor_rollout_ref.rollout.val_kwargs.top_p=1.5",
      "actor_rollout_ref.actor.ppo_mini_batch_size=3",
      "actor_rollout_ref.rollout.dtype=bfloat16",
    ],
  });
  const e6 = t.throws(() => new RayPPOTrainer(many, { trainRows: rows(8) }), {
    instanceOf: TrainerConfigError,
  });
  t.deepEqual(e6!.issues.map((i) => i.key).sort(), [
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.rollout.dtype",
    "actor_rollout_ref.rollout.val_kwargs.top_p",
    "trainer.total_training_steps",
  ]);
  t.regex(e6!.message, /trainer\.total_training_steps must be > 0 or null, got -5/);
  t.false(isInitialized(), "no runtime was started, so no actor exists");
});

test.serial("`torl train` with an unknown key or a bad value stops before any work starts", async (t) => {
  const e = await t.throwsAsync(trainCommand.run(["trainer.total_epoch=3"]), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e!.message, /trainer\.total_epoch/);
  await t.throwsAsync(trainCommand.run(["data.train_batch_size=many"]), { instanceOf: TrainerConfigError });
  await t.throwsAsync(trainCommand.run(["--tool", "nohash"]), { message: /MODULE#EXPORT/ });
  t.false(isInitialized());
});

test.serial(
  "fit runs veRL's step order on 2 workers with a tool: metrics, validation, summary, run dir last",
  async (t) => {
    await init({ numCpus: 6 });
    t.teardown(() => shutdown());
    const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
    const runsDir = mkdtempSync(join(tmpdir(), "torl-runs-"));
    const lines: string[] = [];
    const cfg = tinyConfig({ modelPath, ckptDir, workers: 2, steps: 2, testFreq: 2, calls: 1, saveFreq: 2 });
    const trainer = new RayPPOTrainer(cfg, {
      trainRows: rows(8),
      valRows: rows(4, "val"),
      reward: vowelReward,
      runsDir,
      tool: { module: TOOLS_MODULE, exportName: "VowelCounterTool" },
      workerEnv: { TORL_BACKEND: "cpu" },
      log: (l) => lines.push(l),
    });
    const summary = await trainer.fit();
    t.log(JSON.stringify(lines, null, 1));
    const runDir = join(runsDir, "tiny");
    t.is(lines.at(-1), runDir, "the run directory is the last line of output");
    const metrics = readMetrics(join(runDir, "metrics.jsonl"));
    t.deepEqual(
      metrics.map((m) => m.step),
      [0, 1, 2],
      "step 0 holds the validation before training, then one object per step",
    );
    t.true("val/val/acc" in metrics[0]! && "val/val_b/acc" in metrics[0]! && "val/acc" in metrics[0]!);
    for (const key of [
      "actor/pg_loss",
      "actor/pg_clipfrac",
      "actor/ppo_kl",
      "actor/entropy",
      "actor/grad_norm",
      "actor/lr",
      "critic/score/mean",
      "critic/rewards/mean",
      "critic/advantages/mean",
      "response_length/mean",
      "prompt_length/mean",
      "global_seqlen/balanced_max",
      "global_seqlen/max",
      "tool/code_ratio",
      "tool/pass_ratio",
      "tool/effective_code_ratio",
      "timing_s/gen",
      "timing_s/reward",
      "timing_s/old_log_prob",
      "timing_s/adv",
      "timing_s/update_actor",
      "timing_s/step",
    ]) {
      t.true(key in metrics[1]!, `step 1 has ${key}`);
      t.true(Number.isFinite(metrics[1]![key]), `${key} is a number`);
    }
    t.false("timing_s/ref" in metrics[1]!, "no KL term: the reference log-probs are skipped");
    t.true("val/acc" in metrics[2]! && "timing_s/testing" in metrics[2]!, "validation at step test_freq");
    t.true(metrics[1]!["tool/code_ratio"]! > 0, "the tool was called");
    // cosine schedule without warmup: full lr at step 1, lower at step 2
    t.is(metrics[1]!["actor/lr"], 1e-2);
    t.true(metrics[2]!["actor/lr"]! < 1e-2);
    const onDisk = JSON.parse(readFileSync(join(runDir, "summary.json"), "utf8"));
    t.deepEqual(onDisk, summary);
    t.is(summary.steps, 2);
    t.is(summary.num_llm_calls_available, 1);
    for (const k of [
      "val_acc_initial",
      "val_acc_final",
      "code_ratio_initial",
      "code_ratio_final",
      "pass_ratio_final",
    ] as const) {
      const v = summary[k];
      t.true(typeof v === "number" && v >= 0 && v <= 1, `${k} = ${v} is a fraction`);
    }
    t.true(summary.wall_seconds > 0);
    t.true(
      existsSync(join(ckptDir, "global_step_2", "actor", "rank_1.bin")),
      "checkpoint shards of both ranks",
    );
    t.is(readFileSync(join(ckptDir, "latest_checkpointed_iteration.txt"), "utf8"), "2");
  },
);

test.serial(
  "adv_estimator=gae runs the critic in the actor's processes: values, GAE, critic_warmup, checkpoint and resume",
  async (t) => {
    await init({ numCpus: 6 });
    t.teardown(() => shutdown());
    const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
    const runsDir = mkdtempSync(join(tmpdir(), "torl-runs-"));
    const gae = (steps: number) =>
      tinyConfig({
        modelPath,
        ckptDir,
        workers: 2,
        steps,
        saveFreq: 2,
        extra: [
          "algorithm.adv_estimator=gae",
          "algorithm.lam=0.95",
          "trainer.critic_warmup=2",
          "critic.ppo_micro_batch_size_per_gpu=2",
          "critic.optim.lr=1e-3",
        ],
      });
    const options = {
      trainRows: rows(8),
      valRows: [],
      reward: vowelReward,
      runsDir,
      workerEnv: { TORL_BACKEND: "cpu" },
    };
    const first = new RayPPOTrainer(gae(2), { ...options, log: () => {} });
    const summary = await first.fit();
    const metrics = readMetrics(join(summary.run_dir, "metrics.jsonl"));
    const [s1, s2] = [metrics.find((m) => m.step === 1)!, metrics.find((m) => m.step === 2)!];
    for (const key of [
      "critic/vf_loss",
      "critic/vf_clipfrac",
      "critic/vpred_mean",
      "critic/grad_norm",
      "critic/lr",
      "critic/values/mean",
      "critic/vf_explained_var",
      "critic/returns/mean",
      "timing_s/values",
      "timing_s/update_critic",
    ])
      t.true(Number.isFinite(s1[key]) && Number.isFinite(s2[key]), key);
    // veRL's warmup: the actor is updated from global step critic_warmup on
    t.false("actor/pg_loss" in s1, "step 1: the critic warms up, the actor waits");
    t.true("actor/pg_loss" in s2 && "timing_s/update_actor" in s2, "step 2: both are updated");
    t.is(s1["critic/lr"], 1e-3);
    t.true(
      existsSync(join(ckptDir, "global_step_2", "critic", "rank_1.bin")),
      "critic shards in the checkpoint",
    );

    // resume_mode=auto picks the checkpoint up, critic included, and runs the remaining step
    const lines: string[] = [];
    const second = new RayPPOTrainer(gae(3), {
      ...options,
      runName: "tiny-resumed",
      log: (l) => lines.push(l),
    });
    const resumed = await second.fit();
    t.is(resumed.resumed_from_step, 2);
    t.is(resumed.steps, 3);
    t.true(lines.some((l) => /resumed from .*global_step_2/.test(l)));
    const s3 = readMetrics(join(resumed.run_dir, "metrics.jsonl")).find((m) => m.step === 3)!;
    t.true(Number.isFinite(s3["critic/vf_loss"]) && "actor/pg_loss" in s3);
  },
);
