import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  buildByteBpeTokenizer,
  bundledQwenTokenizerDir,
  loadTokenizer,
  maskFromCharRanges,
} from "../../src/index.js";

const qwen = loadTokenizer(bundledQwenTokenizerDir());
const TEXT =
  "Solve 2x+3=7.\n```python\nprint(1/3)\n```\n```output\n0.3333\n```\nSo x = 2. héllo 世界 🙂<|im_end|>";

test("real Qwen tokenizer: round trip, special tokens, eos/pad", (t) => {
  for (const s of [TEXT, "", "  leading spaces", "\\boxed{\\frac{1}{2}}", "emoji 🙂🙂 and tabs\t\t"])
    t.is(qwen.decode(qwen.encode(s)), s);
  const imEnd = qwen.tokenToId("<|im_end|>")!;
  t.is(qwen.eosTokenId, imEnd);
  t.is(qwen.padTokenId, qwen.tokenToId("<|endoftext|>")!);
  t.true(qwen.isSpecial(imEnd));
  const ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
  t.is(ids[0], qwen.tokenToId("<|im_start|>")!);
  t.is(ids.at(-1), imEnd);
  t.is(qwen.decode(ids, true), "user\nhi");
});

test("real Qwen tokenizer: character offsets cover the text and slice back to each token", (t) => {
  const { ids, offsets } = qwen.encodeWithOffsets(TEXT);
  t.deepEqual(ids, qwen.encode(TEXT));
  t.is(offsets[0]![0], 0);
  t.is(offsets.at(-1)![1], TEXT.length);
  for (let i = 1; i < offsets.length; i++) t.true(offsets[i]![0] >= offsets[i - 1]![0]);
  const ascii = offsets.filter(([s, e]) => /^[\x00-\x7f]*$/.test(TEXT.slice(s, e)));
  for (const [i, [s, e]] of offsets.entries())
    if (ascii.includes(offsets[i]!)) t.is(TEXT.slice(s, e), qwen.decode([ids[i]!]));
});

test("observation mask from character ranges marks exactly the tokens of the tool output", (t) => {
  const start = TEXT.indexOf("```output");
  const end = TEXT.indexOf("```", start + 3) + 3;
  const { ids, offsets } = qwen.encodeWithOffsets(TEXT);
  const mask = maskFromCharRanges(offsets, [[start, end]]);
  const masked = ids.filter((_, i) => mask[i]);
  t.true(qwen.decode(masked).includes("output\n0.3333"));
  t.false(qwen.decode(ids.filter((_, i) => !mask[i])).includes("0.3333"));
});

test("tiny byte-level BPE: learns merges, round-trips any text, saves and loads through the same path", (t) => {
  const corpus = "The answer is \\boxed{42}.\n```python\nprint(x**2 + 3*x)\n```\n".repeat(30);
  const tok = buildByteBpeTokenizer({ corpus, vocabSize: 320 });
  t.true(tok.vocabSize > 256 + 3 + 10 && tok.vocabSize <= 320 + 3);
  t.true(tok.encode(corpus).length < corpus.length / 2, "merges shorten the corpus");
  for (const s of [corpus, TEXT, "unseen ünïcödé ✓"]) t.is(tok.decode(tok.encode(s)), s);
  const dir = mkdtempSync(join(tmpdir(), "torl-tok-"));
  tok.save(dir);
  const back = loadTokenizer(dir);
  t.deepEqual(back.encode(TEXT), tok.encode(TEXT));
  t.is(back.eosTokenId, back.tokenToId("<|endoftext|>"));
  const { offsets } = back.encodeWithOffsets(TEXT);
  t.is(offsets.at(-1)![1], TEXT.length);
  rmSync(dir, { recursive: true, force: true });
});
