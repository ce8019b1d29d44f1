import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  buildByteBpeTokenizer,
  createRandomPretrained,
  type EvalResult,
  type EvalSample,
  evalCommand,
  evalFigures,
  evaluate,
  formatEvalTable,
  heldOutProblems,
  selectBackend,
  type Tokenizer,
} from "@torl-ts/verl";
import { writeReport } from "@torl-ts/verl/report";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";
import test from "ava";

const PARQUET = fileURLToPath(
  new URL("../../../packages/verl-ts/test/fixtures/core/torl-test.parquet", import.meta.url),
);

let root: string;
let modelDir: string;
let tokenizer: Tokenizer;

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  root = mkdtempSync(join(tmpdir(), "torl-eval-"));
  modelDir = join(root, "model");
  tokenizer = buildByteBpeTokenizer({});
  createRandomPretrained(
    modelDir,
    tokenizer,
    {
      hiddenSize: 32,
      numHiddenLayers: 1,
      numAttentionHeads: 2,
      numKeyValueHeads: 1,
      maxPositionEmbeddings: 2048,
    },
    { seed: 7 },
  ).dispose();
});

test.after.always(() => rmSync(root, { recursive: true, force: true }));

/** What each row's scripted response says, by its question. The tool runs the code for real. */
const SCRIPTS: Record<string, string> = {
  "What is 6 * 7?": "Compute.\n```python\nprint(6 * 7)\n```\n```output\n42\n```\nSo \\boxed{42}.",
  "What is 2 ** 10?": "```python\nprint(2 ** 10)\n```\n```output\n1024\n```\nThus \\boxed{1024}.",
  "What is 1 / 0?":
    "```python\nprint(1 / 0)\n```\n```output\nZeroDivisionError: division by zero\n```\n\\boxed{0}",
  "What is 3 + 4?": "Easy: \\boxed{7}.",
  "What is 9 - 5?": "I guess \\boxed{5}.",
};

const ROWS = [
  { q: "What is 6 * 7?", gt: "42", src: "arith" },
  { q: "What is 2 ** 10?", gt: "1024", src: "arith" },
  { q: "What is 3 + 4?", gt: "7", src: "arith" },
  { q: "What is 1 / 0?", gt: "\\infty", src: "tricky" },
  { q: "What is 9 - 5?", gt: "4", src: "tricky" },
];

function writeDataset(file: string): void {
  writeFileSync(
    file,
    ROWS.map((r, i) =>
      JSON.stringify({
        data_source: r.src,
        prompt: [{ role: "user", content: r.q }],
        ability: "math",
        reward_model: { style: "rule", ground_truth: r.gt },
        extra_info: { index: i },
      }),
    ).join("\n"),
  );
}

/** Forces the response of row i (prompt index / n) to be SCRIPTS[question], then EOS. */
function scripted(n: number) {
  return (index: number, responseIds: readonly number[], logits: Float32Array) => {
    const target = SCRIPTS[ROWS[Math.floor(index / n)]!.q]!;
    const done = tokenizer.decode(responseIds, true);
    if (!target.startsWith(done)) throw new Error(`response left the script: ${JSON.stringify(done)}`);
    const next =
      done.length === target.length ? tokenizer.eosTokenId! : tokenizer.encode(target.slice(done.length))[0]!;
    logits.fill(-1e9);
    logits[next] = 0;
  };
}

function checkConsistent(t: import("ava").ExecutionContext, result: EvalResult): void {
  for (const [src, f] of Object.entries(result.per_source)) {
    const mine = result.samples.filter((s) => s.data_source === src);
    t.is(f.samples, mine.length, src);
    t.is(f.acc, mine.filter((s) => s.correct).length / mine.length, src);
    t.is(f.code_ratio, mine.filter((s) => s.num_tool_calls > 0).length / mine.length, src);
    for (const k of ["acc", "code_ratio", "pass_ratio", "effective_code_ratio"] as const)
      t.true(f[k] >= 0 && f[k] <= 1, `${src} ${k} = ${f[k]}`);
  }
  t.is(result.overall.samples, result.samples.length);
}

test("scripted responses through the real sandbox: per-source accuracy, code, pass and effective code ratios", async (t) => {
  const data = join(root, "rows.jsonl");
  writeDataset(data);
  const result = await evaluate({
    model: modelDir,
    data,
    maxResponseLength: 200,
    logitsProcessor: scripted(1),
    workers: 1,
    log: null,
  });
  t.deepEqual(Object.keys(result.per_source), ["arith", "tricky"]);
  const byQ = new Map(result.samples.map((s) => [ROWS[s.row]!.q, s] as [string, EvalSample]));
  const start = SCRIPTS["What is 6 * 7?"]!.indexOf("```output");
  t.is(byQ.get("What is 6 * 7?")!.response, SCRIPTS["What is 6 * 7?"]!);
  t.deepEqual(byQ.get("What is 6 * 7?")!.tool_calls, [
    {
      code: "print(6 * 7)\n",
      observation: "42",
      success: true,
      range: [start, start + "```output\n42\n```\n".length],
    },
  ]);
  t.is(byQ.get("What is 1 / 0?")!.tool_calls![0]!.success, false);
  const arith = result.per_source.arith!;
  t.like(arith, {
    rows: 3,
    samples: 3,
    acc: 1,
    code_ratio: 2 / 3,
    pass_ratio: 1,
    effective_code_ratio: 1,
    calls: 2,
  });
  const tricky = result.per_source.tricky!;
  t.like(tricky, {
    rows: 2,
    samples: 2,
    acc: 0,
    code_ratio: 1 / 2,
    pass_ratio: 0,
    effective_code_ratio: 0,
    calls: 1,
  });
  t.like(result.overall, {
    rows: 5,
    samples: 5,
    acc: 3 / 5,
    code_ratio: 3 / 5,
    pass_ratio: 2 / 3,
    mean_source_acc: 0.5,
  });
  t.is(result.overall.pass_at_n, undefined);
  checkConsistent(t, result);
  const table = formatEvalTable(result);
  t.regex(table, /^arith\s+3\s+3\s+100\.0\s+66\.7\s+100\.0\s+100\.0/m);
  t.regex(table, /^all\s+5\s+5\s+60\.0\s+60\.0\s+66\.7/m);

  // The records are the report's samples.jsonl format: the report highlights their code and output.
  const run = join(root, "run");
  mkdirSync(run);
  writeFileSync(join(run, "metrics.jsonl"), `${JSON.stringify({ step: 0, "val/arith/acc": 1 })}\n`);
  writeFileSync(join(run, "samples.jsonl"), result.samples.map((s) => `${JSON.stringify(s)}\n`).join(""));
  const html = readFileSync((await writeReport(run, { noPng: true })).html, "utf8");
  t.true(html.includes('<span class="obs">```output\n42\n```\n</span>'));
  t.true(html.includes('<span class="code">```python\nprint(6 * 7)\n```\n</span>'));
});

test("n samples per row: counts, pass@n, and C=0 never calls the tool", async (t) => {
  const data = join(root, "rows-n.jsonl");
  writeDataset(data);
  const result = await evaluate({
    model: modelDir,
    data,
    n: 2,
    maxCalls: 0,
    maxResponseLength: 200,
    logitsProcessor: scripted(2),
    log: null,
  });
  t.is(result.temperature, 1);
  t.is(result.samples.length, 10);
  t.deepEqual(
    result.samples.map((s) => [s.row, s.sample]),
    ROWS.flatMap((_, i) => [
      [i, 0],
      [i, 1],
    ]),
  );
  // Without the tool the script's "```output" is plain text, so nothing is called.
  t.is(result.overall.calls, 0);
  t.is(result.overall.code_ratio, 0);
  t.like(result.per_source.arith!, { rows: 3, samples: 6, pass_at_n: 1 });
  checkConsistent(t, result);
});

test("`pnpm torl eval` on rows of the paper's test.parquet: greedy table, JSON and samples.jsonl", async (t) => {
  const out = join(root, "eval.json");
  const samples = join(root, "samples.jsonl");
  const lines: string[] = [];
  const orig = console.log;
  console.log = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    const code = await evalCommand.run([
      "--model",
      modelDir,
      "--data",
      PARQUET,
      "--limit",
      "3",
      "--max-response-length",
      "12",
      "--workers",
      "1",
      "--out",
      out,
      "--samples",
      samples,
    ]);
    t.is(code, 0);
  } finally {
    console.log = orig;
  }
  const result = JSON.parse(readFileSync(out, "utf8")) as EvalResult;
  t.is(result.overall.rows, 3);
  t.is(result.temperature, 0);
  t.is(
    Object.values(result.per_source).reduce((a, f) => a + f.rows, 0),
    3,
  );
  t.true(
    result.samples.every(
      (s) => s.response_tokens <= 12 && s.prompt.startsWith("A conversation between User"),
    ),
  );
  checkConsistent(t, result);
  t.true(existsSync(samples));
  t.is(readFileSync(samples, "utf8").trim().split("\n").length, 3);
  t.regex(lines.join("\n"), /data_source\s+rows\s+samples\s+acc%/);
  t.like(result.overall, evalFigures(result.samples, 1));
});

// The committed tiny base model (packages/verl-ts/assets/tiny-base), once it exists: the real path with
// a model that writes code, on held-out problems of the recipe.
(existsSync(join(TINY_BASE_DIR, "config.json")) ? test : test.skip)(
  "greedy eval of the tiny base model on held-out problems: figures match the records",
  async (t) => {
    const data = join(root, "held-out.jsonl");
    const problems = heldOutProblems(6);
    writeFileSync(
      data,
      problems
        .map((p, i) =>
          JSON.stringify({
            data_source: p.kind,
            prompt: [{ role: "user", content: p.question }],
            ability: "math",
            reward_model: { ground_truth: p.answer },
            extra_info: { index: i },
          }),
        )
        .join("\n"),
    );
    const result = await evaluate({
      model: TINY_BASE_DIR,
      data,
      maxResponseLength: 192,
      workers: 1,
      log: null,
    });
    t.is(result.overall.rows, 6);
    t.is(
      Object.values(result.per_source).reduce((a, f) => a + f.samples, 0),
      6,
    );
    checkConsistent(t, result);
    t.like(result.overall, evalFigures(result.samples, 1));
  },
);

test("bad flags are usage errors", async (t) => {
  await t.throwsAsync(evalCommand.run(["--data", "x.parquet"]), { name: "UsageError", message: /--model/ });
  await t.throwsAsync(evalCommand.run(["--model", "m"]), { name: "UsageError", message: /--data/ });
  await t.throwsAsync(evalCommand.run(["--model", "m", "--data", "d", "--n", "0"]), { name: "UsageError" });
  await t.throwsAsync(evalCommand.run(["--model", "m", "--data", "d", "--bogus"]), { name: "UsageError" });
});
