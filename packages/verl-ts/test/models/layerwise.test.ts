import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { installNativeMatmul, padBatch, Qwen2Model, selectBackend, tokenLogProbs } from "../../src/index.js";
import { SHARED_BLOCK_ROWS, sharedBlockGroups } from "../../src/models/decoder-block.js";
import { type LayerTensors, type LayerwiseHooks, layerwiseStep } from "../../src/models/layerwise.js";
import { cloneKeepingBits } from "../../src/models/native-matmul-bf16.js";
import { bitsOnlyVariables } from "../../src/models/qwen2.js";
import { addEmbeddingGradRows, embeddingRows } from "../../src/models/wasm-host-kernels.js";
import { nativeAddon } from "./helpers.js";
import { threeLayerTestConfig } from "./tiny-config.js";

// The layer-by-layer step FSDP trains with gives the gradients of one whole-model tape, for every
// parameter, and leaves no tensor behind.

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

const LAYER = /^model\.layers\.(\d+)\./;

for (const tied of [false, true]) {
  test.serial(
    `layerwise gradients equal the whole-model gradients (${tied ? "tied" : "untied"} embeddings)`,
    async (t) => {
      const cfg = threeLayerTestConfig({ attentionBias: !tied, tieWordEmbeddings: tied });
      const model = Qwen2Model.random(cfg, { seed: 9, std: 0.3 });
      const batch = padBatch(
        [
          [1, 2, 3, 4, 5, 6],
          [7, 8],
          [9, 10, 11, 12],
        ],
        "left",
      );
      const weight = tf.randomNormal([batch.batch, batch.length], 0, 1, "float32", 3);
      const loss = () => {
        const s = tokenLogProbs(model, batch, { withEntropy: true });
        return tf.add(tf.sum(tf.mul(s.logProbs, weight)), tf.mul(tf.sum(s.entropy!), 0.1)) as tf.Scalar;
      };
      const vars = model.variables();
      const names = model.specs.map((s) => s.name);
      const whole = tf.variableGrads(loss, vars);
      whole.value.dispose();
      const expected = new Map<string, Float32Array>();
      for (const [i, v] of vars.entries()) {
        expected.set(names[i]!, (await whole.grads[v.name]!.data()) as Float32Array);
        whole.grads[v.name]!.dispose();
      }

      const tensorsBefore = tf.memory().numTensors;
      const got = new Map<string, Float32Array>();
      const add = async (name: string, g: tf.Tensor) => {
        const host = (await g.data()) as Float32Array;
        const acc = got.get(name);
        if (acc) for (let k = 0; k < acc.length; k++) acc[k]! += host[k]!;
        else got.set(name, host.slice());
      };
      const headVars = vars.filter((_, i) => !LAYER.test(names[i]!));
      const nameOfVar = new Map(vars.map((v, i) => [v.name, names[i]!]));
      const order: string[] = [];
      await layerwiseStep(model, batch, headVars, loss, {
        layerWeights: async (i) => {
          order.push(`weights ${i}`);
          const layer = names.filter((n) => n.startsWith(`model.layers.${i}.`));
          return new Map(layer.map((n) => [n, tf.clone(model.variable(n))])) as LayerTensors;
        },
        layerGradients: async (i, grads) => {
          order.push(`grads ${i}`);
          for (const [n, g] of grads!) await add(n, g);
        },
        headGradients: async (grads) => {
          order.push("head");
          for (const [v, g] of grads!) await add(nameOfVar.get(v)!, g);
        },
        embeddingGradient: async (g) => {
          order.push("embedding");
          await add("model.embed_tokens.weight", g!);
        },
      });
      t.is(tf.memory().numTensors, tensorsBefore, "no tensor left behind");
      // a rank with no micro-batch left makes the same calls (the collectives) in the same order
      const emptyOrder: string[] = [];
      await layerwiseStep(model, null, headVars, loss, {
        layerWeights: async (i) => {
          emptyOrder.push(`weights ${i}`);
          return new Map() as LayerTensors;
        },
        layerGradients: async (i, grads) => {
          emptyOrder.push(`grads ${i}`);
          t.is(grads, null);
        },
        headGradients: async (grads) => {
          emptyOrder.push("head");
          t.is(grads, null);
        },
        embeddingGradient: async (g) => {
          emptyOrder.push("embedding");
          t.is(g, null);
        },
      });
      t.deepEqual(emptyOrder, order);
      t.deepEqual(order, [
        "weights 0",
        "weights 1",
        "weights 2",
        "head",
        "weights 2",
        "grads 2",
        "weights 1",
        "grads 1",
        "weights 0",
        "grads 0",
        "embedding",
      ]);
      let maxRel = 0;
      for (const [name, e] of expected) {
        const g = got.get(name);
        t.truthy(g, `gradient of ${name}`);
        let scale = 1e-6;
        for (const x of e) scale = Math.max(scale, Math.abs(x));
        for (let k = 0; k < e.length; k++) maxRel = Math.max(maxRel, Math.abs(e[k]! - g![k]!) / scale);
      }
      t.log(`max |layerwise - whole| / max |grad| over parameters: ${maxRel.toExponential(2)}`);
      t.true(maxRel < 1e-5, `${maxRel}`);
      weight.dispose();
      model.dispose();
    },
  );
}

test.serial(
  "the embedding's gradient as rows, added to the tied head's, gives the dense gradient's sum",
  async (t) => {
    const cfg = threeLayerTestConfig({ tieWordEmbeddings: true });
    const model = Qwen2Model.random(cfg, { seed: 5, std: 0.3 });
    // repeated tokens: their rows add up in the dense gradient's order
    const batch = padBatch(
      [
        [1, 2, 3, 2, 5, 2],
        [7, 1],
      ],
      "left",
    );
    const loss = () => tf.sum(tokenLogProbs(model, batch, {}).logProbs) as tf.Scalar;
    const vars = model.variables();
    const names = model.specs.map((s) => s.name);
    const embed = "model.embed_tokens.weight";
    const [V, h] = model.specs.find((s) => s.name === embed)!.shape as [number, number];
    const headVars = vars.filter((_, i) => !LAYER.test(names[i]!));
    const embedVar = vars[names.indexOf(embed)]!.name;
    type EmbeddingHooks = Pick<LayerwiseHooks, "embeddingGradient" | "embeddingRowGradient">;
    const run = async (embedding: (sum: Float32Array) => EmbeddingHooks) => {
      const sum = new Float32Array(V * h);
      await layerwiseStep(model, batch, headVars, loss, {
        layerWeights: async (i) =>
          new Map(
            names
              .filter((n) => n.startsWith(`model.layers.${i}.`))
              .map((n) => [n, tf.clone(model.variable(n))]),
          ) as LayerTensors,
        layerGradients: async () => {},
        headGradients: async (grads) => sum.set((await grads!.get(embedVar)!.data()) as Float32Array),
        ...embedding(sum),
      });
      return sum;
    };
    const tensorsBefore = tf.memory().numTensors;
    const dense = await run((sum) => ({
      embeddingGradient: async (g) => {
        const d = (await g!.data()) as Float32Array;
        for (let k = 0; k < d.length; k++) sum[k]! += d[k]!;
      },
    }));
    let rowsSeen = 0;
    const rows = await run((sum) => ({
      embeddingRowGradient: async (g) => {
        rowsSeen = g!.ids.length;
        addEmbeddingGradRows((await g!.dy.data()) as Float32Array, g!.ids, V, h, sum);
      },
    }));
    t.is(rowsSeen, batch.batch * batch.length);
    t.is(tf.memory().numTensors, tensorsBefore, "no tensor left behind");
    // the same values to the bit (=== : a -0 of the dense sum may be +0 here)
    let differ = 0;
    for (let k = 0; k < dense.length; k++) if (dense[k] !== rows[k]) differ++;
    t.is(differ, 0);
    t.true(dense.some((x) => x !== 0));
    // the two hooks are alternatives: both or neither is refused
    const noop = async () => {};
    for (const hooks of [{ embeddingGradient: noop, embeddingRowGradient: noop }, {}])
      await t.throwsAsync(
        layerwiseStep(model, null, headVars, loss, {
          layerWeights: async () => new Map() as LayerTensors,
          layerGradients: noop,
          headGradients: noop,
          ...hooks,
        }),
        {
          instanceOf: TypeError,
          message: /exactly one of the hooks embeddingGradient and embeddingRowGradient/,
        },
      );
    model.dispose();
  },
);

// last in the file: it installs the addon's products on wasm for the tests after it
for (const tied of [true, false])
  test.serial(
    `a bfloat16 model's step with bits-only matrices and the head's gradient added in place: the same gradients, bit for bit, and no vocabulary-sized tensor (${tied ? "tied" : "untied"})`,
    async (t) => {
      if (!nativeAddon(t)) return;
      installNativeMatmul("wasm");
      const cfg = threeLayerTestConfig({ tieWordEmbeddings: tied });
      const values = Qwen2Model.randomParameters(cfg, { seed: 4, std: 0.3 });
      const model = new Qwen2Model(cfg, values, { dtype: "bfloat16" });
      const batch = padBatch(
        [
          [1, 2, 3, 2, 5, 6],
          [7, 8],
          [9, 10, 11, 12],
        ],
        "left",
      );
      const names = model.specs.map((s) => s.name);
      const headNames = names.filter((n) => !LAYER.test(n));
      const embed = "model.embed_tokens.weight";
      const [V, h] = model.specs.find((s) => s.name === embed)!.shape as [number, number];
      const run = async (inPlace: boolean) => {
        const vars = inPlace ? bitsOnlyVariables(model, headNames) : model.variables(headNames);
        const nameOf = new Map(vars.map((v, i) => [v.name, headNames[i]!]));
        if (inPlace)
          t.throws(() => embeddingRows(vars[headNames.indexOf(embed)]!, batch.ids), {
            message: /holds its bfloat16 bits only/,
          });
        const got = new Map<string, Float32Array>();
        // the head matrices' buffers (zeroed, as a first round finds them): the head adds into them
        const buffers = new Map<string, Float32Array>();
        const bufferOf = (n: string, size: number) => {
          if (!buffers.has(n)) buffers.set(n, new Float32Array(size));
          return buffers.get(n)!;
        };
        const loss = () => tf.sum(tokenLogProbs(model, batch, {}).logProbs) as tf.Scalar;
        const info = await tf.profile(() =>
          layerwiseStep(model, batch, vars, loss, {
            layerWeights: async (i) =>
              new Map(
                names
                  .filter((n) => n.startsWith(`model.layers.${i}.`))
                  .map((n) => [n, cloneKeepingBits(model.variable(n))]),
              ) as LayerTensors,
            layerGradients: async (_, grads) => {
              for (const [n, g] of grads!) got.set(n, ((await g.data()) as Float32Array).slice());
            },
            headGradients: async (grads) => {
              for (const [v, g] of grads!) {
                const n = nameOf.get(v)!;
                const values = (await g.data()) as Float32Array;
                if (g.shape.length === 2) bufferOf(n, values.length).set(values);
                else got.set(n, values.slice());
              }
            },
            ...(inPlace
              ? {
                  headGradientInto: (v: tf.Variable) =>
                    v.shape.length === 2 ? bufferOf(nameOf.get(v.name)!, v.size) : undefined,
                }
              : {}),
            embeddingRowGradient: async (g) => {
              const dy = (await g!.dy.data()) as Float32Array;
              addEmbeddingGradRows(dy, g!.ids, V, h, bufferOf(embed, V * h));
            },
          }),
        );
        for (const [n, b] of buffers) got.set(n, b);
        model.releaseComputeWeights();
        // kernels whose output is the head matrix's size
        const headSized = info.kernels.filter((k) =>
          k.outputShapes.some((shape) => shape?.reduce((a, b) => a * b, 1) === V * h),
        ).length;
        return { got, headSized };
      };
      const tensorsBefore = tf.memory().numTensors;
      const tape = await run(false);
      const inPlace = await run(true);
      t.is(tf.memory().numTensors, tensorsBefore, "no tensor left behind");
      t.deepEqual([...inPlace.got.keys()].sort(), [...tape.got.keys()].sort());
      for (const [n, want] of tape.got) {
        const have = inPlace.got.get(n)!;
        let differ = 0;
        // === : a -0 of the tape's gradient is +0 once added onto the zeroed buffer
        for (let k = 0; k < want.length; k++) if (have[k] !== want[k]) differ++;
        t.is(differ, 0, `${n}: ${differ} values differ`);
      }
      t.true(tape.got.get(embed)!.some((x) => x !== 0));
      // the tape's step makes the head matrix's gradient, [V, h] floats; the in-place one no tensor of that size
      t.true(tape.headSized > 0);
      t.is(inPlace.headSized, 0);
      model.dispose();
    },
  );

test("batches share a layer's products in groups of at most SHARED_BLOCK_ROWS rows, each past the rows that keep their own bits", (t) => {
  // 8 rows or fewer (another kernel), and batches of the cap or more, stay alone; the rest fill groups in order
  t.deepEqual(sharedBlockGroups([33, 33, 8, 40], 8), [[0, 1, 3], [2]]);
  t.deepEqual(sharedBlockGroups([300, 300, 200], 8), [[0], [1, 2]]);
  t.deepEqual(sharedBlockGroups([SHARED_BLOCK_ROWS, 20, 20], 8), [[0], [1, 2]]);
  t.deepEqual(sharedBlockGroups([100, 100, 100], 8, 250), [[0, 1], [2]]);
  // products that do not promise each row its own bits: every batch alone
  t.deepEqual(sharedBlockGroups([33, 33], undefined), [[0], [1]]);
  t.deepEqual(sharedBlockGroups([], 8), []);
});
