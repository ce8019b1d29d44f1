import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isInitialized } from "@torl-ts/actors";
import { exitCodeFor, UsageError } from "@torl-ts/core";
import {
  buildByteBpeTokenizer,
  CODE_INTERPRETER_TOOL_MODULE,
  type CodeInterpreterToolConfig,
  checkTrainerConfig,
  createCodeInterpreterTool,
  createRandomPretrained,
  DataProto,
  type DataProtoWire,
  rolloutToolSpec,
  TrainerConfigError,
} from "@torl-ts/verl";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";
import test from "ava";
import {
  loadRecipeConfig,
  mainCommand,
  RecordingScorer,
  recipeRows,
  recipeSettings,
  runRecipe,
  TINY_CONFIG,
  TinyBaseMissingError,
  toolCallsOf,
  trainCommand,
} from "../src/recipe.js";

test("tiny.yaml loads: tiny data, the committed base, 2 actor ranks, GRPO with C=1", (t) => {
  const cfg = loadRecipeConfig([TINY_CONFIG]);
  t.is(recipeSettings(cfg).data, "tiny");
  t.is(cfg.actor_rollout_ref.model.path, TINY_BASE_DIR);
  t.is(cfg.trainer.n_gpus_per_node, 2);
  t.is(cfg.algorithm.adv_estimator, "grpo");
  t.is(cfg.actor_rollout_ref.rollout.num_llm_calls_available, 1);
  t.is(cfg.actor_rollout_ref.actor.mask_tool_output, true);
  t.is(cfg.data.execution_error_penalty, false);
  t.is(cfg.trainer.resume_mode, "disable", "every main-job run starts fresh");
});

test("the ablations are config overrides alone: C, execution penalty, observation mask", (t) => {
  for (const c of [0, 1, 2]) {
    const cfg = loadRecipeConfig([TINY_CONFIG], [`actor_rollout_ref.rollout.num_llm_calls_available=${c}`]);
    t.is(cfg.actor_rollout_ref.rollout.num_llm_calls_available, c);
  }
  const cfg = loadRecipeConfig(
    [TINY_CONFIG],
    ["data.execution_error_penalty=true", "actor_rollout_ref.actor.mask_tool_output=false"],
  );
  t.true(cfg.data.execution_error_penalty);
  t.false(cfg.actor_rollout_ref.actor.mask_tool_output);
  const e = t.throws(() => loadRecipeConfig([TINY_CONFIG], ["actor_rollout_ref.rollout.num_llm_calls=2"]), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e!.message, /unknown key "actor_rollout_ref\.rollout\.num_llm_calls"/, "a misspelt key is named");
  t.throws(() => loadRecipeConfig([TINY_CONFIG], ["torl.data=parquet"]), { instanceOf: TrainerConfigError });
});

const TEST_PARQUET = new URL(
  "../../../packages/verl-ts/test/fixtures/core/torl-test.parquet",
  import.meta.url,
).pathname;

test("data.train_files / val_files on the command line win over the tiny recipe's generated data", async (t) => {
  const notes: string[] = [];
  const cfg = loadRecipeConfig(
    [TINY_CONFIG],
    [`data.train_files=${TEST_PARQUET}`, `data.val_files=${TEST_PARQUET}`, "torl.max_val_rows=null"],
    notes,
  );
  t.is(recipeSettings(cfg).data, "files");
  t.regex(notes.join("\n"), /the files are used \(torl\.data=files\)/);
  const { train, val } = await recipeRows(cfg);
  const sources = new Set(train.map((r) => r.data_source));
  t.true(sources.has("aime24"), [...sources].join(", "));
  t.is(train.length, val.length, "both splits come from the one file given");
  // the train file alone wins too; without files the tiny data stays
  const back = loadRecipeConfig([TINY_CONFIG], [`data.train_files=${TEST_PARQUET}`], []);
  t.is(recipeSettings(back).data, "files");
  t.is(recipeSettings(loadRecipeConfig([TINY_CONFIG], [])).data, "tiny");
  // one source that says both is refused, naming both keys
  const e = t.throws(
    () => loadRecipeConfig([TINY_CONFIG], ["torl.data=tiny", `data.train_files=${TEST_PARQUET}`]),
    { instanceOf: TrainerConfigError },
  );
  t.regex(e!.message, /sets both torl\.data=tiny and data\.train_files: choose one/);
});

test("the recipe's tool is the trainer's: the code interpreter of every rollout.tool key, none with C = 0", async (t) => {
  const cfg = loadRecipeConfig(
    [TINY_CONFIG],
    ["actor_rollout_ref.rollout.tool.stop=<run>", "actor_rollout_ref.rollout.tool.max_observation_chars=20"],
  );
  const spec = rolloutToolSpec(cfg)!;
  t.is(spec.module, CODE_INTERPRETER_TOOL_MODULE);
  t.like(spec.args![0], {
    stop: "<run>",
    max_observation_chars: 20,
    run_timeout: 5,
    memory_limit_mb: 512,
    sandbox_actors: 1,
    sandbox_workers: 2,
  });
  // the same settings build the tool (an external server URL, so nothing starts)
  const tool = await createCodeInterpreterTool({
    ...(spec.args![0] as CodeInterpreterToolConfig),
    sandbox_url: "http://127.0.0.1:9",
  });
  t.deepEqual(tool.stop, ["<run>"]);
  t.like(tool.options, { maxObservationChars: 20, runTimeout: 5, memoryLimitMb: 512 });
  t.is(
    rolloutToolSpec(loadRecipeConfig([TINY_CONFIG], ["actor_rollout_ref.rollout.num_llm_calls_available=0"])),
    null,
  );
});

test("toolCallsOf reads the tool's calls from a response: code, observation, range, success", (t) => {
  const r =
    "Compute.\n```python\nprint(12*34)\n```\n```output\n408\n```\nAgain.\n```python\nprint(1/0)\n```\n" +
    "```output\nZeroDivisionError: division by zero\n```\nSo \\boxed{408}.\n```output\nfake\n```\n";
  const two = toolCallsOf(r, 2, false);
  t.is(two.length, 2);
  t.is(two[0]!.code, "print(12*34)\n");
  t.is(two[0]!.observation, "408");
  t.true(two[0]!.success);
  t.is(r.slice(two[0]!.range[0], two[0]!.range[1]), "```output\n408\n```\n");
  t.is(two[1]!.code, "print(1/0)\n");
  t.false(two[1]!.success);
  const one = toolCallsOf(r, 1, true);
  t.is(one.length, 1, "blocks after the call budget are the model's own text");
  t.deepEqual(toolCallsOf("no code here", 0, true), []);
});

/** A batch as the trainer sends it to the reward: response text, ground truth, split, tool columns. */
function rewardBatch(split: "train" | "val", n: number): DataProtoWire {
  return DataProto.fromDict(
    {
      response_mask: { data: new Uint8Array(n * 4).fill(1), shape: [n, 4] },
      num_tool_calls: { data: Int32Array.from({ length: n }, (_, i) => i % 2), shape: [n] },
      execution_passes: { data: new Int32Array(n).fill(1), shape: [n] },
    },
    {
      response_text: Array.from({ length: n }, (_, i) =>
        i % 2
          ? `x\n\`\`\`python\nprint(${i})\n\`\`\`\n\`\`\`output\n${i}\n\`\`\`\n\\boxed{${i}}`
          : `\\boxed{${i}}`,
      ),
      data_source: Array.from({ length: n }, () => "tiny/product"),
      reward_model: Array.from({ length: n }, (_, i) => ({ ground_truth: String(i) })),
      extra_info: Array.from({ length: n }, (_, i) => ({ split, question: `q${i}` })),
    },
  ).toWire();
}

test("RecordingScorer passes the reward through and writes samples with their step and split", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-samples-"));
  const inner = {
    scoreDataProto(wire: DataProtoWire) {
      const n = DataProto.fromWire(wire).length;
      return DataProto.fromDict(
        { token_level_scores: { data: new Float32Array(n * 4), shape: [n, 4] } },
        {
          score: Array.from({ length: n }, () => 1),
          acc: Array.from({ length: n }, () => true),
          extracted_answer: Array.from({ length: n }, (_, i) => String(i)),
        },
      ).toWire();
    },
  };
  const rec = new RecordingScorer(inner, dir, 2, 3);
  const out = (await rec.scoreDataProto(rewardBatch("val", 4))) as DataProtoWire;
  t.is(DataProto.fromWire(out).length, 4, "the inner scorer's answer comes back unchanged");
  await rec.scoreDataProto(rewardBatch("train", 8)); // step 1's rollouts
  await rec.scoreDataProto(rewardBatch("val", 4)); // validation at step 1
  rec.stepDone(1);
  await rec.scoreDataProto(rewardBatch("train", 8)); // step 2
  rec.stepDone(2);
  const lines = readFileSync(join(dir, "samples.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.deepEqual(
    lines.map((l) => `${l.split}@${l.step}`),
    ["val@0", "val@0", "val@0", "train@1", "train@1", "val@1", "val@1", "val@1", "train@2", "train@2"],
  );
  const withCode = lines.find((l) => l.num_tool_calls === 1)!;
  t.is(withCode.tool_calls.length, 1);
  t.deepEqual(withCode.observation_ranges, [withCode.tool_calls[0].range]);
  t.is(withCode.prompt, `q${withCode.ground_truth}`);
  t.true(lines.every((l) => l.correct === true && l.score === 1 && typeof l.response === "string"));
});

test.serial("a missing tiny base model stops at once, telling how to make it", async (t) => {
  const missing = join(tmpdir(), "no-such-base");
  const e = await t.throwsAsync(mainCommand.run([`actor_rollout_ref.model.path=${missing}`]), {
    instanceOf: TinyBaseMissingError,
  });
  t.is(exitCodeFor(e), 2, "the CLI prints it as one error line, exit 2");
  t.regex(e!.message, /tiny base model is missing.*pnpm torl pretrain/s);
  t.false(isInitialized());
  const cfg = loadRecipeConfig([TINY_CONFIG], [`actor_rollout_ref.model.path=${missing}`]);
  await t.throwsAsync(runRecipe(cfg), { instanceOf: TinyBaseMissingError });
});

test.serial("a bad config stops before the runtime starts, naming the key", async (t) => {
  const model = mkdtempSync(join(tmpdir(), "torl-recipe-model-"));
  createRandomPretrained(model, buildByteBpeTokenizer(), { hiddenSize: 8, numHiddenLayers: 1 }).dispose();
  const e = await t.throwsAsync(
    mainCommand.run([
      `actor_rollout_ref.model.path=${model}`,
      "actor_rollout_ref.actor.ppo_mini_batch_size=3",
      "data.train_batch_size=16",
    ]),
    { instanceOf: TrainerConfigError },
  );
  t.is(exitCodeFor(e), 2);
  t.regex(e!.message, /ppo_mini_batch_size \(3\) must divide data\.train_batch_size \(16\)/);
  t.false(isInitialized(), "no runtime, no actor");
  const unknown = await t.throwsAsync(mainCommand.run(["trainer.total_trainig_steps=3"]), {
    instanceOf: TrainerConfigError,
  });
  t.regex(unknown!.message, /unknown key "trainer\.total_trainig_steps"/);
});

test("bad command lines are usage errors", async (t) => {
  await t.throwsAsync(mainCommand.run(["tiny.yaml"]), { instanceOf: UsageError });
  await t.throwsAsync(trainCommand.run(["trainer.total_training_steps=1"]), { instanceOf: UsageError });
  await t.throwsAsync(trainCommand.run(["no-such-config.yaml"]), { instanceOf: UsageError });
  await t.throwsAsync(trainCommand.run([TINY_CONFIG, "--runs-dir"]), { instanceOf: UsageError });
  await t.throwsAsync(trainCommand.run([TINY_CONFIG, "--steps", "2"]), { instanceOf: UsageError });
});

test("the shipped configs pass the checker; a bad one stops before the data is made, every problem once", async (t) => {
  t.deepEqual(checkTrainerConfig(loadRecipeConfig([TINY_CONFIG])), []);
  // keys that follow the recipe's own choices (the tiny base model, the mini-batch) follow them
  const small = loadRecipeConfig([TINY_CONFIG], ["data.train_batch_size=8", "algorithm.adv_estimator=gae"]);
  t.is(small.critic.ppo_mini_batch_size, 8);
  t.is(small.critic.model.tokenizer_path, TINY_BASE_DIR);
  t.deepEqual(checkTrainerConfig(small), []);
  const lines: string[] = [];
  const cfg = loadRecipeConfig(
    [TINY_CONFIG],
    [
      "trainer.total_training_steps=-5",
      "actor_rollout_ref.rollout.top_p=1.5",
      "actor_rollout_ref.rollout.dtype=bfloat16",
    ],
  );
  const e = await t.throwsAsync(runRecipe(cfg, { log: (l) => lines.push(l) }), {
    instanceOf: TrainerConfigError,
  });
  t.deepEqual(e!.issues.map((i) => i.key).sort(), [
    "actor_rollout_ref.rollout.dtype",
    "actor_rollout_ref.rollout.top_p",
    "trainer.total_training_steps",
  ]);
  t.deepEqual(lines, [], "nothing ran: no data made, no run started");
  t.false(isInitialized());
});
