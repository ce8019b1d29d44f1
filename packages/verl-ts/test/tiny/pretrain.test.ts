import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  generateProblems,
  heldOutProblems,
  loadPretrained,
  pretrainExclusions,
  selectBackend,
} from "@torl-ts/verl";
import { extractBoxedAnswer } from "@torl-ts/verl/reward";
import test from "ava";
import { pretrainCommand } from "../../src/cli/pretrain.js";
import { buildCorpus } from "../../src/tiny/corpus.js";
import { pretrainCorpus } from "../../src/tiny/pretrain-corpus.js";
import { type RolloutRecord, tirFigures, tirRollouts } from "../../src/tiny/pretrain-evaluation.js";
import {
  DEFAULT_PRETRAIN,
  type PretrainProgress,
  warmupCosineLearningRate,
} from "../../src/tiny/pretrain-training.js";
import { buildTinyTokenizer, TINY_BASE_DIR, trainingRow } from "../../src/tiny/tiny-model.js";

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("a training row predicts the response and EOS, and writes '```output' but never the observation", (t) => {
  const problems = generateProblems({ count: 60, seed: 4 });
  const docs = buildCorpus(problems, { seed: 9, codeFraction: 1 });
  const tokenizer = buildTinyTokenizer(docs, 400);
  const doc = docs.find((d) => d.style === "code")!;
  const row = trainingRow(tokenizer, doc);
  const predicted = tokenizer.decode(row.ids.filter((_, i) => row.lossMask[i] === 1));
  t.is(row.ids.at(-1), tokenizer.eosTokenId);
  t.is(row.lossMask.at(-1), 1);
  t.true(predicted.startsWith("Let me compute it with Python.\n```python\n"), predicted);
  t.true(predicted.includes("```output"), "the stop string is learned");
  t.false(predicted.includes(`\`\`\`output\n${doc.problem.answer}`), "the printed output is not predicted");
  t.true(predicted.includes(`\\boxed{${doc.problem.answer}}`), "copying the output into the answer is");
  const prompt = tokenizer.decode(row.ids.slice(0, row.lossMask.indexOf(1)));
  t.true(prompt.endsWith(`${doc.problem.question}\nAssistant:\n`), "the prompt carries no loss");
});

test("the pretraining corpus leaves out every hard held-out question of the recipe's split", (t) => {
  const corpus = pretrainCorpus({ ...DEFAULT_PRETRAIN, corpusDocs: 3000 });
  const excluded = pretrainExclusions();
  t.true(excluded.size > 500);
  t.false(corpus.some((d) => excluded.has(d.problem.question)));
  const held = heldOutProblems(200).filter((p) => p.hard);
  t.false(corpus.some((d) => held.some((p) => p.question === d.problem.question)));
  const code = corpus.filter((d) => d.style !== "plain").length / corpus.length;
  t.true(code > 0.35 && code < 0.45, `code share ${code}`);
});

test("the learning rate warms up, peaks, and decays to a tenth", (t) => {
  const o = { lr: 1e-3, warmupSteps: 10, steps: 110 };
  t.true(warmupCosineLearningRate(0, o) < warmupCosineLearningRate(5, o));
  t.is(warmupCosineLearningRate(9, o), 1e-3);
  t.true(warmupCosineLearningRate(60, o) < 1e-3 && warmupCosineLearningRate(60, o) > 1e-4);
  t.true(Math.abs(warmupCosineLearningRate(110, o) - 1e-4) < 1e-12);
});

test("the evaluation's answer is the last \\boxed{} with nested braces", (t) => {
  t.is(extractBoxedAnswer("x \\boxed{1} then \\boxed{\\frac{1}{2}}."), "\\frac{1}{2}");
  t.is(extractBoxedAnswer("no answer"), null);
  t.is(extractBoxedAnswer("\\boxed{12"), null);
});

test("bad flags are usage errors", async (t) => {
  await t.throwsAsync(pretrainCommand.run(["--steps", "zero"]), { name: "UsageError", message: /--steps/ });
  await t.throwsAsync(pretrainCommand.run(["--bogus"]), { name: "UsageError", message: /--bogus/ });
  await t.throwsAsync(pretrainCommand.run(["--hidden", "30", "--heads", "4"]), {
    name: "UsageError",
    message: /--hidden/,
  });
});

test("pretrain writes a loadable HF model directory whose loss went down", async (t) => {
  const out = mkdtempSync(join(tmpdir(), "torl-pretrain-"));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const args = [
    "--out",
    out,
    "--steps",
    "16",
    "--batch-size",
    "8",
    "--lr",
    "1e-2",
    "--warmup",
    "2",
    "--log-every",
    "4",
  ];
  args.push(
    "--corpus-docs",
    "300",
    "--tokenizer-docs",
    "300",
    "--hidden",
    "32",
    "--heads",
    "2",
    "--kv-heads",
    "1",
  );
  args.push("--intermediate", "64", "--vocab", "400", "--eval", "0", "--save-every", "8");
  const lines: string[] = [];
  const log = console.log;
  console.log = (line: string) => lines.push(line);
  try {
    t.is(await pretrainCommand.run(args), 0);
  } finally {
    console.log = log;
  }
  t.true(
    lines.filter((l) => /^\[pretrain\] step \d+\/16 loss [\d.]+ .* tokens\/s/.test(l)).length === 4,
    lines.join("\n"),
  );
  t.is(lines.at(-1), out);
  for (const f of ["config.json", "model.safetensors", "tokenizer.json", "trainer_state.json"])
    t.true(existsSync(join(out, f)), f);
  const state = JSON.parse(readFileSync(join(out, "trainer_state.json"), "utf8")) as PretrainProgress;
  t.is(state.step, 16);
  t.true(state.losses.at(-1)![1] < state.losses[0]![1] - 0.5, JSON.stringify(state.losses));
  const { model, tokenizer } = loadPretrained(out);
  t.is(model.config.hiddenSize, 32);
  t.is(model.config.vocabSize, tokenizer.vocabSize);
  t.is(model.config.eosTokenId, tokenizer.eosTokenId);
  model.dispose();
});

test("the committed tiny base answers held-out problems in the recipe's format, reading the question's numbers", async (t) => {
  const { model, tokenizer } = loadPretrained(TINY_BASE_DIR, { trainable: false });
  t.teardown(() => model.dispose());
  t.true(model.numParameters() < 1_000_000);
  const problems = heldOutProblems(10);
  const records = await tirRollouts(model, tokenizer, problems, { temperature: 0 });
  const shown = JSON.stringify(records.map((r) => [r.problem.question, r.response]));
  for (const r of records) t.regex(r.response, /\\boxed\{-?\d+\}\.$/, r.response);
  // The numbers of the question reappear in the worked line (copied, not made up) for most problems.
  const copied = records.filter((r) =>
    (r.problem.question.match(/\d+/g) ?? []).every((n) => r.response.includes(n)),
  );
  t.true(copied.length >= 7, shown);
  t.true(
    records.some((r) => r.correct),
    shown,
  );
});

test("sampled evaluation rollouts run the model's code in the sandbox and read its output", async (t) => {
  const { model, tokenizer } = loadPretrained(TINY_BASE_DIR, { trainable: false });
  t.teardown(() => model.dispose());
  const problems = heldOutProblems(12);
  const records = await tirRollouts(model, tokenizer, problems, { temperature: 1, seed: 3 });
  const passed = records.filter((r) => r.usedCode && r.passed);
  t.true(passed.length > 0, JSON.stringify(records.map((r) => r.response)));
  for (const r of passed) t.regex(r.response, /```python\n[\s\S]*```output\n[^\n]+\n```\n/, r.response);
});

test("the evaluation's figures: shares over all, hard/easy, with/without code, copied outputs", (t) => {
  const problem = (hard: boolean) => ({ question: "q", answer: "7", hard }) as RolloutRecord["problem"];
  const record = (hard: boolean, correct: boolean, usedCode: boolean, passed: boolean, response = "") =>
    ({
      problem: problem(hard),
      response,
      extracted: correct ? "7" : null,
      correct,
      usedCode,
      passed,
    }) as RolloutRecord;
  const f = tirFigures([
    record(true, true, true, true, "```python\nprint(7)\n```\n```output\n7\n```\n\\boxed{7}"),
    record(true, false, true, false),
    record(false, true, false, false),
    record(false, false, false, false),
  ]);
  t.deepEqual(f, {
    n: 4,
    accuracy: 0.5,
    boxedRatio: 0.5,
    codeRatio: 0.5,
    passRatio: 0.5,
    accuracyHard: 0.5,
    accuracyEasy: 0.5,
    codeRatioHard: 1,
    codeRatioEasy: 0,
    accuracyWithCode: 0.5,
    accuracyWithoutCode: 0.5,
    copiedOutputRatio: 1,
  });
  t.is(tirFigures([]).accuracyWithCode, null);
});
