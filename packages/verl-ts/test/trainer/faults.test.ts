import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { RayPPOTrainer, readMetrics, WorkerFailureError } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig, vowelReward } from "./fixtures/setup.js";

test.before(async () => {
  await init({ numCpus: 6 });
});
test.after.always(async () => {
  await shutdown();
});

test("a worker dying mid-step is reported by role, rank, actor and cause; a rerun resumes from the last checkpoint", async (t) => {
  const modelPath = tinyModelDir(9);
  const ckptDir = mkdtempSync(join(tmpdir(), "torl-fault-"));
  const runsDir = mkdtempSync(join(tmpdir(), "torl-fault-runs-"));
  const cfg = tinyConfig({ modelPath, ckptDir, workers: 2, steps: 3, saveFreq: 1 });
  const lines: string[] = [];
  const options = {
    trainRows: rows(8),
    reward: vowelReward,
    runsDir,
    log: (l: string) => lines.push(l),
  };
  // Rank 1 exits with code 7 at the start of its second generateSequences (step 2).
  const failing = new RayPPOTrainer(cfg, {
    ...options,
    workerEnv: { TORL_BACKEND: "cpu", TORL_TEST_EXIT_AT: "generateSequences:2:1:7" },
  });
  const err = await t.throwsAsync(failing.fit(), { instanceOf: WorkerFailureError });
  t.log(err!.message);
  t.is(err!.facts.rank, 1);
  t.is(err!.facts.role, "actor_rollout_ref");
  t.is(err!.facts.method, "generateSequences");
  t.is(err!.facts.step, 2);
  t.true(err!.facts.died);
  t.regex(err!.message, /exit code 7/);
  t.regex(err!.message, /actor [0-9a-zA-Z-]+, pid \d+/);
  t.is(err!.facts.lastCheckpoint, 1);
  t.regex(err!.message, /resume_mode=auto to resume from .*global_step_1/);

  const rerun = new RayPPOTrainer(cfg, { ...options, workerEnv: { TORL_BACKEND: "cpu" } });
  const summary = await rerun.fit();
  t.is(summary.resumed_from_step, 1);
  t.is(summary.steps, 3);
  t.deepEqual(
    readMetrics(join(runsDir, "tiny", "metrics.jsonl")).map((m) => m.step),
    [1, 2, 3],
  );
});

test("a critic dying mid-update is reported with its method, rank and cause (actor and critic share the process)", async (t) => {
  const cfg = tinyConfig({
    modelPath: tinyModelDir(9),
    ckptDir: mkdtempSync(join(tmpdir(), "torl-fault-critic-")),
    workers: 2,
    steps: 2,
    extra: ["algorithm.adv_estimator=gae"],
  });
  const failing = new RayPPOTrainer(cfg, {
    trainRows: rows(8),
    reward: vowelReward,
    runsDir: mkdtempSync(join(tmpdir(), "torl-fault-runs-")),
    log: () => {},
    workerEnv: { TORL_BACKEND: "cpu", TORL_TEST_EXIT_AT: "updateCritic:1:0:5" },
  });
  const err = await t.throwsAsync(failing.fit(), { instanceOf: WorkerFailureError });
  t.log(err!.message);
  t.is(err!.facts.rank, 0);
  t.is(err!.facts.role, "actor_rollout_ref+critic");
  t.is(err!.facts.method, "updateCritic");
  t.is(err!.facts.step, 1);
  t.true(err!.facts.died);
  t.regex(err!.message, /exit code 5/);
});
