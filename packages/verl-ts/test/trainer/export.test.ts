import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { shardRange } from "@torl-ts/actors";
import test from "ava";
import {
  buildByteBpeTokenizer,
  ExportError,
  exportCheckpoint,
  exportCommand,
  FlatLayout,
  LATEST_FILE,
  loadModel,
  parseByteSize,
  type Qwen2Model,
  readSafetensors,
  saveHfMetadata,
  selectBackend,
  writeShard,
} from "../../src/index.js";

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
  const root = mkdtempSync(join(tmpdir(), "torl-export-ckpt-"));
  const actor = join(root, `global_step_${step}`, "actor");
  const values = await model.getParameters();
  const layout = FlatLayout.of(values);
  const flat = layout.flatten(values);
  for (let rank = 0; rank < worldSize; rank++) {
    const { start, end } = shardRange(layout.total, worldSize, rank);
    const zeros = new Float32Array(end - start);
    const meta = {
      rank,
      worldSize,
      start,
      end,
      total: layout.total,
      adamStep: step,
      schedulerStep: step,
      layout: layout.entries.map((e) => [e.name, e.size] as [string, number]),
    };
    writeShard(actor, meta, flat.slice(start, end), zeros, zeros);
  }
  saveHfMetadata(modelDir, actor);
  writeFileSync(join(root, LATEST_FILE), String(step));
  return root;
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
