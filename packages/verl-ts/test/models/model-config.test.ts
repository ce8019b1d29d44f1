/**
 * config.json as transformers writes it, in both of its rotary formats (rope_theta / rope_scaling, and
 * transformers 5's rope_parameters), the architectures torl-ts implements (Qwen2/2.5, Qwen3 dense,
 * Llama 3) chosen by `architectures` / `model_type`, and refusals, naming the key, of every setting that
 * would change the model's function and is not implemented.
 */
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { loadModel, ModelFormatError, parseHfConfig, selectBackend, toHfConfig } from "../../src/index.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models");

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

const base = {
  vocab_size: 40,
  hidden_size: 24,
  intermediate_size: 40,
  num_hidden_layers: 1,
  num_attention_heads: 2,
  num_key_value_heads: 1,
};
const qwen2 = { architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", ...base };
const llama = { architectures: ["LlamaForCausalLM"], model_type: "llama", ...base };
const qwen3 = { architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", ...base, head_dim: 16 };
const LLAMA3 = {
  rope_type: "llama3",
  factor: 32.0,
  low_freq_factor: 1.0,
  high_freq_factor: 4.0,
  original_max_position_embeddings: 8192,
};

test("rope_parameters (transformers 5) gives the rotary base and the llama3 scaling, like rope_theta / rope_scaling", (t) => {
  const c = parseHfConfig({ ...qwen2, rope_parameters: { rope_theta: 1000000.0, rope_type: "default" } });
  t.is(c.ropeTheta, 1000000);
  t.is(c.ropeScaling, undefined);
  const l = parseHfConfig({ ...llama, rope_parameters: { rope_theta: 500000.0, ...LLAMA3 } });
  t.is(l.ropeTheta, 500000);
  t.deepEqual(l.ropeScaling, {
    type: "llama3",
    factor: 32,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 8192,
  });
  const legacy = parseHfConfig({ ...llama, rope_theta: 500000.0, rope_scaling: LLAMA3 });
  t.deepEqual(legacy.ropeScaling, l.ropeScaling);
  t.is(legacy.ropeTheta, 500000);
  // both present and agreeing (an export keeps the source's rope_parameters beside its own rope_theta)
  t.is(
    parseHfConfig({ ...qwen2, rope_theta: 1e6, rope_parameters: { rope_theta: 1e6, rope_type: "default" } })
      .ropeTheta,
    1e6,
  );
});

test("a model saved with rope_parameters computes with its rotary base: logits match the PyTorch reference", (t) => {
  // llama-tiny-tied's base is 500000; read as the default 10000 its logits are off by far more than 1e-4
  const dir = mkdtempSync(join(tmpdir(), "rope-params-"));
  cpSync(join(FIX, "llama-tiny-tied"), dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  cfg.rope_parameters = { rope_theta: cfg.rope_theta, rope_type: "default" };
  delete cfg.rope_theta;
  writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
  const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
  const B = expected.ids.length;
  const L = expected.ids[0].length;
  const model = loadModel(dir);
  t.is(model.config.ropeTheta, 500000);
  const batch = {
    ids: Int32Array.from(expected.ids.flat()),
    mask: Uint8Array.from(expected.mask.flat()),
    batch: B,
    length: L,
  };
  const got = tf.tidy(() => model.forward(batch)).dataSync();
  const V = model.config.vocabSize;
  let maxErr = 0;
  for (let b = 0; b < B; b++)
    for (let i = 0; i < L; i++)
      if (batch.mask[b * L + i])
        for (let v = 0; v < V; v++)
          maxErr = Math.max(maxErr, Math.abs(got[(b * L + i) * V + v]! - expected.logits[b][i][v]));
  t.true(maxErr < 1e-4, `max |diff| ${maxErr}`);
  model.dispose();
});

/** Asserts parseHfConfig refuses `json` with a ModelFormatError naming `key`. */
function refuses(t: import("ava").ExecutionContext, json: object, key: string, message?: RegExp): void {
  const err = t.throws(() => parseHfConfig(json, "m/config.json"), { instanceOf: ModelFormatError });
  t.is(err?.key, key, err?.message);
  t.true(err!.message.includes(`[${key}]`), err?.message);
  if (message) t.regex(err!.message, message);
}

test("rotary settings that are not implemented are refused naming the key, never run as the default", (t) => {
  refuses(
    t,
    { ...qwen2, rope_parameters: { rope_theta: 1e6, rope_type: "yarn", factor: 4 } },
    "rope_parameters.rope_type",
    /yarn/,
  );
  refuses(t, { ...llama, rope_scaling: { type: "linear", factor: 2 } }, "rope_scaling.type", /linear/);
  refuses(t, { ...llama, rope_scaling: { rope_type: "dynamic", factor: 2 } }, "rope_scaling.rope_type");
  refuses(
    t,
    { ...llama, rope_parameters: { rope_theta: 5e5, ...LLAMA3, factor: undefined } },
    "rope_parameters.factor",
  );
  refuses(
    t,
    { ...llama, rope_parameters: { rope_theta: 5e5, ...LLAMA3, mrope_section: [1, 2] } },
    "rope_parameters.mrope_section",
  );
  refuses(
    t,
    { ...qwen2, rope_parameters: { rope_theta: 1e6, rope_type: "default", partial_rotary_factor: 0.5 } },
    "rope_parameters.partial_rotary_factor",
  );
  refuses(t, { ...qwen2, rope_parameters: { rope_type: "default" } }, "rope_parameters.rope_theta");
  refuses(
    t,
    { ...qwen2, rope_theta: 1e4, rope_parameters: { rope_theta: 1e6, rope_type: "default" } },
    "rope_theta",
    /disagrees/,
  );
  refuses(t, { ...qwen2, partial_rotary_factor: 0.5 }, "partial_rotary_factor");
});

test("other function-changing settings that are not implemented are refused naming the key", (t) => {
  refuses(t, { ...qwen2, use_sliding_window: true, sliding_window: 4096 }, "use_sliding_window");
  refuses(t, { ...qwen3, layer_types: ["full_attention", "sliding_attention"] }, "layer_types");
  refuses(t, { ...qwen2, hidden_act: "gelu_pytorch_tanh" }, "hidden_act", /gelu_pytorch_tanh/);
  refuses(t, { ...llama, attention_bias: true }, "attention_bias");
  refuses(t, { ...qwen3, attention_bias: true }, "attention_bias");
  refuses(t, { ...llama, mlp_bias: true }, "mlp_bias");
  refuses(t, { ...qwen2, attention_dropout: 0.1 }, "attention_dropout");
  refuses(t, { ...qwen2, quantization_config: { quant_method: "awq" } }, "quantization_config");
  // what transformers writes by default passes
  t.notThrows(() =>
    parseHfConfig({
      ...qwen3,
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: 28,
      layer_types: ["full_attention"],
      attention_bias: false,
      attention_dropout: 0.0,
      rope_parameters: { rope_theta: 1e6, rope_type: "default" },
    }),
  );
});

test("architectures picks Qwen2, Qwen3 or Llama; MoE, vision and unknown models are refused by name", (t) => {
  t.is(parseHfConfig(qwen3).architecture, "Qwen3ForCausalLM");
  t.is(parseHfConfig({ ...base, model_type: "qwen3" }).architecture, "Qwen3ForCausalLM");
  t.is(parseHfConfig({ ...base, model_type: "llama" }).architecture, "LlamaForCausalLM");
  refuses(
    t,
    { ...qwen3, architectures: ["Qwen3MoeForCausalLM"], model_type: "qwen3_moe" },
    "architectures",
    /Qwen3MoeForCausalLM/,
  );
  refuses(t, { ...base, model_type: "qwen3_moe" }, "architectures", /qwen3_moe/);
  refuses(
    t,
    { ...qwen2, architectures: ["Qwen2VLForConditionalGeneration"] },
    "architectures",
    /Qwen2VLForConditionalGeneration/,
  );
  refuses(
    t,
    { ...qwen2, architectures: ["MllamaForConditionalGeneration"], model_type: "mllama" },
    "architectures",
    /Mllama/,
  );
  refuses(t, { ...qwen3, model_type: "qwen2" }, "model_type", /qwen2/);
});

test("Qwen3's head_dim: explicit, else transformers' default of 128 (not hidden / heads)", (t) => {
  t.is(parseHfConfig(qwen3).headDim, 16);
  const { head_dim: _, ...noHeadDim } = qwen3;
  t.is(parseHfConfig(noHeadDim).headDim, 128);
  t.is(parseHfConfig(llama).headDim, 12);
});

test("toHfConfig writes each architecture so that it parses back to the same config", (t) => {
  for (const json of [
    qwen2,
    { ...qwen3, tie_word_embeddings: true },
    { ...llama, head_dim: 16, rope_parameters: { rope_theta: 5e5, ...LLAMA3 } },
  ]) {
    const c = parseHfConfig(json);
    const back = toHfConfig(c);
    t.deepEqual(parseHfConfig(back), c);
    // and beside the source's own keys, as an export writes it
    t.deepEqual(parseHfConfig({ ...json, ...back }), c);
  }
});

test("a weight file with a tensor config.json does not ask for is refused naming the tensor", (t) => {
  // Qwen3's q_norm weights under a config.json that names Qwen2: loaded, they would be dropped
  const dir = mkdtempSync(join(tmpdir(), "extra-tensor-"));
  cpSync(join(FIX, "qwen3-tiny"), dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  writeFileSync(
    join(dir, "config.json"),
    JSON.stringify({ ...cfg, architectures: ["LlamaForCausalLM"], model_type: "llama" }),
  );
  const err = t.throws(() => loadModel(dir), { instanceOf: ModelFormatError });
  t.regex(err!.key!, /self_attn\.[qk]_norm\.weight$/);
});
