import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "@torl-ts/core";
import { buildByteBpeTokenizer, createRandomPretrained } from "@torl-ts/verl";
import test from "ava";
import { ArgsError, parseArgs, rlooAdvantages, type ToolChoice, train } from "../src/rloo.js";
import { extractAnswer, REWARDS, type RewardName, type TaskName, UnknownRewardError } from "../src/task.js";

function tinyRandomModel(): string {
  const dir = mkdtempSync(join(tmpdir(), "rloo-model-"));
  createRandomPretrained(
    dir,
    buildByteBpeTokenizer(),
    { hiddenSize: 32, numHiddenLayers: 2, numAttentionHeads: 4, numKeyValueHeads: 2, intermediateSize: 64 },
    { seed: 5, std: 0.1 },
  );
  return dir;
}

test("RLOO advantages subtract the mean of the other samples of the same prompt", (t) => {
  const adv = rlooAdvantages(Float32Array.from([1, 0, 0, 1, 1, 1]), 3);
  t.deepEqual(
    Array.from(adv, (x) => Math.round(x * 1000) / 1000),
    [1, -0.5, -0.5, 0, 0, 0],
  );
});

test("the exact-match reward takes the last boxed answer, else the last integer", (t) => {
  const noTool = { hadCode: false, passed: true };
  t.is(extractAnswer("so \\boxed{12} no \\boxed{{3}4}"), "{3}4");
  t.is(extractAnswer("it is 7 or 42"), "42");
  t.is(extractAnswer("no idea"), null);
  t.is(REWARDS.exact_match("the answer is \\boxed{56}", "56", noTool), 1);
  t.is(REWARDS.exact_match("the answer is \\boxed{57}", "56", noTool), 0);
});

test("the verifier rewards: ToRL's +1 / -1, and the execution penalty only for code that failed", (t) => {
  const ran = (passed: boolean) => ({ hadCode: true, passed });
  const noCode = { hadCode: false, passed: true };
  t.is(REWARDS.verifier("so \\boxed{\\frac{12}{2}}", "6", noCode), 1, "equivalent, not equal text");
  t.is(REWARDS.verifier("so \\boxed{7}", "6", ran(false)), -1);
  t.is(REWARDS.verifier_exec_penalty("so \\boxed{6}", "6", ran(false)), 0.5);
  t.is(REWARDS.verifier_exec_penalty("so \\boxed{6}", "6", ran(true)), 1);
  t.is(REWARDS.verifier_exec_penalty("no answer", "6", noCode), -1);
});

test("bad arguments are named before any actor starts", async (t) => {
  await t.throwsAsync(train({ samplesPerPrompt: 1 }), { instanceOf: ArgsError, message: /samplesPerPrompt/ });
  await t.throwsAsync(train({ modelDir: "/nonexistent" }), {
    instanceOf: ArgsError,
    message: /no config\.json/,
  });
  await t.throwsAsync(train({ modelDir: tinyRandomModel(), reward: "nope" as RewardName }), {
    instanceOf: UnknownRewardError,
  });
  await t.throwsAsync(train({ task: "nope" as TaskName }), {
    instanceOf: ArgsError,
    message: /task must be one of arithmetic, tiny/,
  });
  await t.throwsAsync(train({ tool: "nope" as ToolChoice }), {
    instanceOf: ArgsError,
    message: /tool must be one of none, python/,
  });
  t.throws(() => parseArgs(["--stepz", "3"]), { instanceOf: UsageError, message: /unknown flag --stepz/ });
  t.throws(() => parseArgs(["--steps", "many"]), {
    instanceOf: UsageError,
    message: /--steps must be a number/,
  });
  t.deepEqual(parseArgs(["--steps", "3", "--reward", "digit_fraction", "--learning-rate=1e-6"]), {
    steps: 3,
    reward: "digit_fraction",
    learningRate: 1e-6,
  });
});

test("two replicas train for two steps: metrics written, weights changed and still identical", async (t) => {
  const runDir = mkdtempSync(join(tmpdir(), "rloo-run-"));
  const lines: string[] = [];
  const summary = await train(
    {
      modelDir: tinyRandomModel(),
      replicas: 2,
      steps: 2,
      promptsPerStep: 2,
      samplesPerPrompt: 4,
      maxNewTokens: 8,
      learningRate: 1e-2,
      reward: "digit_fraction",
      template: "chat",
      backend: "cpu",
      runDir,
    },
    (l) => lines.push(l),
  );
  t.log(lines.join("\n"));
  const metrics = readFileSync(join(runDir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, number>);
  t.deepEqual(
    metrics.map((m) => m.step),
    [1, 2],
  );
  for (const m of metrics)
    for (const key of [
      "charts/reward_mean",
      "charts/exact_match",
      "losses/policy_loss",
      "losses/grad_norm",
      "perf/step_s",
    ])
      t.true(Number.isFinite(m[key]), `${key} = ${m[key]}`);
  t.true(
    metrics.some((m) => m["losses/advantage_abs_mean"]! > 0),
    "some group had different rewards",
  );
  t.true(
    metrics.some((m) => m["losses/grad_norm"]! > 0),
    "a gradient flowed",
  );
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const documented = new Set([...readme.matchAll(/^\|\s*`([^`]+)`\s*\|/gm)].map((m) => m[1]!));
  t.deepEqual(
    Object.keys(metrics[0]!).filter((k) => !documented.has(k)),
    [],
    "every metric is listed in the README",
  );
  const [after0, after1] = summary.fingerprintsAfter;
  t.notDeepEqual(after0, summary.fingerprintBefore, "the update changed the weights");
  t.deepEqual(after0, after1, "the all-reduce kept both replicas identical");
});
