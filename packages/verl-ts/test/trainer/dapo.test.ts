import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import {
  applyOverlongPenalty,
  DataProto,
  type DataProtoWire,
  DynamicSamplingError,
  exportCheckpoint,
  filterInformativeGroups,
  filterMetricValues,
  loadPretrained,
  OverlongBufferError,
  overlongPenalty,
  RayPPOTrainer,
  type RewardScorerLike,
  readMetrics,
} from "../../src/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig } from "./fixtures/setup.js";

test("dynamic sampling keeps groups whose responses differ and every group of one", (t) => {
  const f = filterInformativeGroups(["a", "a", "b", "b", "c", "d", "d"], [1, 0, 1, 1, 0, 0, 0]);
  t.deepEqual(f.rows, [0, 1, 4]);
  t.deepEqual(f.keptGroups, ["a", "c"]);
  t.is(f.droppedGroups, 2);
  t.deepEqual(filterMetricValues("acc", [true, false, 1, 0], [9, 9, 9, 9]), [1, 0, 1, 0]);
  t.deepEqual(filterMetricValues("score", [true, true], [0.5, -1]), [0.5, -1]);
  const e = new DynamicSamplingError({ numGenBatches: 3, keptPrompts: 5, trainBatchSize: 8, metric: "acc" });
  t.regex(e.message, /3 generation batches gave 5 of 8 prompts.*max_num_gen_batches/);
});

test("overlong penalty by hand: zero up to max - len, then linear to -penalty_factor at the limit", (t) => {
  const b = { len: 4, penaltyFactor: 1, maxResponseLength: 20 };
  t.is(overlongPenalty(10, b), 0);
  t.is(overlongPenalty(16, b), 0);
  t.is(overlongPenalty(18, b), -0.5);
  t.is(overlongPenalty(20, b), -1);
  t.is(overlongPenalty(19, { ...b, penaltyFactor: 2 }), -1.5);
});

test("overlong penalty lands on score and on the score's token; bad settings are refused by key", (t) => {
  const R = 6;
  const mask = {
    data: Uint8Array.from([1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1]),
    shape: [3, R],
  };
  const tls = new Float32Array(3 * R);
  tls[1] = 1;
  tls[R + 4] = 1;
  tls[2 * R + 5] = -1;
  const scored = DataProto.fromDict(
    { token_level_scores: { data: tls, shape: [3, R] } },
    { score: [1, 1, -1], acc: [true, true, false] },
  );
  applyOverlongPenalty(mask, scored, { len: 2, penaltyFactor: 0.5, maxResponseLength: R });
  // lengths 2, 5, 6: expected 4, penalties 0, -0.25, -0.5
  t.deepEqual(scored.column<number>("score"), [1, 0.75, -1.5]);
  t.deepEqual(
    Array.from(scored.tensor("token_level_scores").data as Float32Array).filter((x) => x !== 0),
    [1, 0.75, -1.5],
  );
  t.deepEqual(scored.metaInfo.reward_metrics, {
    "reward/overlong_penalty/mean": -0.25,
    "reward/overlong_ratio": 2 / 3,
  });
  t.throws(() => applyOverlongPenalty(mask, scored, { len: 0, penaltyFactor: 1, maxResponseLength: R }), {
    instanceOf: OverlongBufferError,
    message:
      /reward_model\.overlong_buffer\.len must be an integer in \[1, data\.max_response_length=6\], got 0/,
  });
});

/**
 * A reward whose groups teach or not by design: prompts with an even ground truth get acc false on every
 * response (a group to drop); the others get acc true on the first response of the pair and false on the
 * second (rows of a group are adjacent). score = acc, before the overlong penalty.
 */
const pairReward: RewardScorerLike = {
  scoreDataProto(wire: DataProtoWire) {
    const d = DataProto.fromWire(wire);
    const gt = d.column<{ ground_truth: string }>("reward_model").map((r) => Number(r.ground_truth));
    const mask = d.tensor("response_mask");
    const [B, R] = mask.shape as [number, number];
    const acc = gt.map((g, b) => g % 2 === 1 && b % 2 === 0);
    const tls = new Float32Array(B * R);
    for (let b = 0; b < B; b++) {
      let last = 0;
      for (let i = 0; i < R; i++) if (Number(mask.data[b * R + i])) last = i;
      tls[b * R + last] = acc[b] ? 1 : 0;
    }
    return DataProto.fromDict(
      { token_level_scores: { data: tls, shape: [B, R] } },
      { score: acc.map((a) => (a ? 1 : 0)), acc, extracted_answer: acc.map(() => null) },
    );
  },
};

test.serial(
  "a run with dynamic sampling and overlong shaping: dropped groups, extra rounds, penalised scores",
  async (t) => {
    await init({ numCpus: 2 });
    t.teardown(() => shutdown());
    const modelPath = tinyModelDir(5);
    const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
    const make = (extra: string[]) =>
      tinyConfig({
        modelPath,
        ckptDir,
        steps: 1,
        saveFreq: 1,
        extra: [
          "data.train_batch_size=2",
          "data.shuffle=false",
          "trainer.val_before_train=false",
          "algorithm.filter_groups.enable=true",
          "algorithm.filter_groups.metric=acc",
          "reward_model.overlong_buffer.enable=true",
          "reward_model.overlong_buffer.len=8",
          "reward_model.overlong_buffer.penalty_factor=0.5",
          "trainer.resume_mode=disable",
          ...extra,
        ],
      });
    // ground truths in row order 0, 1, 2, 3, ...: batch 1 = {0: dropped, 1: kept}, batch 2 = {2: dropped, 3: kept}
    const runsDir = mkdtempSync(join(tmpdir(), "torl-runs-"));
    const trainer = new RayPPOTrainer(make([]), {
      trainRows: rows(8),
      reward: pairReward,
      runsDir,
      workerEnv: { TORL_BACKEND: "cpu" },
      log: () => {},
    });
    await trainer.fit();
    const [step] = readMetrics(join(runsDir, "tiny", "metrics.jsonl")).filter((m) => m.step === 1);
    t.is(step!["train/num_gen_batches"], 2);
    t.is(step!["train/num_kept_prompts"], 2);
    t.is(step!["train/num_dropped_prompts"], 2);
    // the kept rows have acc 1, 0, 1, 0; every response is inside the 8-token buffer, so each loses some score
    t.is(step!["reward/overlong_ratio"], 1);
    t.true(step!["critic/score/mean"]! < 0.5 && step!["critic/score/mean"]! >= 0, JSON.stringify(step));

    // the run's checkpoint carries the model's config and tokenizer, so it exports with nothing else
    const out = join(mkdtempSync(join(tmpdir(), "torl-export-")), "hf");
    const exported = exportCheckpoint(ckptDir, { out });
    t.true(exported.actorDir.endsWith(join("global_step_1", "actor")));
    const { model, tokenizer } = loadPretrained(out, { trainable: false });
    t.is(tokenizer.vocabSize, loadPretrained(modelPath, { trainable: false }).tokenizer.vocabSize);
    t.is(model.numParameters(), exported.parameters);
    model.dispose();

    const capped = new RayPPOTrainer(make(["algorithm.filter_groups.max_num_gen_batches=1"]), {
      trainRows: rows(8),
      reward: pairReward,
      runsDir: mkdtempSync(join(tmpdir(), "torl-runs-")),
      workerEnv: { TORL_BACKEND: "cpu" },
      log: () => {},
    });
    await t.throwsAsync(capped.fit(), { message: /1 generation batches gave 1 of 2 prompts/ });
  },
);
