import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isInitialized } from "@torl-ts/actors";
import test from "ava";
import { TrainerConfigError } from "../../src/config/index.js";
import {
  CustomRewardFunctionError,
  loadCustomRewardFunction,
  RewardManager,
} from "../../src/reward/index.js";
import { RayPPOTrainer } from "../../src/trainer/index.js";
import { rows, tinyConfig } from "../trainer/fixtures/setup.js";
import { tinyModelDir } from "../workers/helpers.js";

const dir = mkdtempSync(join(tmpdir(), "torl-custom-reward-"));
const MODULE = join(dir, "my_reward.mjs");
writeFileSync(
  MODULE,
  `// veRL's signature: data_source, solution_str, ground_truth, extra_info
export function compute_score(data_source, solution_str, ground_truth, extra_info) {
  const hit = solution_str.includes(ground_truth);
  return { score: hit ? 2 : -3, acc: hit, pred: solution_str.slice(-1), seen: [data_source, extra_info?.k] };
}
export const length_score = async (data_source, solution_str) => solution_str.length / 10;
export function broken() { return "high"; }
export const notAFunction = 3;
`,
);

const batch = {
  responses: ["the answer is 7", "no idea"],
  groundTruths: ["7", "7"],
  dataSources: ["aime24", "mine"],
  extraInfos: [{ k: 1 }, { k: 2 }],
};

test("custom_reward_function scores every row with veRL's signature: a number or {score, acc, pred}", async (t) => {
  const builtin = await new RewardManager({ numThreads: 0 }).score(batch);
  t.deepEqual(builtin.scores, [-1, -1], "the built-in scorer wants \\boxed{}");
  const dict = await new RewardManager({
    numThreads: 0,
    customRewardFunction: { path: MODULE, name: "compute_score" },
  }).score(batch);
  t.deepEqual(dict.scores, [2, -3]);
  t.deepEqual(dict.correct, [true, false]);
  t.deepEqual(dict.extracted, ["7", "a"]);
  t.is(dict.metrics["reward/acc"], 0.5);
  const num = await new RewardManager({
    numThreads: 0,
    customRewardFunction: { path: MODULE, name: "length_score" },
  }).score(batch);
  t.deepEqual(num.scores, [1.5, 0.7]);
  t.deepEqual(num.correct, [true, true], "without acc, a score above 0 counts as correct");
  await t.throwsAsync(
    new RewardManager({ numThreads: 0, customRewardFunction: { path: MODULE, name: "broken" } }).score(batch),
    { instanceOf: CustomRewardFunctionError, message: /broken in .* returned "high"; expected a number/ },
  );
});

test("a missing module or export is refused, naming the key, the module and its functions", async (t) => {
  const noFile = await t.throwsAsync(loadCustomRewardFunction({ path: join(dir, "nope.mjs"), name: "f" }), {
    instanceOf: CustomRewardFunctionError,
  });
  t.regex(noFile!.message, /^custom_reward_function\.path: .*nope\.mjs does not exist/);
  const noExport = await t.throwsAsync(loadCustomRewardFunction({ path: MODULE, name: "notAFunction" }), {
    instanceOf: CustomRewardFunctionError,
  });
  t.regex(noExport!.message, /^custom_reward_function\.name: .* has no function export "notAFunction"/);
  t.regex(noExport!.message, /its functions: broken, compute_score, length_score/);
});

test.serial(
  "the trainer refuses a missing reward module or export before the runtime or any worker starts",
  async (t) => {
    const modelPath = tinyModelDir(11);
    const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
    const missing = tinyConfig({
      modelPath,
      ckptDir,
      extra: [`custom_reward_function.path=${join(dir, "x.ts")}`],
    });
    const e = t.throws(() => new RayPPOTrainer(missing, { trainRows: rows(8) }), {
      instanceOf: TrainerConfigError,
    });
    t.regex(e!.message, /custom_reward_function\.path names .*x\.ts, which does not exist/);
    const noExport = tinyConfig({
      modelPath,
      ckptDir,
      extra: [`custom_reward_function.path=${MODULE}`, "custom_reward_function.name=score_it"],
    });
    await t.throwsAsync(new RayPPOTrainer(noExport, { trainRows: rows(8), log: () => {} }).fit(), {
      instanceOf: CustomRewardFunctionError,
      message: /has no function export "score_it"/,
    });
    t.false(isInitialized(), "no runtime, so no worker, was started");
  },
);
