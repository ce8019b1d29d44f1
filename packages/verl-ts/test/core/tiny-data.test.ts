// The tiny recipe's task, exported from @torl-ts/verl so custom algorithms train on the same prompts.
import { execFileSync } from "node:child_process";
import test from "ava";
import {
  generateProblems,
  heldOutProblems,
  problemKinds,
  TinyDatasetError,
  tinyDataset,
  trainTestSplit,
} from "../../src/index.js";

test("the generator is deterministic for a seed and differs across seeds", (t) => {
  const a = generateProblems({ count: 50, seed: 7 });
  const b = generateProblems({ count: 50, seed: 7 });
  const c = generateProblems({ count: 50, seed: 8 });
  t.deepEqual(a, b);
  t.notDeepEqual(a, c);
});

test("every kind's stated answer is what its Python program prints", (t) => {
  const problems = generateProblems({ count: 400, seed: 3 });
  for (const kind of problemKinds)
    t.true(
      problems.some((p) => p.kind === kind),
      `kind ${kind} appears`,
    );
  const sample = problemKinds.flatMap((kind) => problems.filter((p) => p.kind === kind).slice(0, 4));
  const script = sample.map((p) => `exec(${JSON.stringify(p.code)})`).join("\n");
  const printed = execFileSync("python3", ["-c", script], { encoding: "utf8" }).trim().split("\n");
  t.deepEqual(
    printed,
    sample.map((p) => p.answer),
  );
});

test("train and held-out splits are disjoint and mix hard and easy problems", (t) => {
  const { train, test: heldOut } = trainTestSplit({ trainCount: 500, testCount: 100, seed: 1 });
  const testQuestions = new Set(heldOut.map((p) => p.question));
  t.false(train.some((p) => testQuestions.has(p.question)));
  const hardShare = heldOut.filter((p) => p.hard).length / heldOut.length;
  t.true(hardShare > 0.3 && hardShare < 0.7);
});

test("tiny data: veRL rows, data source per kind, held-out split = the base model's, disjoint from train", (t) => {
  const { train, val } = tinyDataset({ trainCount: 300, valCount: 60 });
  t.is(train.length, 300);
  t.is(val.length, 60);
  const held = heldOutProblems(60);
  t.deepEqual(
    val.map((r) => r.prompt[0]!.content),
    held.map((p) => p.question),
  );
  t.deepEqual(
    val.map((r) => r.reward_model.ground_truth),
    held.map((p) => p.answer),
  );
  const valQ = new Set(val.map((r) => r.prompt[0]!.content));
  t.false(
    train.some((r) => valQ.has(r.prompt[0]!.content)),
    "no held-out question in the train split",
  );
  for (const r of [...train, ...val]) {
    t.regex(r.data_source, /^tiny\/[a-z_]+$/);
    t.true(problemKinds.includes(r.data_source.slice(5) as never));
    t.is(r.ability, "math");
    t.deepEqual(Object.keys(r.prompt[0]!), ["role", "content"]);
    t.is(r.prompt[0]!.role, "user");
  }
  t.true(
    val.every((r) => r.extra_info.split === "val") && train.every((r) => r.extra_info.split === "train"),
  );
  t.deepEqual(tinyDataset({ trainCount: 300, valCount: 60 }), { train, val }, "deterministic");
});

test("bad tiny dataset options are refused with the option and value named", (t) => {
  t.throws(() => tinyDataset({ trainCount: 0, valCount: 1 }), {
    instanceOf: TinyDatasetError,
    message: /train problem count.*0/,
  });
  t.throws(() => tinyDataset({ trainCount: 2, valCount: 1, hardFraction: 2 }), {
    instanceOf: TinyDatasetError,
    message: /hard fraction.*2/,
  });
  // The easy kinds hold about 8,250 distinct questions: asking for more cannot succeed.
  t.throws(() => generateProblems({ count: 9000, seed: 1, hardFraction: 0 }), {
    instanceOf: TinyDatasetError,
    message: /could not make 9000 distinct problems/,
  });
});
