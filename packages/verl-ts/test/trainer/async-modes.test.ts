/**
 * trainer.mode one_step_off and fully_async (AsyncPPOTrainer) on a tiny model: the one-step lag against
 * the sync trainer, the weight updates of the rollout workers, the queue's bound and the staleness bound,
 * veRL's rollout IS correction in a run, and a rollout worker killed mid-run.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { checkTrainerConfig } from "../../src/config/index.js";
import { type AsyncPPOTrainer, createTrainer, type RayPPOTrainer } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig, vowelReward } from "./fixtures/setup.js";

const modelPath = tinyModelDir(13);

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

type Metrics = Record<string, number>;

async function run(
  extra: string[],
  o: {
    steps?: number;
    env?: Record<string, string>;
    onStep?: (trainer: RayPPOTrainer, step: number) => Promise<void>;
  } = {},
): Promise<Metrics[]> {
  const cfg = tinyConfig({
    modelPath,
    ckptDir: mkdtempSync(join(tmpdir(), "torl-ckpt-")),
    steps: o.steps ?? 3,
    extra: ["trainer.val_before_train=false", ...extra],
  });
  const steps: Metrics[] = [];
  const trainer: RayPPOTrainer = createTrainer(cfg, {
    trainRows: rows(16),
    valRows: [],
    reward: vowelReward,
    runsDir: mkdtempSync(join(tmpdir(), "torl-runs-")),
    workerEnv: { TORL_BACKEND: "cpu", ...o.env },
    log: () => {},
    onStep: async (step, m) => {
      steps.push({ ...m });
      await o.onStep?.(trainer, step);
    },
  });
  await trainer.fit();
  return steps;
}

/** The metrics that describe the data and the update (not timing, throughput or the async bookkeeping). */
function numbers(m: Metrics): Metrics {
  return Object.fromEntries(
    Object.entries(m).filter(([k]) => !/^(timing_s|timing_per_token_ms|perf|async)\//.test(k)),
  );
}

test.serial("one_step_off with a learning rate of 0 equals the sync run, step for step", async (t) => {
  const frozen = "actor_rollout_ref.actor.optim.lr=0";
  const sync = await run([frozen]);
  const off = await run([frozen, "trainer.mode=one_step_off"]);
  t.is(off.length, 3);
  // the same prompts, seeds and (unchanged) weights: the one-step lag makes no difference
  t.deepEqual(off.map(numbers), sync.map(numbers));
  t.deepEqual(
    off.map((m) => m["async/staleness"]),
    [0, 1, 1],
  );
});

test.serial(
  "one_step_off: batch t+1 is made by the weights of update t-1; after each update the rollout workers hold the actor's weights",
  async (t) => {
    const sync = await run([]);
    const same: boolean[] = [];
    const off = await run(["trainer.mode=one_step_off"], {
      steps: 4,
      onStep: async (trainer, step) => {
        // after step t < 4 the actor's weights went to the rollout workers (sharded, over the collective group)
        if (step === 4) return;
        const a = trainer as AsyncPPOTrainer;
        const [actor] = (await a.actorRolloutWg.gatheredParameters()) as Float32Array[];
        const [rollout] = (await a.rolloutGroup.gatheredParameters()) as Float32Array[];
        same.push(actor!.length === rollout!.length && actor!.every((v, i) => v === rollout![i]));
      },
    });
    t.deepEqual(same, [true, true, true]);
    // step 1 is on-policy in both modes: the same batch, the same update
    t.deepEqual(numbers(off[0]!), numbers(sync[0]!));
    // later batches come from the weights one update behind the actor's
    t.deepEqual(
      off.map((m) => [m["async/rollout_version"], m["async/staleness"]]),
      [
        [0, 0],
        [0, 1],
        [1, 1],
        [2, 1],
      ],
    );
    t.notDeepEqual(numbers(off[1]!), numbers(sync[1]!), "step 2 trains on older responses than sync's");
    t.true(off.every((m) => m["async/queue_max"]! <= 2));
  },
);

test.serial(
  "fully_async: the queue never holds more than its bound and no batch is staler than the threshold allows",
  async (t) => {
    // capacity ceil((1 + 1) x 2) = 4 steps' worth of prompts (2 groups each: require_batches 1 x
    // ppo_mini_batch_size 2), so 8 groups; staleness at most capacity - 1 = 3 updates
    const steps = await run(
      [
        "trainer.mode=fully_async",
        "async_training.staleness_threshold=1.0",
        "async_training.trigger_parameter_sync_step=2",
      ],
      { steps: 6 },
    );
    t.is(steps.length, 6);
    for (const m of steps) {
      t.is(m["async/queue_capacity"], 8);
      t.true(m["async/queue_max"]! <= 8, `queue ${m["async/queue_max"]}`);
      t.true(m["async/staleness"]! >= 0 && m["async/staleness"]! <= 3, `staleness ${m["async/staleness"]}`);
    }
    // the rollout's weights change only every second step
    t.true(steps.every((m) => m["async/rollout_version"]! % 2 === 0));
  },
);

const fullyAsync = ["trainer.mode=fully_async", "async_training.staleness_threshold=1.0"];

test.serial(
  "partial rollout: a weight update that lands mid-generation gives responses whose tokens span two versions; without it none does",
  async (t) => {
    // capacity 2 steps' worth (2 groups each): the second unit generates while step 1 trains; its
    // generation waits at its third token boundary until the weights of update 1 arrive
    const partial = await run([...fullyAsync, "async_training.partial_rollout=true"], {
      steps: 2,
      env: { TORL_TEST_HOLD_FOR_WEIGHTS: "2:3" },
    });
    t.is(partial[0]!["fully_async/partial/total_partial_num"], 0);
    t.is(partial[0]!["async/rollout_version_max"], 0);
    const m = partial[1]!;
    t.true(m["fully_async/partial/total_partial_num"]! > 0, JSON.stringify(m));
    t.is(m["fully_async/partial/max_partial_span"], 1);
    t.true(m["fully_async/partial/partial_ratio"]! > 0 && m["fully_async/partial/partial_ratio"]! <= 1);
    // begun on the weights of no update, finished on those of update 1: staleness counts the oldest token
    t.is(m["async/rollout_version"], 0);
    t.is(m["async/rollout_version_max"], 1);
    t.is(m["async/staleness"], 1);

    const whole = await run(fullyAsync, { steps: 3 });
    for (const s of whole) {
      t.is(s["fully_async/partial/total_partial_num"], 0);
      t.is(s["fully_async/partial/max_partial_span"], 0);
      t.is(s["async/rollout_version"], s["async/rollout_version_max"]);
    }
  },
);

test.serial(
  "fully_async streams groups as they finish: the trainer gets groups before their unit's generation ends, within the queue's bound",
  async (t) => {
    // two rows decode at a time: a unit's first group (rows 0-1) finishes while the second still generates
    const steps = await run(
      [...fullyAsync, "actor_rollout_ref.rollout.max_num_seqs=2", "algorithm.rollout_is_threshold=2.0"],
      { steps: 3 },
    );
    // the rollout IS correction reads the log-probs the tokens had when sampled: step 1's are fresh
    t.true(Math.abs(steps[0]!["mismatch/mismatch_kl"]!) < 1e-4, String(steps[0]!["mismatch/mismatch_kl"]));
    t.true(
      steps.some((m) => m["async/streamed_early"]! >= 1),
      JSON.stringify(steps.map((m) => m["async/streamed_early"])),
    );
    for (const m of steps) t.true(m["async/queue_max"]! <= m["async/queue_capacity"]!);
  },
);

test.serial(
  "require_batches: a fully_async step trains require_batches x ppo_mini_batch_size prompts",
  async (t) => {
    const rowsPerStep = async (rb: number) => {
      const dir = mkdtempSync(join(tmpdir(), "torl-gens-"));
      await run([...fullyAsync, `async_training.require_batches=${rb}`, `trainer.rollout_data_dir=${dir}`], {
        steps: 2,
      });
      return [1, 2].map(
        (s) =>
          readFileSync(join(dir, `${s}.jsonl`), "utf8")
            .trim()
            .split("\n").length,
      );
    };
    // x rollout.n = 2 responses per prompt
    t.deepEqual(await rowsPerStep(1), [4, 4]);
    t.deepEqual(await rowsPerStep(2), [8, 8]);
  },
);

test.serial("closing a fully_async run while a generation is in flight settles", async (t) => {
  // no weight update before step 3 (trigger 3), and the third unit's generation waits for one at its
  // second token boundary: it is in flight (or queued) when the run is closed after step 2
  let closing: Promise<void> | undefined;
  const err = await t.throwsAsync(
    run(
      [...fullyAsync, "async_training.partial_rollout=true", "async_training.trigger_parameter_sync_step=3"],
      {
        steps: 3,
        env: { TORL_TEST_HOLD_FOR_WEIGHTS: "3:2" },
        onStep: async (trainer, step) => {
          if (step === 2) closing = trainer.close();
        },
      },
    ),
  );
  t.regex(err!.message, /closed/);
  await closing;
});

test.serial("veRL's rollout IS correction: ratio 1 on fresh responses, not on stale ones", async (t) => {
  const steps = await run([
    "trainer.mode=one_step_off",
    "algorithm.rollout_is_threshold=2.0",
    "algorithm.rollout_is=true",
  ]);
  // step 1: the rollout workers generated with the actor's own weights
  t.true(
    Math.abs(steps[0]!["mismatch/rollout_is_mean"]! - 1) < 1e-5,
    String(steps[0]!["mismatch/rollout_is_mean"]),
  );
  t.true(Math.abs(steps[0]!["mismatch/mismatch_kl"]!) < 1e-5);
  // step 2: one update stale
  t.true(Math.abs(steps[1]!["mismatch/mismatch_kl"]!) > 1e-7, String(steps[1]!["mismatch/mismatch_kl"]));
});

test.serial("a killed rollout worker is replaced and the run goes on", async (t) => {
  // the rollout worker exits at its second generation (and so does each replacement)
  const steps = await run(["trainer.mode=one_step_off"], {
    steps: 3,
    env: { TORL_TEST_EXIT_AT: "generateSequences:2:0:9" },
  });
  t.is(steps.length, 3);
  t.true(steps.at(-1)!["async/rollout_restarts"]! >= 1);
});

test("bad combinations are refused naming the key", (t) => {
  const issues = (extra: string[]) =>
    checkTrainerConfig(tinyConfig({ modelPath, ckptDir: "/tmp/x", extra })).map((i) => i.key);
  t.deepEqual(issues(["trainer.mode=one_step_off", "algorithm.adv_estimator=gae"]), [
    "algorithm.adv_estimator",
  ]);
  t.deepEqual(issues(["async_training.staleness_threshold=0.5"]), ["async_training.staleness_threshold"]);
  t.deepEqual(issues(["algorithm.rollout_is_threshold=2.0"]), ["algorithm.rollout_is_threshold"]);
  t.deepEqual(issues(["trainer.mode=one_step_off", "algorithm.rollout_is=true"]), ["algorithm.rollout_is"]);
  t.deepEqual(issues(["trainer.mode=fully_async", "async_training.partial_rollout=true"]), []);
  t.deepEqual(issues(["trainer.mode=one_step_off", "async_training.partial_rollout=true"]), [
    "async_training.partial_rollout",
  ]);
  t.deepEqual(issues(["trainer.mode=one_step_off", "async_training.require_batches=2"]), [
    "async_training.require_batches",
  ]);
  // 3 x ppo_mini_batch_size 2 = 6 prompts per step do not divide data.train_batch_size 4
  t.deepEqual(issues(["trainer.mode=fully_async", "async_training.require_batches=3"]), [
    "async_training.require_batches",
  ]);
  t.deepEqual(issues(["trainer.mode=fully_async", "async_training.require_batches=0"]), [
    "async_training.require_batches",
  ]);
  t.deepEqual(
    issues([
      "trainer.mode=fully_async",
      "async_training.partial_rollout=true",
      "actor_rollout_ref.rollout.multi_turn.enable=true",
    ]).filter((k) => k.startsWith("async")),
    ["async_training.partial_rollout"],
  );
  t.deepEqual(issues(["trainer.mode=fully_async", "async_training.trigger_parameter_sync_step=0"]), [
    "async_training.trigger_parameter_sync_step",
  ]);
  t.deepEqual(issues(["trainer.mode=one_step_off", "algorithm.filter_groups.enable=true"]), [
    "algorithm.filter_groups.enable",
  ]);
  t.deepEqual(issues(["trainer.mode=one_step_off", "actor_rollout_ref.model.lora_rank=8"]), [
    "actor_rollout_ref.model.lora_rank",
  ]);
});
