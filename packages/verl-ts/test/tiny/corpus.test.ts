import { generateProblems } from "@torl-ts/verl";
import test from "ava";
import { buildCorpus } from "../../src/tiny/corpus.js";

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
