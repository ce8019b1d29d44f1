// TrainerOptions.reward is checked when the trainer is made and its answer when it comes back; a reward
// that never answers fails the step within reward_model.score_timeout; a policy loss that is not finite
// in every update of a step stops the run.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { RewardScoreTimeoutError, registerRewardScorer } from "../../src/reward/index.js";
import { RayPPOTrainer, type RewardScorerLike } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig, vowelReward } from "./fixtures/setup.js";

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

const NAN_LOSS = fileURLToPath(new URL("./fixtures/nan-loss.ts", import.meta.url));

function trainer(reward: RewardScorerLike | undefined, extra: string[] = []) {
  const cfg = tinyConfig({
    modelPath: tinyModelDir(),
    ckptDir: mkdtempSync(join(tmpdir(), "torl-reward-ckpt-")),
    steps: 1,
    extra: ["trainer.val_before_train=false", ...extra],
  });
  return new RayPPOTrainer(cfg, {
    trainRows: rows(4),
    valRows: [],
    reward,
    runsDir: mkdtempSync(join(tmpdir(), "torl-reward-runs-")),
    log: () => {},
  });
}

test("TrainerOptions.reward without a scoreDataProto function is refused when the trainer is made", (t) => {
  for (const reward of [{}, { scoreDataProto: 5 }, null, 5])
    t.throws(() => trainer(reward as unknown as RewardScorerLike), {
      message: /TrainerOptions\.reward must be an object with a scoreDataProto\(batch\) method/,
    });
});

test.serial(
  "TrainerOptions.reward's answer is checked: not a DataProto, or the batch it was given, is refused by name",
  async (t) => {
    const answers: [RewardScorerLike, RegExp][] = [
      [{ scoreDataProto: () => 42 as never }, /TrainerOptions\.reward: scoreDataProto returned 42/],
      [
        { scoreDataProto: (wire) => wire },
        /TrainerOptions\.reward: scoreDataProto returned no token_level_scores/,
      ],
    ];
    for (const [reward, message] of answers) {
      const run = trainer(reward);
      try {
        await t.throwsAsync(run.fit(), { message });
      } finally {
        await run.close?.();
      }
    }
  },
);

test.serial(
  "a TrainerOptions.reward that never answers fails the step within reward_model.score_timeout",
  async (t) => {
    const run = trainer({ scoreDataProto: () => new Promise(() => {}) }, ["reward_model.score_timeout=0.5"]);
    try {
      const err = await t.throwsAsync(run.fit(), { instanceOf: RewardScoreTimeoutError });
      t.regex(
        err!.message,
        /TrainerOptions\.reward\.scoreDataProto .*data sources: "toy_?b?", "toy_?b?"\) within 0\.5 s; raise reward_model\.score_timeout/,
      );
    } finally {
      await run.close?.();
    }
  },
);

test.serial(
  "a policy loss that is NaN in every update of a step stops the run, naming loss_mode",
  async (t) => {
    const run = trainer(vowelReward, [
      `actor_rollout_ref.model.external_lib=${NAN_LOSS}`,
      "actor_rollout_ref.actor.policy_loss.loss_mode=nan_loss_fixture",
    ]);
    try {
      const err = await t.throwsAsync(run.fit());
      t.regex(
        err!.message,
        /every optimizer step of this update was skipped: the policy loss "nan_loss_fixture" \(actor_rollout_ref\.actor\.policy_loss\.loss_mode\) gave pg_loss = NaN/,
      );
    } finally {
      await run.close?.();
    }
  },
);

test.serial("the stock reward bounds a registered scorer by reward_model.score_timeout", async (t) => {
  const remove = registerRewardScorer(/^toy/, () => new Promise(() => {}));
  const run = trainer(undefined, ["reward_model.score_timeout=0.5"]);
  try {
    const err = await t.throwsAsync(run.fit(), { instanceOf: RewardScoreTimeoutError });
    t.regex(
      err!.message,
      /registerRewardScorer\(\/\^toy\/\) did not finish scoring row \d+ \(data source "toy(_b)?"\) within 0\.5 s/,
    );
  } finally {
    remove();
  }
});
