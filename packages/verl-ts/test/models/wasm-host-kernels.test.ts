/**
 * The wasm kernels of wasm-host-kernels.ts against the generic ops they replace: 16-bit weights widened on
 * the heap bit for bit as the host widening, and the embedding's one-pass gradient as tf.gather's (within
 * float32 rounding of the repeated rows' sums).
 */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { HalfArray, installNativeMatmul, selectBackend, WeightStore } from "../../src/index.js";
import {
  addEmbeddingGradRows,
  embeddingGradInto,
  embeddingRows,
  widenedTensor,
} from "../../src/models/wasm-host-kernels.js";
import { seededUniform as random } from "./helpers.js";

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  installNativeMatmul("wasm");
});

for (const dtype of ["bfloat16", "float16"] as const)
  test.serial(`${dtype} values widen on the wasm heap exactly as on the host`, async (t) => {
    const values = Float32Array.from(random(6 * 11, 1, 3));
    values[0] = 0;
    values[1] = -0;
    values[2] = 1e-7; // a float16 subnormal
    const half = HalfArray.fromFloat32(values, dtype);
    const x = widenedTensor(half, [6, 11]);
    t.deepEqual(x.shape, [6, 11]);
    t.deepEqual(await x.data(), half.toFloat32());
    x.dispose();
  });

test.serial("a bf16 weight store's compute tensors hold exactly the widened bits", async (t) => {
  const specs = [{ name: "w", shape: [5, 9] }];
  const values = Float32Array.from(random(45, 2, 1));
  const store = new WeightStore(specs, new Map([["w", values]]), { dtype: "bfloat16" });
  t.deepEqual(await store.tensor("w").data(), HalfArray.fromFloat32(values, "bfloat16").toFloat32());
  store.dispose();
});

test.serial("embedding rows and their gradient equal tf.gather's, repeated ids included", async (t) => {
  const V = 23;
  const h = 7;
  const ids = Int32Array.from([3, 0, 22, 3, 3, 11, 0]);
  const table = tf.tensor2d(random(V * h, 3, 1), [V, h]);
  const dy = tf.tensor2d(random(ids.length * h, 4, 2), [ids.length, h]);
  const rows = embeddingRows(table, ids);
  const gathered = tf.gather(table, tf.tensor1d(ids, "int32"));
  t.deepEqual(await rows.data(), await gathered.data());
  const [mine] = tf.grads((e) => embeddingRows(e as tf.Tensor2D, ids))([table], dy);
  const [theirs] = tf.grads((e) => tf.gather(e, tf.tensor1d(ids, "int32")))([table], dy);
  t.deepEqual(mine!.shape, [V, h]);
  const [a, b, d] = (await Promise.all([mine!.data(), theirs!.data(), dy.data()])) as Float32Array[];
  // A row's gradient sums at most `ids.length` values of dy, in whatever order each side adds them.
  const bound = ids.length * 2 ** -23 * Math.max(...d!.map(Math.abs));
  let worst = 0;
  for (let i = 0; i < a!.length; i++) worst = Math.max(worst, Math.abs(a![i]! - b![i]!));
  t.log(`max |one pass - tf.gather's| = ${worst} (bound ${bound.toExponential(2)})`);
  t.true(worst <= bound, `max |diff| ${worst} > ${bound}`);
  // rows nobody names are exactly 0
  for (let j = 0; j < h; j++) t.is(a![5 * h + j], 0);
  tf.dispose([table, dy, rows, gathered, mine!, theirs!]);
});

test("the embedding gradient refuses an id outside the vocabulary and mismatched sizes", (t) => {
  const out = new Float32Array(4 * 2);
  t.throws(() => embeddingGradInto(new Float32Array(2), Int32Array.from([4]), 4, 2, out), {
    instanceOf: RangeError,
    message: /id 4 outside 0\.\.3/,
  });
  t.throws(() => embeddingGradInto(new Float32Array(3), Int32Array.from([1]), 4, 2, out), {
    instanceOf: RangeError,
  });
});

test("the embedding's gradient added as rows gives the bits of adding the dense gradient, repeats included", (t) => {
  const V = 29;
  const h = 5;
  const ids = Int32Array.from([4, 0, 28, 4, 4, 17, 0, 9]);
  const dy = Float32Array.from(random(ids.length * h, 6, 100));
  const base = Float32Array.from(random(V * h, 7, 1e-3)); // another gradient of the same matrix (the tied head's)
  const dense = new Float32Array(V * h);
  embeddingGradInto(dy, ids, V, h, dense);
  const expected = base.map((b, k) => Math.fround(b + dense[k]!));
  const mine = base.slice();
  addEmbeddingGradRows(dy, ids, V, h, mine);
  t.deepEqual(new Uint32Array(mine.buffer), new Uint32Array(expected.buffer));
  t.throws(() => addEmbeddingGradRows(dy, Int32Array.from([...ids.subarray(1), V]), V, h, mine), {
    instanceOf: RangeError,
    message: /id 29 outside 0..28/,
  });
  t.throws(() => addEmbeddingGradRows(dy.subarray(1), ids, V, h, mine), { instanceOf: RangeError });
});
