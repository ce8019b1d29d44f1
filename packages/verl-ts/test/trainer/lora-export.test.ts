/**
 * A LoRA checkpoint leaves the framework: `torl export` writes the base with the adapters merged in, or a
 * PEFT adapter directory that PEFT loads onto the base; `torl eval --model` takes both, and both give the
 * adapted model's log-probs.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  buildByteBpeTokenizer,
  createRandomPretrained,
  ExportError,
  exportCheckpoint,
  loadModel,
  selectBackend,
  tokenLogProbs,
} from "../../src/index.js";
import {
  initialAdapterValues,
  type LoraKeys,
  loraConfigOf,
  readPeftAdapterConfig,
  readPeftAdapterValues,
} from "../../src/models/lora.js";
import { loadModelValues } from "../../src/models/pretrained.js";
import { Qwen2Model } from "../../src/models/qwen2.js";
import { writeTrainerCheckpoint } from "../fixtures/checkpoint.js";
import { evaluateQuietly } from "../fixtures/eval.js";
import { fixtureBatch, runTransformers } from "../models/helpers.js";
import { TINY_TEST_ARCH } from "../models/tiny-config.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models");
const GOLDEN = join(FIX, "qwen2-tiny");
const ADAPTER = join(FIX, "qwen2-tiny-lora");
const expected = JSON.parse(readFileSync(join(ADAPTER, "expected.json"), "utf8"));
const batch = fixtureBatch(expected);
const L = batch.length;
const KEYS = {
  lora_rank: 4,
  lora_alpha: 8,
  target_modules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
};

let root: string;
test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  root = mkdtempSync(join(tmpdir(), "torl-lora-export-"));
});
test.after.always(() => rmSync(root, { recursive: true, force: true }));

/** The golden base with a tokenizer, and a 2-rank LoRA checkpoint holding the PEFT fixture's adapters. */
function loraCheckpoint(): { base: string; ckpt: string; adapters: Map<string, Float32Array> } {
  const base = mkdtempSync(join(root, "base-"));
  copyFileSync(join(GOLDEN, "config.json"), join(base, "config.json"));
  copyFileSync(join(GOLDEN, "model.safetensors"), join(base, "model.safetensors"));
  buildByteBpeTokenizer().save(base);
  const { lora } = readPeftAdapterConfig(ADAPTER);
  const adapters = readPeftAdapterValues(ADAPTER, loadModelValues(base).config, lora);
  return { base, ckpt: checkpointOf(base, adapters, KEYS), adapters };
}

/** A 2-rank LoRA checkpoint of `adapters` on `base`, as the trainer writes it. */
function checkpointOf(base: string, adapters: Map<string, Float32Array>, keys: LoraKeys): string {
  return writeTrainerCheckpoint({
    root: mkdtempSync(join(root, "ckpt-")),
    values: adapters,
    modelDir: base,
    worldSize: 2,
    step: 2,
    lora: keys,
  });
}

function logProbs(model: Qwen2Model): Float32Array {
  return tokenLogProbs(model, batch).logProbs.dataSync() as Float32Array;
}

function maxDiff(a: Float32Array, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++)
    if (batch.mask[i] && i % L > 0 && batch.mask[i - 1]) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

test("LoRA export: merged weights and a PEFT adapter dir both give the adapted model's log-probs; PEFT loads the adapter dir and agrees", (t) => {
  const { base, ckpt, adapters } = loraCheckpoint();
  const { lora } = readPeftAdapterConfig(ADAPTER);
  const { config, values } = loadModelValues(base);
  const adapted = new Qwen2Model(config, values, { lora: { config: lora, values: adapters } });
  const want = logProbs(adapted);
  t.true(maxDiff(want, expected.log_probs.flat()) < 1e-4, "the adapted model is PEFT's (fixture)");

  const peftDir = join(root, "peft");
  const r = exportCheckpoint(ckpt, { out: peftDir, adapter: "peft" });
  t.is(r.adapter, "peft");
  t.is(r.worldSize, 2);
  t.true(
    existsSync(join(peftDir, "adapter_config.json")) &&
      existsSync(join(peftDir, "adapter_model.safetensors")),
  );
  t.false(existsSync(join(peftDir, "config.json")), "an adapter directory, not a model");
  const cfg = JSON.parse(readFileSync(join(peftDir, "adapter_config.json"), "utf8"));
  t.like(cfg, { peft_type: "LORA", r: 4, lora_alpha: 8, base_model_name_or_path: base });
  const mergedDir = join(root, "merged");
  t.is(exportCheckpoint(ckpt, { out: mergedDir }).adapter, "merged");

  for (const dir of [peftDir, mergedDir]) {
    const m = loadModel(dir);
    const d = maxDiff(logProbs(m), want);
    t.true(d < 1e-5, `${dir}: log-probs differ by ${d}`);
    m.dispose();
  }

  // PEFT itself: the adapter directory on the base, in PyTorch
  const py = runTransformers<{ log_probs: number[][] }>(
    [
      "import json, sys, torch",
      "from transformers import AutoModelForCausalLM",
      "from peft import PeftModel",
      "inp = json.load(sys.stdin)",
      "model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32), sys.argv[2]).eval()",
      "ids = torch.tensor(inp['ids']); mask = torch.tensor(inp['mask'])",
      "pos = (mask.cumsum(-1) - 1).clamp(min=0)",
      "with torch.no_grad(): logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits",
      "lp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]",
      "lp = torch.cat([torch.zeros(len(ids), 1, dtype=lp.dtype), lp], 1)",
      "print(json.dumps({'log_probs': lp.tolist()}))",
    ],
    [base, peftDir],
    { ids: expected.ids, mask: expected.mask },
  );
  if ("reason" in py) t.log(`PEFT not checked: ${py.reason}`);
  else {
    const d = maxDiff(want, py.value.log_probs.flat());
    t.true(d < 1e-4, `PEFT's log-probs differ by ${d}`);
    t.log(`PEFT loads the exported adapter dir; log-probs agree within ${d.toExponential(2)}`);
  }
  adapted.dispose();
});

test("LoRA export: `torl eval --model` takes the PEFT adapter dir and the merged export, with the same answers", async (t) => {
  const base = mkdtempSync(join(root, "tiny-"));
  const tiny = createRandomPretrained(base, buildByteBpeTokenizer(), TINY_TEST_ARCH, { seed: 4, std: 0.1 });
  const lora = loraConfigOf({ lora_rank: 2, lora_alpha: 4, target_modules: "all-linear" })!;
  // trained-looking adapters: B not zero, so the adapted model is not the base
  const adapters = initialAdapterValues(tiny.config, lora, 5);
  for (const [name, v] of adapters)
    if (name.includes("lora_B")) for (let i = 0; i < v.length; i++) v[i] = Math.sin(i) * 0.2;
  tiny.dispose();
  const ckpt = checkpointOf(base, adapters, { lora_rank: 2, lora_alpha: 4, target_modules: "all-linear" });
  const peftDir = join(root, "tiny-peft");
  const mergedDir = join(root, "tiny-merged");
  exportCheckpoint(ckpt, { out: peftDir, adapter: "peft" });
  exportCheckpoint(ckpt, { out: mergedDir, adapter: "merged" });
  const a = await evaluateQuietly(peftDir, join(root, "eval-peft.json"));
  const b = await evaluateQuietly(mergedDir, join(root, "eval-merged.json"));
  t.is(a.samples.length, 2);
  t.deepEqual(
    a.samples.map((s) => s.response),
    b.samples.map((s) => s.response),
  );
  const c = await evaluateQuietly(base, join(root, "eval-base.json"));
  t.notDeepEqual(
    c.samples.map((s) => s.response),
    a.samples.map((s) => s.response),
    "the adapters change the answers",
  );
});

test("LoRA export: --adapter on a full fine-tuning checkpoint is refused", (t) => {
  const { base, ckpt } = loraCheckpoint();
  rmSync(join(ckpt, "global_step_2", "actor", "huggingface", "adapter_config.json"));
  t.throws(() => exportCheckpoint(ckpt, { out: join(root, "x"), adapter: "peft", model: base }), {
    instanceOf: ExportError,
    message: /not a LoRA checkpoint/,
  });
});
