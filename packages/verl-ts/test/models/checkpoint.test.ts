import { copyFileSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  bundledQwenTokenizerDir,
  createRandomPretrained,
  generate,
  loadModel,
  loadPretrained,
  loadTokenizer,
  ModelFormatError,
  makeQwen2Config,
  parseHfConfig,
  Qwen2Model,
  readCheckpointDir,
  saveModel,
  selectBackend,
  writeSafetensors,
} from "../../src/index.js";
import { tempDirs } from "./helpers.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models", "qwen2-tiny");
const tmp = tempDirs("torl-models");

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("save then load round-trips every parameter, single file and sharded with an index", async (t) => {
  const cfg = makeQwen2Config({
    vocabSize: 30,
    hiddenSize: 16,
    numHiddenLayers: 2,
    numAttentionHeads: 2,
    numKeyValueHeads: 1,
    tieWordEmbeddings: false,
  });
  const model = Qwen2Model.random(cfg, { seed: 3 });
  for (const maxShardBytes of [undefined, 4096]) {
    const dir = tmp();
    await saveModel(model, dir, { maxShardBytes });
    if (maxShardBytes)
      t.truthy(
        JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")).weight_map[
          "lm_head.weight"
        ],
      );
    const back = loadModel(dir);
    const a = await model.getParameters();
    const b = await back.getParameters();
    t.is(b.size, a.size);
    for (const [k, v] of a) t.deepEqual(b.get(k), v, k);
    back.dispose();
  }
  model.dispose();
});

test("bf16 save keeps values within bf16 precision", async (t) => {
  const cfg = makeQwen2Config({ vocabSize: 20, hiddenSize: 8, numHiddenLayers: 1, numAttentionHeads: 2 });
  const model = Qwen2Model.random(cfg, { seed: 4, std: 0.3 });
  const dir = tmp();
  await saveModel(model, dir, { dtype: "BF16" });
  t.is(JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).torch_dtype, "bfloat16");
  const back = loadModel(dir);
  const a = await model.getParameters();
  for (const [k, v] of await back.getParameters()) {
    const ref = a.get(k)!;
    for (let i = 0; i < v.length; i++)
      t.true(Math.abs(v[i]! - ref[i]!) <= Math.abs(ref[i]!) * 2 ** -8 + 1e-9, k);
  }
  model.dispose();
  back.dispose();
});

test("createRandomPretrained writes an HF directory that loads with its tokenizer", (t) => {
  const dir = tmp();
  const tok = buildByteBpeTokenizer({ corpus: "1+1=2\n2+2=4\n".repeat(20), vocabSize: 270 });
  createRandomPretrained(dir, tok, { hiddenSize: 16, numHiddenLayers: 1, numAttentionHeads: 2 }).dispose();
  const { model, tokenizer } = loadPretrained(dir);
  t.is(model.config.vocabSize, tokenizer.vocabSize);
  t.is(tokenizer.decode(tokenizer.encode("3+3=6")), "3+3=6");
  model.dispose();
});

test("a tiny random Qwen2 with the real Qwen tokenizer (the 1.5B recipe's smoke model) saves, loads and generates", async (t) => {
  const dir = tmp();
  const qwenTok = loadTokenizer(bundledQwenTokenizerDir());
  createRandomPretrained(dir, qwenTok, {
    hiddenSize: 8,
    numHiddenLayers: 1,
    numAttentionHeads: 2,
    numKeyValueHeads: 1,
    intermediateSize: 16,
    vocabSize: 151936,
  }).dispose();
  const { model, tokenizer } = loadPretrained(dir);
  t.is(model.config.vocabSize, 151936);
  t.is(tokenizer.eosTokenId, qwenTok.eosTokenId);
  const [out] = await generate(model, tokenizer, [tokenizer.encode("<|im_start|>user\n1+1?<|im_end|>\n")], {
    maxNewTokens: 3,
    temperature: 0,
  });
  t.true(out!.tokenIds.length >= 1 && out!.tokenIds.length <= 3);
  model.dispose();
});

function copyFixture(): string {
  const dir = tmp();
  for (const f of ["config.json", "model.safetensors"]) copyFileSync(join(FIX, f), join(dir, f));
  return dir;
}

test.serial("a truncated safetensors file is refused naming the file and the tensor", (t) => {
  const dir = copyFixture();
  const file = join(dir, "model.safetensors");
  truncateSync(file, readFileSync(file).length - 100);
  const before = tf.memory().numTensors;
  const err = t.throws(() => loadModel(dir), { instanceOf: ModelFormatError });
  t.is(err?.file, file);
  t.truthy(err?.key);
  t.regex(err!.message, /truncated/);
  t.is(tf.memory().numTensors, before, "nothing half-loaded");
});

test("a corrupt header is refused naming the file", (t) => {
  const dir = copyFixture();
  const file = join(dir, "model.safetensors");
  const buf = readFileSync(file);
  buf.write("}}}}", 8);
  writeFileSync(file, buf);
  const err = t.throws(() => loadModel(dir), { instanceOf: ModelFormatError });
  t.is(err?.file, file);
  t.regex(err!.message, /JSON/);
  writeFileSync(file, Buffer.alloc(4));
  t.throws(() => readCheckpointDir(dir), { message: /truncated/ });
});

test("a tensor whose shape does not match config.json is refused naming it", (t) => {
  const dir = copyFixture();
  const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  cfg.intermediate_size = 40;
  writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
  const err = t.throws(() => loadModel(dir), { instanceOf: ModelFormatError });
  t.is(err?.key, "model.layers.0.mlp.gate_proj.weight");
  t.regex(err!.message, /\[48,32\].*\[40,32\]/);
});

test("a missing tensor, unknown architecture, missing tokenizer.json and bad config values are refused", (t) => {
  const dir = tmp();
  writeFileSync(join(dir, "config.json"), readFileSync(join(FIX, "config.json")));
  writeSafetensors(join(dir, "model.safetensors"), [
    { name: "model.embed_tokens.weight", shape: [48, 32], data: new Float32Array(48 * 32) },
  ]);
  t.throws(() => loadModel(dir), {
    instanceOf: ModelFormatError,
    message: /model\.layers\.0\.input_layernorm\.weight.*missing/,
  });
  t.throws(() => parseHfConfig({ architectures: ["MambaForCausalLM"], hidden_size: 8 }, "x/config.json"), {
    message: /x\/config\.json \[architectures\]: unknown architecture/,
  });
  t.throws(
    () =>
      parseHfConfig(
        { architectures: ["Qwen2ForCausalLM"], hidden_size: 8, num_attention_heads: 3, vocab_size: 4 },
        "c.json",
      ),
    {
      message: /c\.json/,
    },
  );
  const err = t.throws(() => loadPretrained(dir), { instanceOf: ModelFormatError });
  t.is(err?.file, join(dir, "tokenizer.json"));
  t.throws(() => loadModel(tmp()), { message: /config\.json not found/ });
});
