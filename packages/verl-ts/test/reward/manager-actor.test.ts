import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import {
  customRewardModuleUrl,
  DataProto,
  type DataProtoWire,
  RewardManager,
  RewardManagerActor,
} from "@torl-ts/verl";
import test from "ava";

const SCORER_MODULE = new URL("../fixtures/reward/custom-scorer.ts", import.meta.url).href;

/** Two prompts' worth of rows: prompt tokens (P=2) then response tokens (L=4), right-padded. */
function batch(): DataProto {
  const attention = new Int32Array([1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0]);
  return DataProto.fromDict(
    {
      responses: { data: new Int32Array(12), shape: [3, 4] },
      attention_mask: { data: attention, shape: [3, 6] },
      execution_passes: { data: new Float32Array([0, 1, 1]), shape: [3] },
    },
    {
      response_text: ["\\boxed{2}", "\\boxed{3}", "hello"],
      reward_model: [{ ground_truth: "2" }, { ground_truth: "2" }, { ground_truth: "x" }],
      data_source: ["aime24", "math500", "echo_len"],
    },
  );
}

test("scoreDataProto: reward on the last response token, veRL keys, execution penalty on failed code", async (t) => {
  const m = new RewardManager({ numThreads: 0, executionErrorPenalty: true, scorerModules: [SCORER_MODULE] });
  const out = (await m.scoreDataProto(batch())) as DataProto;
  t.deepEqual(out.nonTensorBatch.score, [0.5, -1, 5]);
  t.deepEqual(out.nonTensorBatch.acc, [true, false, true]);
  t.deepEqual(out.nonTensorBatch.extracted_answer, ["2", "3", null]);
  const scores = out.batch.token_level_scores!;
  t.deepEqual(scores.shape, [3, 4]);
  // Row 0: response mask 1,1,1,0 -> index 2; row 1: 1,1,1,1 -> 3; row 2: left-padded prompt, empty response -> none.
  t.deepEqual(Array.from(scores.data as Float32Array), [0, 0, 0.5, 0, 0, 0, 0, -1, 0, 0, 0, 0]);
  t.is((out.metaInfo.reward_metrics as Record<string, number>)["reward/aime24/acc"], 1);
});

test("the reward manager runs as an actor and takes DataProto's wire form", async (t) => {
  await init({ numCpus: 2 });
  try {
    const rm = RewardManagerActor.remote({ numThreads: 0, scorerModules: [SCORER_MODULE] });
    await rm.ready();
    const out = (await rm.scoreDataProto(batch().toWire())) as DataProtoWire;
    const back = DataProto.fromWire(out);
    t.deepEqual(back.nonTensorBatch.score, [1, -1, 5]);
    t.deepEqual(
      Array.from(back.batch.token_level_scores!.data as Float32Array),
      [0, 0, 1, 0, 0, 0, 0, -1, 0, 0, 0, 0],
    );
    const plain = await rm.score({ responses: ["\\boxed{(3,4]}"], groundTruths: ["[3,4]"] });
    t.deepEqual(plain.scores, [-1]);
    // custom_reward_function reaches the actor's process as a module URL and scores every row there
    const dir = mkdtempSync(join(tmpdir(), "torl-rm-actor-"));
    const module = join(dir, "score.mjs");
    writeFileSync(module, "export const compute_score = (ds, s, gt) => (s.includes(gt) ? 3 : -3);\n");
    const own = RewardManagerActor.remote({
      numThreads: 0,
      customRewardFunction: { path: customRewardModuleUrl(module), name: "compute_score" },
    });
    await own.loaded();
    const mine = DataProto.fromWire((await own.scoreDataProto(batch().toWire())) as DataProtoWire);
    t.deepEqual(mine.nonTensorBatch.score, [3, -3, -3]);
  } finally {
    await shutdown();
  }
});
