import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  computeLogProbs,
  ExportError,
  exportCheckpoint,
  exportCommand,
  loadModel,
  loadTokenizer,
  parseByteSize,
  type Qwen2Model,
  readSafetensors,
  selectBackend,
} from "../../src/index.js";
import { writeTrainerCheckpoint } from "../fixtures/checkpoint.js";
import { runTransformers } from "../models/helpers.js";

// The golden model of the PyTorch reference (scripts/make-model-fixtures.py): its weights, its logits.
const GOLDEN = join(import.meta.dirname, "..", "fixtures", "models", "qwen2-tiny");
const expected = JSON.parse(readFileSync(join(GOLDEN, "expected.json"), "utf8"));
const B = expected.ids.length as number;
const L = expected.ids[0].length as number;
const batch = {
  ids: Int32Array.from(expected.ids.flat() as number[]),
  mask: Uint8Array.from(expected.mask.flat() as number[]),
  batch: B,
  length: L,
};

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

/** A model directory: the golden config.json and weights, plus a tokenizer (export copies its files). */
function goldenModelDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-export-model-"));
  copyFileSync(join(GOLDEN, "config.json"), join(dir, "config.json"));
  copyFileSync(join(GOLDEN, "model.safetensors"), join(dir, "model.safetensors"));
  buildByteBpeTokenizer().save(dir);
  return dir;
}

/**
 * A trainer checkpoint as `worldSize` actor ranks write it: global_step_<step>/actor/rank_<r>.{json,bin}
 * (this rank's range of the flat parameters, zero optimizer state) with huggingface/ beside them.
 */
async function checkpointOf(
  model: Qwen2Model,
  modelDir: string,
  worldSize: number,
  step = 3,
): Promise<string> {
  return writeTrainerCheckpoint({
    root: mkdtempSync(join(tmpdir(), "torl-export-ckpt-")),
    values: await model.getParameters(),
    modelDir,
    worldSize,
    step,
  });
}

function logits(model: Qwen2Model): Float32Array {
  return tf.tidy(() => model.forward(batch)).dataSync() as Float32Array;
}

function maxDiffToTorch(got: Float32Array, V: number): number {
  let max = 0;
  for (let b = 0; b < B; b++)
    for (let i = 0; i < L; i++) {
      if (!batch.mask[b * L + i]) continue;
      for (let v = 0; v < V; v++)
        max = Math.max(max, Math.abs(got[(b * L + i) * V + v]! - expected.logits[b][i][v]));
    }
  return max;
}

test("export of a 3-rank checkpoint: our loader gives identical logits; weights equal the PyTorch reference's, logits within 1e-4 of its", async (t) => {
  const modelDir = goldenModelDir();
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 3);
  const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
  const r = exportCheckpoint(ckpt, { out });
  t.is(r.worldSize, 3);
  for (const f of [
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
  ])
    t.true(existsSync(join(out, f)), f);
  t.is(JSON.parse(readFileSync(join(out, "config.json"), "utf8")).torch_dtype, "float32");

  const exported = loadModel(out);
  // the same weights through the same forward: the same kernel calls, so the same bits on any CPU
  t.deepEqual(logits(exported), logits(model), "identical logits through our loader");
  // the weights the PyTorch reference computed with, bit for bit, and its logits
  const torchWeights = readSafetensors(join(GOLDEN, "model.safetensors"));
  const ours = readSafetensors(join(out, "model.safetensors"));
  t.deepEqual([...ours.keys()].sort(), [...torchWeights.keys()].sort());
  for (const [name, w] of torchWeights) {
    t.deepEqual(ours.get(name)!.shape, w.shape, name);
    t.deepEqual(ours.get(name)!.data, w.data, name);
  }
  const diff = maxDiffToTorch(logits(exported), exported.config.vocabSize);
  t.log(`max |logit - PyTorch reference| = ${diff.toExponential(2)}`);
  t.true(diff < 1e-4, `max |diff| ${diff}`);
  model.dispose();
  exported.dispose();
});

test("export above the shard size writes shards with an index, and they load to the same logits", async (t) => {
  const modelDir = goldenModelDir();
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 2);
  const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
  const r = exportCheckpoint(join(ckpt, "global_step_3"), { out, maxShardBytes: 8000 });
  const index = JSON.parse(readFileSync(join(out, "model.safetensors.index.json"), "utf8"));
  const shards = new Set(Object.values(index.weight_map as Record<string, string>));
  t.true(shards.size > 2, `${shards.size} shards`);
  t.false(existsSync(join(out, "model.safetensors")));
  t.true(r.files.includes("model.safetensors.index.json"));
  const exported = loadModel(out);
  t.deepEqual(logits(exported), logits(model));
  model.dispose();
  exported.dispose();
});

test("bf16 export: every weight is the PyTorch reference's bf16 rounding, logits within bf16 precision", async (t) => {
  const modelDir = goldenModelDir();
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 1);
  const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
  exportCheckpoint(join(ckpt, "global_step_3", "actor"), { out, dtype: "bf16" });
  t.is(JSON.parse(readFileSync(join(out, "config.json"), "utf8")).torch_dtype, "bfloat16");
  const header = readFileSync(join(out, "model.safetensors"));
  t.regex(header.subarray(8, 400).toString("utf8"), /"dtype":"BF16"/);
  const torchBf16 = readSafetensors(join(GOLDEN, "model-bf16.safetensors"));
  const full = readSafetensors(join(GOLDEN, "model.safetensors"));
  const ours = readSafetensors(join(out, "model.safetensors"));
  for (const [name, w] of torchBf16) {
    t.deepEqual(ours.get(name)!.data, w.data, `${name} rounds as torch's bfloat16 does`);
    const f = full.get(name)!.data;
    for (let i = 0; i < f.length; i++)
      if (!(Math.abs(ours.get(name)!.data[i]! - f[i]!) <= Math.abs(f[i]!) * 2 ** -8)) {
        t.fail(`${name}[${i}]: ${ours.get(name)!.data[i]} vs ${f[i]}`);
        break;
      }
  }
  // the same logits as the PyTorch reference's own bf16 weights, and near the float32 ones: bf16 keeps
  // 8 significant bits, so each weight moves by up to 2^-9 of itself and the logits by a few 2^-8
  const torchBf16Dir = mkdtempSync(join(tmpdir(), "torl-export-bf16-"));
  copyFileSync(join(GOLDEN, "config.json"), join(torchBf16Dir, "config.json"));
  copyFileSync(join(GOLDEN, "model-bf16.safetensors"), join(torchBf16Dir, "model.safetensors"));
  const reference = loadModel(torchBf16Dir);
  const exported = loadModel(out);
  const a = logits(exported);
  t.deepEqual(a, logits(reference));
  const b = logits(model);
  let maxDiff = 0;
  let maxAbs = 0;
  for (let i = 0; i < a.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(a[i]! - b[i]!));
    maxAbs = Math.max(maxAbs, Math.abs(b[i]!));
  }
  t.log(`bf16 export: max |logit diff| ${maxDiff.toExponential(2)} for logits up to ${maxAbs.toFixed(2)}`);
  t.true(maxDiff > 0 && maxDiff < 2 ** -5 * Math.max(1, maxAbs), `max |diff| ${maxDiff}`);
  model.dispose();
  exported.dispose();
  reference.dispose();
});

test("export refuses what it cannot do faithfully, naming the path", async (t) => {
  const modelDir = goldenModelDir();
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 2);
  const busy = mkdtempSync(join(tmpdir(), "torl-export-busy-"));
  writeFileSync(join(busy, "model.safetensors"), "old");
  t.throws(() => exportCheckpoint(ckpt, { out: busy }), { instanceOf: ExportError, message: /is not empty/ });
  t.throws(() => exportCheckpoint(modelDir, { out: join(busy, "x") }), {
    instanceOf: ExportError,
    message: /is not a checkpoint/,
  });
  // a checkpoint without huggingface/ needs --model; a model of another size does not fit
  const bare = await checkpointOf(model, modelDir, 1, 5);
  const actor = join(bare, "global_step_5", "actor");
  const other = mkdtempSync(join(tmpdir(), "torl-export-other-"));
  const cfg = JSON.parse(readFileSync(join(GOLDEN, "config.json"), "utf8"));
  writeFileSync(
    join(other, "config.json"),
    JSON.stringify({ ...cfg, intermediate_size: cfg.intermediate_size * 2 }),
  );
  t.throws(() => exportCheckpoint(actor, { out: join(busy, "y"), model: other }), {
    instanceOf: ExportError,
    message: /mlp\.gate_proj\.weight holds \d+ values, .*config\.json needs \d+/,
  });
  mkdirSync(join(busy, "empty-actor"));
  copyFileSync(join(actor, "rank_0.json"), join(busy, "empty-actor", "rank_0.json"));
  copyFileSync(join(actor, "rank_0.bin"), join(busy, "empty-actor", "rank_0.bin"));
  t.throws(() => exportCheckpoint(join(busy, "empty-actor"), { out: join(busy, "z") }), {
    instanceOf: ExportError,
    message: /no huggingface\/config\.json .*--model DIR/,
  });
  model.dispose();
});

test("`torl export` flags: sizes with units, dtype checked, output directory printed last", async (t) => {
  t.is(parseByteSize("5GB"), 5e9);
  t.is(parseByteSize("500MB"), 5e8);
  t.is(parseByteSize("1234"), 1234);
  t.throws(() => parseByteSize("lots"), { name: "UsageError" });
  await t.throwsAsync(exportCommand.run(["ckpt"]), { name: "UsageError", message: /--out/ });
  await t.throwsAsync(exportCommand.run(["ckpt", "--out", "o", "--dtype", "int8"]), {
    name: "UsageError",
    message: /--dtype must be one of bf16, fp16, fp32/,
  });
  const modelDir = goldenModelDir();
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 2);
  const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
  const lines: string[] = [];
  const orig = console.log;
  console.log = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    t.is(await exportCommand.run([ckpt, "--out", out, "--dtype", "fp16"]), 0);
  } finally {
    console.log = orig;
  }
  t.is(lines.at(-1), out);
  t.is(JSON.parse(readFileSync(join(out, "config.json"), "utf8")).torch_dtype, "float16");
  model.dispose();
});

// The tiny base's tokenizer: byte-level BPE whose pre-tokenizer keeps up to three digits together.
const TINY_BASE = join(import.meta.dirname, "..", "..", "assets", "tiny-base");

/** Texts where tokenizers part ways: digit runs, whitespace runs, unicode, contractions, special tokens. */
const TOKENIZER_TEXTS = [
  "37",
  "1234567",
  "x = 37 + 1234567.0 - 0.001 * 10**12",
  "What is 12+7? The answer is \\boxed{19}.",
  "a  b\t\tc\n\n\n  d   ",
  "   leading and trailing   ",
  "\n",
  "def f(x):\n    return x ** 2\n\n\nprint(f(3))\n",
  "```python\nprint(2**10)\n```\n```output\n1024\n```\n",
  "It's we'll THEY'RE you'd I'M",
  "héllo wörld — naïve café, e\u0301 (combining), 数学 ½ ✓ 😀",
  "full-width １２３４, Arabic-Indic ٣٤٥٦, superscript x² and Ⅻ",
  "<|im_start|>user\nWhat is 37*3?<|im_end|>\n<|im_start|>assistant\n111<|im_end|><|endoftext|>",
  "",
];

/**
 * Token ids transformers' AutoTokenizer gives for `texts` from `dir`, without and with trust_remote_code
 * (the two ways it picks the class), or the reason it cannot run here (no python3, or transformers not
 * installed: CI has neither, so there the comparison is not made).
 */
function transformersIds(dir: string, texts: string[]): { ids: number[][][] } | { reason: string } {
  const r = runTransformers<{ ids: number[][][] }>(
    [
      "import json, sys",
      "from transformers import AutoTokenizer",
      "texts = json.load(sys.stdin)",
      "ids = []",
      "for trust in (False, True):",
      "    tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=trust)",
      "    ids.append([tok(s)['input_ids'] for s in texts])",
      "print(json.dumps({'ids': ids}))",
    ],
    [dir],
    texts,
  );
  return "reason" in r ? r : r.value;
}

test("an exported checkpoint and the tiny base tokenize in transformers exactly as in torl-ts: tokenizer_config.json makes transformers read tokenizer.json as it is", async (t) => {
  const modelDir = goldenModelDir();
  // the tiny base's tokenizer, with the class a Qwen2 directory names (transformers' Qwen2Tokenizer puts
  // Qwen2's one-digit pre-tokenizer in place of the file's own)
  copyFileSync(join(TINY_BASE, "tokenizer.json"), join(modelDir, "tokenizer.json"));
  const { auto_map: _, ...config } = JSON.parse(
    readFileSync(join(TINY_BASE, "tokenizer_config.json"), "utf8"),
  );
  writeFileSync(
    join(modelDir, "tokenizer_config.json"),
    JSON.stringify({ ...config, tokenizer_class: "Qwen2Tokenizer", chat_template: "{{ messages }}" }),
  );
  const model = loadModel(modelDir);
  const ckpt = await checkpointOf(model, modelDir, 2);
  model.dispose();
  const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
  exportCheckpoint(ckpt, { out });
  // checked everywhere: the class and auto_map are those that read tokenizer.json, every other key as it was
  for (const dir of [out, join(ckpt, "global_step_3", "actor", "huggingface")]) {
    const written = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
    t.deepEqual(written, {
      ...config,
      tokenizer_class: "PreTrainedTokenizerFast",
      auto_map: { AutoTokenizer: [null, "tokenization_torl.TorlTokenizer"] },
      chat_template: "{{ messages }}",
    });
    // the committed tiny base carries the same module
    t.is(
      readFileSync(join(dir, "tokenization_torl.py"), "utf8"),
      readFileSync(join(TINY_BASE, "tokenization_torl.py"), "utf8"),
    );
  }
  t.deepEqual(JSON.parse(readFileSync(join(TINY_BASE, "tokenizer_config.json"), "utf8")), {
    ...config,
    tokenizer_class: "PreTrainedTokenizerFast",
    auto_map: { AutoTokenizer: [null, "tokenization_torl.TorlTokenizer"] },
  });
  const ours = loadTokenizer(out);
  t.deepEqual(ours.encode("37 1234567"), [580, 32, 766, 1099, 55], "torl-ts groups digits by three");
  // a tokenizer torl-ts saves (Tokenizer.save, as pretraining writes the tiny base) gets the same files
  const saved = mkdtempSync(join(tmpdir(), "torl-export-saved-"));
  copyFileSync(join(TINY_BASE, "config.json"), join(saved, "config.json"));
  loadTokenizer(TINY_BASE).save(saved);
  for (const f of ["tokenizer_config.json", "tokenization_torl.py"])
    t.is(readFileSync(join(saved, f), "utf8"), readFileSync(join(TINY_BASE, f), "utf8"), f);
  // where transformers is installed: the same ids from it, for the export, the tiny base and the saved copy
  for (const dir of [out, TINY_BASE, saved]) {
    const theirs = transformersIds(dir, TOKENIZER_TEXTS);
    if ("reason" in theirs) {
      t.log(`not compared with transformers: ${theirs.reason}`);
      break;
    }
    const mine = loadTokenizer(dir);
    const differ = theirs.ids.flatMap((ids, trust) =>
      TOKENIZER_TEXTS.flatMap((s, i) => {
        const want = mine.encode(s);
        const got = ids[i]!;
        return got.length === want.length && got.every((x, j) => x === want[j])
          ? []
          : [
              `${JSON.stringify(s)} (trust_remote_code=${!!trust}): transformers ${JSON.stringify(got)}, torl-ts ${JSON.stringify(want)}`,
            ];
      }),
    );
    t.deepEqual(differ, [], dir);
  }
});

/**
 * Per-token log-probs [B][L-1] (token t + 1 given tokens up to t) of each directory's batch from
 * transformers' AutoModelForCausalLM (float64, positions counting real tokens as torl-ts does), in one
 * python process; or the reason it cannot run here (no python3, or no torch / transformers).
 */
function transformersLogProbs(
  runs: { dir: string; ids: number[][]; mask: number[][] }[],
): { logprobs: number[][][] } | { reason: string } {
  const r = runTransformers<{ logprobs: number[][][] }>(
    [
      "import json, sys",
      "import torch, transformers",
      "out = []",
      "for r in json.load(sys.stdin):",
      "    ids, mask = torch.tensor(r['ids']), torch.tensor(r['mask'])",
      "    model = transformers.AutoModelForCausalLM.from_pretrained(r['dir'], dtype=torch.float64).eval()",
      "    pos = (mask.cumsum(-1) - 1).clamp(min=0)",
      "    with torch.no_grad():",
      "        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits",
      "    out.append(torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0].tolist())",
      "print(json.dumps({'logprobs': out}))",
    ],
    [],
    runs,
  );
  return "reason" in r ? r : r.value;
}

test("export writes Qwen2, Qwen3 (untied, tied) and Llama 3 back: our loader gives the PyTorch reference's logits; transformers loads each and agrees on log-probs within 1e-4", async (t) => {
  t.timeout(600_000);
  const runs: { name: string; dir: string; ids: number[][]; mask: number[][]; ours: Float32Array }[] = [];
  for (const name of ["qwen2-tiny", "qwen3-tiny", "qwen3-tiny-tied", "llama3-tiny"]) {
    const fixture = join(import.meta.dirname, "..", "fixtures", "models", name);
    const want = JSON.parse(readFileSync(join(fixture, "expected.json"), "utf8"));
    const modelDir = mkdtempSync(join(tmpdir(), "torl-export-model-"));
    copyFileSync(join(fixture, "config.json"), join(modelDir, "config.json"));
    copyFileSync(join(fixture, "model.safetensors"), join(modelDir, "model.safetensors"));
    buildByteBpeTokenizer().save(modelDir);
    const model = loadModel(modelDir);
    const ckpt = await checkpointOf(model, modelDir, 2);
    const out = join(mkdtempSync(join(tmpdir(), "torl-export-out-")), "hf");
    exportCheckpoint(ckpt, { out });
    const exported = loadModel(out);
    t.deepEqual(exported.config, model.config, `${name}: config.json written back parses to the same model`);
    const ids = want.ids as number[][];
    const mask = want.mask as number[][];
    const b = {
      ids: Int32Array.from(ids.flat()),
      mask: Uint8Array.from(mask.flat()),
      batch: ids.length,
      length: ids[0]!.length,
    };
    const V = exported.config.vocabSize;
    const got = tf.tidy(() => exported.forward(b)).dataSync();
    let logitErr = 0;
    for (let r = 0; r < b.batch; r++)
      for (let i = 0; i < b.length; i++)
        if (b.mask[r * b.length + i])
          for (let v = 0; v < V; v++)
            logitErr = Math.max(logitErr, Math.abs(got[(r * b.length + i) * V + v]! - want.logits[r][i][v]));
    t.true(logitErr < 1e-4, `${name}: max |logit - PyTorch reference| ${logitErr}`);
    runs.push({ name, dir: out, ids, mask, ours: (await computeLogProbs(exported, b)).logProbs });
    model.dispose();
    exported.dispose();
  }
  const theirs = transformersLogProbs(runs.map(({ dir, ids, mask }) => ({ dir, ids, mask })));
  if ("reason" in theirs) {
    t.log(`not compared with transformers: ${theirs.reason}`);
    return;
  }
  for (const [k, { name, mask, ours }] of runs.entries()) {
    const L = mask[0]!.length;
    let max = 0;
    for (let r = 0; r < mask.length; r++)
      for (let i = 1; i < L; i++)
        if (mask[r]![i] && mask[r]![i - 1])
          max = Math.max(max, Math.abs(ours[r * L + i]! - theirs.logprobs[k]![r]![i - 1]!));
    t.log(`${name}: max |log-prob - transformers| = ${max.toExponential(2)}`);
    t.true(max < 1e-4, `${name}: max |diff| ${max}`);
  }
});
