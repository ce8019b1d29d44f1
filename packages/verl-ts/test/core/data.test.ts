import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";
import {
  collatePrompts,
  DatasetFileError,
  filterOverlongPrompts,
  LoaderStateError,
  PromptLoader,
  readJsonlRows,
  readParquetRows,
  readRlDataset,
  renderPrompt,
} from "../../src/data/index.js";

const PARQUET = fileURLToPath(new URL("../fixtures/core/torl-test.parquet", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "verl-data-"));

/** A copy of the fixture with one name in its footer replaced by another of the same length. */
function renamed(from: string, to: string): string {
  const bytes = readFileSync(PARQUET);
  const a = Buffer.from(from);
  let i = bytes.indexOf(a);
  while (i >= 0) {
    Buffer.from(to).copy(bytes, i);
    i = bytes.indexOf(a, i + 1);
  }
  const p = join(dir, `renamed-${to}.parquet`);
  writeFileSync(p, bytes);
  return p;
}

// A whitespace "tokenizer" is enough to test the filter and the collation.
const words = (s: string) =>
  s
    .split(/\s+/)
    .filter(Boolean)
    .map((w) => w.length);

test("reads ToRL's test.parquet: aime24 30x4, aime25 30x4, math500 134 rows, veRL's schema", async (t) => {
  const rows = await readParquetRows(PARQUET);
  t.is(rows.length, 374);
  const count: Record<string, number> = {};
  for (const r of rows) count[r.data_source] = (count[r.data_source] ?? 0) + 1;
  t.deepEqual(count, { aime24: 120, aime25: 120, math500: 134 });
  const r = rows[0]!;
  t.deepEqual(
    r.prompt.map((m) => m.role),
    ["system", "user"],
  );
  t.is(r.reward_model.ground_truth, "204");
  t.is(r.ability, "other");
  t.is(typeof r.extra_info.id, "string");
});

test("a file that is not parquet, or is cut short, is an error naming the file", async (t) => {
  const cut = join(dir, "cut.parquet");
  writeFileSync(cut, readFileSync(PARQUET).subarray(0, 20000));
  const e = await t.throwsAsync(readParquetRows(cut), { instanceOf: DatasetFileError });
  t.true(e!.message.startsWith(cut));
  t.regex(e!.message, /not a readable parquet file/);
  await t.throwsAsync(readParquetRows(join(dir, "absent.parquet")), {
    message: /absent\.parquet: cannot read file/,
  });
});

test("a missing column is an error naming the file and the column", async (t) => {
  const noRm = renamed("reward_model", "reward_modex");
  const e = await t.throwsAsync(readParquetRows(noRm), { instanceOf: DatasetFileError });
  t.is(e!.column, "reward_model");
  t.is(e!.file, noRm);
  t.regex(
    e!.message,
    /missing column "reward_model" \(has: data_source, prompt, ability, reward_modex, extra_info\)/,
  );
  const noGt = renamed("ground_truth", "ground_truty");
  await t.throwsAsync(readParquetRows(noGt), { message: /missing column "reward_model\.ground_truth"/ });
  await t.throwsAsync(readParquetRows(PARQUET, { promptKey: "question" }), {
    message: /missing column "question"/,
  });
});

test("JSONL rows read with the same schema; bad lines name the file, line and column", async (t) => {
  const good = join(dir, "good.jsonl");
  const row = {
    data_source: "toy",
    prompt: [{ role: "user", content: "1+1?" }],
    ability: "math",
    reward_model: { ground_truth: "2", style: "rule" },
    extra_info: { index: 7 },
  };
  writeFileSync(good, `${JSON.stringify(row)}\n\n${JSON.stringify({ ...row, data_source: "toy2" })}\n`);
  const rows = readJsonlRows(good);
  t.is(rows.length, 2);
  t.is(rows[1]!.data_source, "toy2");
  const both = await readRlDataset([good, PARQUET]);
  t.is(both.length, 376);
  const bad = join(dir, "bad.jsonl");
  writeFileSync(bad, `${JSON.stringify(row)}\n{oops\n`);
  t.throws(() => readJsonlRows(bad), { message: /bad\.jsonl: line 2 is not valid JSON/ });
  const missing = join(dir, "missing.jsonl");
  writeFileSync(missing, JSON.stringify({ data_source: "x", prompt: [{ role: "user", content: "q" }] }));
  const e = t.throws(() => readJsonlRows(missing), { instanceOf: DatasetFileError });
  t.is(e!.column, "reward_model");
  const badMsg = join(dir, "badmsg.jsonl");
  writeFileSync(badMsg, JSON.stringify({ ...row, prompt: [{ role: "user" }] }));
  t.throws(() => readJsonlRows(badMsg), {
    message: /badmsg\.jsonl \(row 0\): column "prompt" message 0 must be/,
  });
  await t.throwsAsync(readRlDataset(join(dir, "x.csv")), { message: /unknown dataset format/ });
});

test("tir_base_0309 renders the user question exactly as ToRL's template; chat renders ChatML", async (t) => {
  const [r] = await readParquetRows(PARQUET);
  const q = r!.prompt[1]!.content;
  t.is(
    renderPrompt("tir_base_0309", r!.prompt),
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it.\n" +
      "User: Please integrate natural language reasoning with programs to solve the problem above, and put your final answer within \\boxed{}.\n" +
      `${q}\nAssistant:\n`,
  );
  t.is(
    renderPrompt("chat", [
      { role: "system", content: "S" },
      { role: "user", content: "Q" },
    ]),
    "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
  );
  t.throws(() => renderPrompt("tir_base", r!.prompt), {
    message: /unknown template_type "tir_base" \(known: .*tir_base_0309/,
  });
});

test("the prompt-length filter drops prompts over max_prompt_length - 10 tokens", async (t) => {
  const rows = await readParquetRows(PARQUET);
  const lengths = rows.map((r) => words(renderPrompt("tir_base_0309", r.prompt)).length);
  const max = 90;
  const { kept, dropped } = filterOverlongPrompts(rows, { tokenize: words, maxPromptLength: max });
  const expectKept = lengths.filter((n) => n <= max - 10).length;
  t.is(kept.length, expectKept);
  t.is(dropped, rows.length - expectKept);
  t.true(dropped > 0 && kept.length > 0, "the threshold splits the set");
  // the boundary: exactly max - 10 tokens is kept, one more is dropped
  const one = rows[0]!;
  const n = words(renderPrompt("tir_base_0309", one.prompt)).length;
  t.is(filterOverlongPrompts([one], { tokenize: words, maxPromptLength: n + 10 }).kept.length, 1);
  t.is(filterOverlongPrompts([one], { tokenize: words, maxPromptLength: n + 9 }).kept.length, 0);
});

test("the loader is shuffled by seed, covers every row once per epoch and differs between epochs", (t) => {
  const rows = Array.from({ length: 10 }, (_, i) => i);
  const a = new PromptLoader(rows, { batchSize: 3, seed: 7 });
  t.is(a.batchesPerEpoch, 3);
  const e0 = [...a.epochBatches()].flatMap((b) => b.rows);
  t.is(e0.length, 9, "drop_last drops the short batch");
  t.is(new Set(e0).size, 9);
  t.notDeepEqual(e0, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
  const e1 = [a.next(), a.next(), a.next()].flatMap((b) => b.rows);
  t.is(a.currentEpoch, 1);
  t.notDeepEqual(e1, e0);
  const b = new PromptLoader(rows, { batchSize: 3, seed: 7 });
  t.deepEqual(
    [...b.epochBatches()].flatMap((x) => x.rows),
    e0,
    "same seed, same order",
  );
  const c = new PromptLoader(rows, { batchSize: 3, seed: 8 });
  t.notDeepEqual(
    [...c.epochBatches()].flatMap((x) => x.rows),
    e0,
  );
  const plain = new PromptLoader(rows, { batchSize: 4, shuffle: false, dropLast: false });
  t.deepEqual(
    [...plain.epochBatches()].map((x) => x.rows),
    [
      [0, 1, 2, 3],
      [4, 5, 6, 7],
      [8, 9],
    ],
  );
});

test("a loader restored from its state yields the same batches as the original", (t) => {
  const rows = Array.from({ length: 23 }, (_, i) => `r${i}`);
  const a = new PromptLoader(rows, { batchSize: 4, seed: 3 });
  for (let i = 0; i < 7; i++) a.next(); // into epoch 1
  const state = JSON.parse(JSON.stringify(a.state()));
  t.is(state.epoch, 1);
  const expected = Array.from({ length: 9 }, () => a.next().rows);
  const b = new PromptLoader(rows, { batchSize: 4, seed: 999 });
  b.loadState(state);
  t.deepEqual(
    Array.from({ length: 9 }, () => b.next().rows),
    expected,
  );
  t.throws(() => new PromptLoader(rows.slice(1), { batchSize: 4 }).loadState(state), {
    instanceOf: LoaderStateError,
    message: /state is for 23 rows but the dataset has 22/,
  });
});

test("collatePrompts left-pads token ids into a DataProto with the row fields alongside", async (t) => {
  const rows = (await readParquetRows(PARQUET)).slice(0, 2);
  const d = collatePrompts(rows, { tokenize: words, maxPromptLength: 200, padTokenId: 0 });
  t.is(d.length, 2);
  const ids = d.tensor<Int32Array>("input_ids");
  const mask = d.tensor<Int32Array>("attention_mask");
  const pos = d.tensor<Int32Array>("position_ids");
  t.deepEqual(ids.shape, [2, 200]);
  const n = words(renderPrompt("tir_base_0309", rows[0]!.prompt)).length;
  t.is(
    mask.data.subarray(0, 200).reduce((s, x) => s + x, 0),
    n,
  );
  t.is(mask.data[199], 1);
  t.is(mask.data[199 - n], 0);
  t.is(pos.data[200 - n], 0);
  t.is(pos.data[199], n - 1);
  t.deepEqual(d.column("data_source"), ["aime24", "aime24"]);
  t.is((d.column("reward_model")[0] as { ground_truth: string }).ground_truth, "204");
  t.throws(() => collatePrompts(rows, { tokenize: words, maxPromptLength: 10, padTokenId: 0 }), {
    message: /over max_prompt_length 10/,
  });
  const left = collatePrompts(rows, {
    tokenize: words,
    maxPromptLength: 10,
    padTokenId: 0,
    truncation: "left",
  });
  t.is(
    left.tensor<Int32Array>("attention_mask").data.reduce((s, x) => s + x, 0),
    20,
  );
});
