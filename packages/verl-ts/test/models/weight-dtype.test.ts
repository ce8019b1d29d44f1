/**
 * bf16 / fp16 weight storage: weights held as 16-bit patterns between passes, widened to float32 for
 * compute; saved and reloaded without a second rounding.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  generate,
  HalfArray,
  loadModel,
  measureWeightBytes,
  padBatch,
  Qwen2Model,
  readSafetensorsHeader,
  readSafetensorsStored,
  saveModel,
  selectBackend,
  WeightNotHeldError,
  writeSafetensors,
} from "../../src/index.js";
import { floatToBf16 } from "../../src/models/half-precision.js";
import { amxProducts, maxRelativeDiff, tempDirs, withoutAmx } from "./helpers.js";
import { tinyTestConfig } from "./tiny-config.js";

const tmp = tempDirs("torl-dtype");

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

const cfg = tinyTestConfig(50, { tieWordEmbeddings: false });
const batch = padBatch([
  [1, 5, 9, 3, 7, 2],
  [4, 4, 8],
]);

async function logits(model: Qwen2Model): Promise<Float32Array> {
  const out = model.forward(batch);
  try {
    return (await out.data()) as Float32Array;
  } finally {
    out.dispose();
    model.releaseComputeWeights();
  }
}

test("bf16 and fp16 round to nearest even, and widen back exactly", (t) => {
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even mantissa (1.0)
  const values = [1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, 65504, 1e-8, 0.1];
  const bf = HalfArray.fromFloat32(values, "bfloat16");
  t.deepEqual([...bf.bits.slice(0, 4)], [0x3f80, 0x3f80, 0x3f82, 0xc020]);
  const back = bf.toFloat32();
  t.is(back[0], 1);
  t.is(back[2], 1 + 2 ** -6);
  t.is(
    HalfArray.fromFloat32(back, "bfloat16").toFloat32()[6],
    back[6],
    "rounding a bf16 value again changes nothing",
  );
  const h = HalfArray.fromFloat32(values, "float16");
  t.is(h.toFloat32()[4], 65504, "largest float16");
  t.is(h.toFloat32()[3], -2.5);
  t.is(h.byteLength, 2 * values.length);
});

test("rounding a Float32Array to bf16 gives the per-value function's bits (ties, NaN, infinities, subnormals)", (t) => {
  const special = [
    0x3f808000, 0x3f818000, 0x7f800000, 0xff800000, 0x7f800001, 0xffc00000, 0x7f7fffff, 0x00000001,
  ];
  const words = new Uint32Array(200_000);
  words.set(special);
  let s = 12345;
  for (let i = special.length; i < words.length; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    words[i] = (s ^ (s << 13)) >>> 0;
  }
  const values = new Float32Array(words.buffer);
  const perValue = Uint16Array.from(values, floatToBf16);
  t.deepEqual(HalfArray.fromFloat32(values, "bfloat16").bits, perValue);
  // from a plain array (the per-value loop) and into existing storage (assign): the same bits
  t.deepEqual(
    HalfArray.fromFloat32(Array.from(values.subarray(0, 1000)), "bfloat16").bits,
    perValue.subarray(0, 1000),
  );
  const held = new HalfArray("bfloat16", new Uint16Array(values.length));
  held.assign(values);
  t.deepEqual(held.bits, perValue);
});

test.serial(
  "bf16 storage halves the weight bytes held, and between passes no tensor holds them",
  async (t) => {
    const values = Qwen2Model.randomParameters(cfg, { seed: 1, std: 0.3 });
    const n = [...values.values()].reduce((a, v) => a + v.length, 0);
    const before = tf.memory().numBytes;
    const fp32 = new Qwen2Model(cfg, values);
    const fp32Tensors = tf.memory().numBytes - before;
    const bf16 = new Qwen2Model(cfg, values, { dtype: "bfloat16" });
    const bf16Tensors = tf.memory().numBytes - before - fp32Tensors;
    t.is(fp32.weightBytes(), 4 * n);
    t.is(bf16.weightBytes(), 2 * n);
    t.is(bf16.weightBytes() / fp32.weightBytes(), 0.5);
    t.true(fp32Tensors >= 4 * n, "float32 weights sit in tensors");
    t.true(bf16Tensors < 4 * n * 0.01, `bf16 weights are not in tensors (${bf16Tensors} bytes)`);
    t.is(bf16.weightTensorBytes(), 0);
    // a pass widens them, and its end frees the widened copies
    await logits(bf16);
    t.is(bf16.weightTensorBytes(), 0);
    t.is(tf.memory().numBytes - before - fp32Tensors, bf16Tensors);
    fp32.dispose();
    bf16.dispose();
  },
);

test.serial(
  "logits with bf16-stored weights equal float32 compute on the rounded weights, within bf16 precision of float32",
  async (t) => {
    const values = Qwen2Model.randomParameters(cfg, { seed: 2, std: 0.3 });
    const fp32 = new Qwen2Model(cfg, values);
    const bf16 = new Qwen2Model(cfg, values, { dtype: "bfloat16" });
    const rounded = new Map(
      [...values].map(([k, v]) => [k, HalfArray.fromFloat32(v, "bfloat16").toFloat32()]),
    );
    const fp32OnRounded = new Qwen2Model(cfg, rounded);
    const [a, b, c] = [await logits(fp32), await logits(bf16), await logits(fp32OnRounded)];
    // compute is float32 on exactly the bf16 weights. Without AMX tiles: bit for bit what float32 gives on
    // those weights (the same sgemm calls on the same values, so the same summation order on any CPU). On
    // the tiles (x split exactly into bf16 pieces) a float32 product in another order: within its rounding
    if (amxProducts()) t.true(maxRelativeDiff(b, c) < 1e-5, `on AMX tiles: ${maxRelativeDiff(b, c)}`);
    t.deepEqual(await withoutAmx(() => logits(bf16)), c);
    let maxDiff = 0;
    let maxAbs = 0;
    for (let i = 0; i < a.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(a[i]! - b[i]!));
      maxAbs = Math.max(maxAbs, Math.abs(a[i]!));
    }
    t.true(maxDiff > 0, "the rounding is real");
    // bf16 keeps 8 significant bits (relative error <= 2^-9 per weight); a few layers compound it
    t.true(maxDiff <= maxAbs * 2 ** -5, `max |fp32 - bf16| ${maxDiff} vs logits up to ${maxAbs}`);
    for (const m of [fp32, bf16, fp32OnRounded]) m.dispose();
  },
);

test("a bf16 model trains through its widened copies; new values are rounded into the stored bits", async (t) => {
  const bf16 = Qwen2Model.random(cfg, { seed: 3, std: 0.3, dtype: "bfloat16" });
  const vars = bf16.variables();
  const { grads, value } = tf.variableGrads(() => tf.mean(tf.square(bf16.forward(batch))) as tf.Scalar, vars);
  value.dispose();
  t.is(Object.keys(grads).length, vars.length, "a gradient for every weight");
  for (const g of Object.values(grads)) g.dispose();
  const name = "model.layers.0.mlp.up_proj.weight";
  const next = (await bf16.getParameters()).get(name)!.map((x) => x + 0.001);
  bf16.setParameters({ [name]: next });
  const stored = (await bf16.getParameters()).get(name)!;
  t.deepEqual(stored, HalfArray.fromFloat32(next, "bfloat16").toFloat32());
  // the live widened copy (a variable the optimizer's tape holds) follows the assignment
  t.deepEqual((await bf16.variable(name).data()) as Float32Array, stored);
  bf16.releaseComputeWeights();
  bf16.dispose();
});

test.serial("a model saved in bf16 reloads as bf16, bit for bit", async (t) => {
  const bf16 = Qwen2Model.random(cfg, { seed: 4, std: 0.3, dtype: "bfloat16" });
  const dir = tmp();
  await saveModel(bf16, dir);
  t.is(JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).torch_dtype, "bfloat16");
  const header = readSafetensorsHeader(join(dir, "model.safetensors"));
  t.true([...header.entries.values()].every((e) => e.dtype === "BF16"));
  const back = loadModel(dir, { dtype: "auto" });
  t.is(back.dtype, "bfloat16");
  t.is(back.weightBytes(), bf16.weightBytes());
  const [a, b] = [await bf16.toHfTensors(), await back.toHfTensors()];
  for (const [i, x] of a.entries()) {
    const y = b[i]!;
    t.true(x.data instanceof HalfArray && y.data instanceof HalfArray, x.name);
    t.deepEqual((y.data as HalfArray).bits, (x.data as HalfArray).bits, x.name);
  }
  t.deepEqual(await logits(back), await logits(bf16));
  // asked for float32, the same file widens exactly: the same logits (bit for bit where no AMX tiles take
  // the bf16 products in another summation order; see the test above)
  const wide = loadModel(dir);
  t.is(wide.dtype, "float32");
  if (amxProducts()) t.true(maxRelativeDiff(await logits(wide), await logits(bf16)) < 1e-5);
  t.deepEqual(await logits(wide), await withoutAmx(() => logits(bf16)));
  for (const m of [bf16, back, wide]) m.dispose();
});

test("safetensors: half bits already in the file's dtype are written and read as they are", (t) => {
  const dir = tmp();
  // a NaN with a payload: rounding through float32 would make it the canonical 0x7fc0
  const bits = new Uint16Array([0x3f80, 0x7fc1, 0x0001, 0xbf80]);
  writeSafetensors(
    join(dir, "x.safetensors"),
    [{ name: "w", shape: [2, 2], data: new HalfArray("bfloat16", bits) }],
    "BF16",
  );
  const back = readSafetensorsStored(join(dir, "x.safetensors")).get("w")!;
  t.true(back.data instanceof HalfArray);
  t.deepEqual((back.data as HalfArray).bits, bits);
  // into another dtype they are converted (bf16 1.0 is fp16 0x3c00)
  writeSafetensors(
    join(dir, "y.safetensors"),
    [{ name: "w", shape: [1], data: new HalfArray("bfloat16", bits.slice(0, 1)) }],
    "F16",
  );
  t.deepEqual(
    (readSafetensorsStored(join(dir, "y.safetensors")).get("w")!.data as HalfArray).bits,
    new Uint16Array([0x3c00]),
  );
});

test.serial(
  "measureWeightBytes: the bf16 model holds exactly half the float32 model's weight bytes, none in tensors",
  (t) => {
    const f = measureWeightBytes(cfg);
    t.is(f.weight_bytes_fp32, 4 * f.parameters);
    t.is(f.weight_bytes_bf16 * 2, f.weight_bytes_fp32);
    t.true(f.model_tensor_bytes_fp32 >= f.weight_bytes_fp32);
    t.true(f.model_tensor_bytes_bf16 < f.weight_bytes_bf16 / 10, "only the rotary table");
  },
);

test.serial(
  "a large host-held model widens layer by layer when no gradient is taken: same logits, only one layer's copies at a time",
  async (t) => {
    const values = Qwen2Model.randomParameters(cfg, { seed: 5, std: 0.3 });
    const whole = new Qwen2Model(cfg, values, { dtype: "bfloat16" });
    const layered = new Qwen2Model(cfg, values, { dtype: "bfloat16", layerByLayerAboveBytes: 0 });
    const out = layered.forward(batch);
    // after the pass only the embedding, the final norm and the LM head are still widened
    const layerBytes = layered.weightTensorBytes();
    t.true(layerBytes > 0 && layerBytes < whole.weightBytes(), `${layerBytes} bytes widened after the pass`);
    t.deepEqual((await out.data()) as Float32Array, await logits(whole));
    out.dispose();
    layered.releaseComputeWeights();
    // under a gradient tape every layer's copy stays for the backward pass: gradients as with the whole model
    const grads = (m: Qwen2Model) => {
      const { grads, value } = tf.variableGrads(
        () => tf.mean(tf.square(m.forward(batch))) as tf.Scalar,
        m.variables(),
      );
      value.dispose();
      return Promise.all(Object.values(grads).map((g) => g.data()));
    };
    t.deepEqual(await grads(layered), await grads(whole));
    for (const m of [whole, layered]) {
      m.releaseComputeWeights();
      m.dispose();
    }
  },
);

test.serial(
  "layer-by-layer widening generates with the KV cache exactly what the whole-model copy generates",
  async (t) => {
    const tok = buildByteBpeTokenizer();
    const c = tinyTestConfig(tok.vocabSize);
    const values = Qwen2Model.randomParameters(c, { seed: 6, std: 0.5 });
    const whole = new Qwen2Model(c, values, { dtype: "bfloat16", trainable: false });
    const layered = new Qwen2Model(c, values, {
      dtype: "bfloat16",
      trainable: false,
      layerByLayerAboveBytes: 0,
    });
    const prompts = [tok.encode("12+7="), tok.encode("x")];
    const run = async (m: Qwen2Model) => {
      const out = await generate(m, tok, prompts, { maxNewTokens: 16, temperature: 0 });
      m.releaseComputeWeights();
      return out.map((o) => [...o.tokenIds]);
    };
    t.deepEqual(await run(layered), await run(whole));
    whole.dispose();
    layered.dispose();
  },
);

test("evicted weights: nothing held, use refused by name, setParameters brings them back in the storage dtype", async (t) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    const values = Qwen2Model.randomParameters(cfg, { seed: 3 });
    const model = new Qwen2Model(cfg, values, { dtype, trainable: false });
    const expected = await logits(model);
    const atRest = model.weightBytes();
    const before = tf.memory().numBytes;
    t.is(model.evictWeights(), atRest);
    t.is(model.weightBytes(), 0);
    // a float32 model's resident tensors go too
    t.is(before - tf.memory().numBytes, dtype === "float32" ? atRest : 0);
    t.false(model.holdsWeight("model.norm.weight"));
    t.throws(() => model.forward(batch), {
      instanceOf: WeightNotHeldError,
      message: /model\.embed_tokens\.weight/,
    });
    await t.throwsAsync(model.getParameters(), { instanceOf: WeightNotHeldError });
    model.setParameters(values);
    t.is(model.weightBytes(), atRest);
    t.deepEqual(await logits(model), expected, `${dtype}: the same logits after coming back`);
    model.dispose();
  }
});

test("a bf16 model's public variables() hold their values; the bits-only option is not public and is refused", async (t) => {
  const model = Qwen2Model.random(cfg, { seed: 3, dtype: "bfloat16" });
  const name = "model.layers.0.mlp.down_proj.weight";
  const [v] = model.variables([name]);
  const widened = (await model.getParameters([name])).get(name)!;
  t.deepEqual(await v!.data(), widened, "the tensor's values are the weight's widened bits");
  const index = await import("../../src/index.js");
  t.false("bitsOnlyVariables" in index, "bits-only tensors are internal to the package");
  const untyped = model.variables as (names: string[], options: object) => tf.Variable[];
  t.throws(() => untyped.call(model, [name], { bitsOnly: true }), {
    instanceOf: TypeError,
    message: /takes the names only/,
  });
  model.releaseComputeWeights();
});
