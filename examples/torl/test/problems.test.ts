import { execFileSync } from "node:child_process";
import test from "ava";
import { buildCorpus } from "../src/corpus.js";
import { generateProblems, problemKinds, trainTestSplit } from "../src/problems.js";

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

test("the corpus has about 40% code solutions, some of them failing, each ending in a boxed answer", (t) => {
  const problems = generateProblems({ count: 1000, seed: 11 });
  const corpus = buildCorpus(problems, { seed: 2 });
  const code = corpus.filter((d) => d.style !== "plain").length / corpus.length;
  const failing = corpus.filter((d) => d.style === "code_error").length / corpus.length;
  t.true(code > 0.35 && code < 0.45, `code share ${code}`);
  t.true(failing > 0.05 && failing < 0.15, `failing share ${failing}`);
  for (const doc of corpus) t.regex(doc.response, /\\boxed\{-?\d+\}\.$/);
  const withCode = corpus.find((d) => d.style === "code")!;
  t.true(withCode.response.includes("```python\n") && withCode.response.includes("```output\n"));
});
