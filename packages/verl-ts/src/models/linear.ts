/**
 * The linear layer the model is built from: x [N, in] @ w [in, out] (+ b). Weights are held transposed
 * from HF's [out, in] because plain matmuls are ~10x faster than transposed ones on the wasm backend; the
 * gradient is written out for the same reason.
 */

import * as tf from "@tensorflow/tfjs";
import { MATMUL_BF16_FEW_ROWS } from "@torl-ts/blas";
import { nativeBlas } from "./native-blas.js";
import { Bf16Weight, bf16BitsOf, matmulBf16, refuseUnwritten } from "./native-matmul-bf16.js";
import { nativeMatmulActive } from "./native-state.js";
import { hostMemory } from "./wasm-heap.js";

/**
 * A linear layer's weight: a float32 tensor, or bfloat16 bits read in place (native-matmul-bf16.ts), which
 * the model hands out for generation only (no gradient tape).
 */
export type LinearWeight = tf.Tensor | Bf16Weight;

/**
 * x [N, in] @ w [in, out]. The gradient transposes explicitly for XNNPACK (faster on untransposed
 * operands); OpenBLAS reads transposed operands in place, so there the transpose flags save two kernels.
 */
const linearOp = tf.customGrad(((...args: unknown[]) => {
  const [x, w, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
  // A variable outlives the backward and is used as it is; saving copies a tensor on the wasm backend,
  // a weight matrix per use. Other weights (the tied head's transposed embedding) are saved.
  const weightIsVariable = w instanceof tf.Variable;
  save(weightIsVariable ? [x] : [x, w]);
  return {
    value: tf.matMul(x as tf.Tensor2D, w as tf.Tensor2D),
    // In a tidy of its own: the explicit transposes are freed at once, not at the end of the backward.
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
      tf.tidy(() => {
        const xs = saved[0] as tf.Tensor2D;
        const ws = (weightIsVariable ? w : saved[1]) as tf.Tensor2D;
        const d = dy as tf.Tensor2D;
        if (nativeMatmulActive(tf.getBackend()))
          return [tf.matMul(d, ws, false, true), tf.matMul(xs, d, true, false)];
        return [tf.matMul(d, tf.transpose(ws) as tf.Tensor2D), tf.matMul(tf.transpose(xs) as tf.Tensor2D, d)];
      }),
  };
}) as any) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor2D;

/**
 * The bits a weight tensor was widened from, where products read them: on a backend where the addon's
 * kernels run (the same condition under which the model hands out bits in passes without a tape).
 */
function bitsBehind(w: tf.Tensor): Bf16Weight | undefined {
  const bits = nativeMatmulActive(tf.getBackend()) ? bf16BitsOf(w) : undefined;
  if (!bits) refuseUnwritten(w, "a linear layer");
  return bits;
}

/**
 * Whether a product with `w` of more than MATMUL_BF16_FEW_ROWS rows gives each row of the result from its
 * own row of x alone (bfloat16 bits on the addon's AMX tiles): rows of several batches may then share one
 * product and get, bit for bit, what each batch's own product gives.
 */
export function rowsIndependentPast(w: LinearWeight): number | undefined {
  const bits = w instanceof Bf16Weight ? w : nativeMatmulActive(tf.getBackend()) ? bf16BitsOf(w) : undefined;
  return bits && nativeBlas()?.amx().enabled === true ? MATMUL_BF16_FEW_ROWS : undefined;
}

/**
 * Takes a weight's gradient as the two factors it is the product of, instead of adding it into an array:
 * grad[i, j] = sum over k of left[k, i] * right[k, j] (left [rows, a], right [rows, b] for a weight of
 * shape [a, b]). Both are views of the heap, valid only during the call: copy what is kept.
 */
export type WeightGradientSink = (left: Float32Array, right: Float32Array, rows: number) => void;

/** Where a weight's gradient goes instead of the tape (withHostWeightGradients), and how often it went. */
interface HostGradient {
  into: Float32Array | WeightGradientSink;
  /** Products made with the weight while the route stood, and backward passes that added into `into`. */
  products: number;
  added: number;
}

/** The routes standing now, by the weight's data. */
const hostGradients = new WeakMap<object, HostGradient>();

/**
 * Runs `f` (a forward and its backward: tf.grads, tf.variableGrads) with each weight's gradient routed
 * to the host: where a linear layer reads the weight `w` from its bfloat16 bits (the wasm backend with
 * the addon), the layer's backward adds w's gradient into `into` (w's shape, row-major) with one sgemm,
 * in place, or hands its factors to `into` when that is a WeightGradientSink; the tape has no gradient
 * for `w`. No tensor of w's size is made: for the tied LM head, none of the vocabulary's size. Where the
 * layer does not read bits, the tape gives w's gradient as usual and `into` is left alone. Throws when
 * a product routed its gradient but `f` never ran the product's backward (the gradient would be
 * missing without a word).
 */
export function withHostWeightGradients<T>(
  routes: [tf.Tensor, Float32Array | WeightGradientSink][],
  f: () => T,
): T {
  const standing: HostGradient[] = [];
  for (const [w, into] of routes) {
    if (typeof into !== "function" && into.length !== w.size)
      throw new RangeError(`a [${w.shape}] weight's gradient needs ${w.size} values, got ${into.length}`);
    if (hostGradients.has(w.dataId)) throw new Error(`the [${w.shape}] weight's gradient is routed already`);
    const route: HostGradient = { into, products: 0, added: 0 };
    hostGradients.set(w.dataId, route);
    standing.push(route);
  }
  try {
    const result = f();
    for (const [k, route] of standing.entries())
      if (route.added !== route.products)
        throw new Error(
          `the [${routes[k]![0].shape}] weight's gradient was routed to the host by ${route.products} product(s), but ${route.added} backward pass(es) added it: run the backward inside withHostWeightGradients`,
        );
    return result;
  } finally {
    for (const [w] of routes) hostGradients.delete(w.dataId);
  }
}

/**
 * into += w's gradient for y = x @ w (x^T dy, w [in, out]) or y = x @ w^T (dy^T x, w [out, in]), by
 * OpenBLAS on the heap's memory: the same sgemm call as the tape's product for it, added in place. A
 * sink gets the two factors instead (dy and x, or x and dy).
 */
function addWeightGradient(
  x: tf.Tensor,
  dy: tf.Tensor,
  transposed: boolean,
  into: Float32Array | WeightGradientSink,
): void {
  const blas = nativeBlas();
  const xs = hostMemory(x);
  const d = hostMemory(dy);
  if (!blas || !xs || !d)
    throw new Error("a weight gradient routed to the host needs OpenBLAS's products on the wasm heap");
  const [rows, inner] = x.shape as [number, number];
  const outer = dy.shape[1]!;
  if (typeof into === "function") into(transposed ? d : xs, transposed ? xs : d, rows);
  else if (transposed) blas.gemm(d, xs, into, 1, outer, inner, rows, true, false, 0, 0, true);
  else blas.gemm(xs, d, into, 1, inner, outer, rows, true, false, 0, 0, true);
}

/** linearFromBits for a weight whose gradient goes to the host (withHostWeightGradients): x's only. */
function linearFromBitsToHost(
  x: tf.Tensor2D,
  bits: Bf16Weight,
  transposed: boolean,
  route: HostGradient,
): tf.Tensor2D {
  const op = tf.customGrad(((...args: unknown[]) => {
    const [xi, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    save([xi]);
    return {
      value: matmulBf16(xi, bits, transposed),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        addWeightGradient(saved[0]!, dy, transposed, route.into);
        route.added++;
        return [matmulBf16(dy as tf.Tensor2D, bits, !transposed)];
      },
    };
  }) as any) as unknown as (x: tf.Tensor) => tf.Tensor2D;
  route.products++;
  return op(x);
}

/**
 * x @ w for a float32 weight widened from bfloat16 bits: the product reads the bits, as a pass without a
 * tape does (the same kernel, so the same numbers); the gradient of x reads them too, and w's gradient
 * x^T dy is float32 (a tensor, or added into a host array: withHostWeightGradients).
 */
function linearFromBits(x: tf.Tensor2D, w: tf.Tensor, bits: Bf16Weight, transposed: boolean): tf.Tensor2D {
  const route = hostGradients.get(w.dataId);
  if (route) return linearFromBitsToHost(x, bits, transposed, route);
  const op = tf.customGrad(((...args: unknown[]) => {
    const [xi, , save] = args as [tf.Tensor2D, tf.Tensor, tf.GradSaveFunc];
    save([xi]);
    return {
      value: matmulBf16(xi, bits, transposed),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
        tf.tidy(() => {
          const xs = saved[0] as tf.Tensor2D;
          const d = dy as tf.Tensor2D;
          return [
            matmulBf16(d, bits, !transposed),
            transposed ? tf.matMul(d, xs, true, false) : tf.matMul(xs, d, true, false),
          ];
        }),
    };
  }) as any) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor2D;
  return op(x, w);
}

export function linear(x: tf.Tensor2D, w: LinearWeight, b?: tf.Tensor): tf.Tensor2D {
  let y: tf.Tensor2D;
  if (w instanceof Bf16Weight) y = matmulBf16(x, w, false);
  else {
    const bits = bitsBehind(w);
    y = bits ? linearFromBits(x, w, bits, false) : linearOp(x, w);
  }
  return b ? tf.add(y, b) : y;
}

/**
 * x @ w (or x @ w^T with `transposed`) with no gradient of its own: a plain product for a float32 weight,
 * the product read from the bits for a bfloat16 one or a tensor widened from one (a decode step's
 * projections and its LM head).
 */
export function project(x: tf.Tensor2D, w: LinearWeight, transposed = false): tf.Tensor2D {
  const bits = w instanceof Bf16Weight ? w : bitsBehind(w);
  return bits ? matmulBf16(x, bits, transposed) : tf.matMul(x, w as tf.Tensor2D, false, transposed);
}

/** The tensor of a weight that a gradient is taken through: bits read in place have no gradient. */
export function tensorWeight(w: LinearWeight): tf.Tensor {
  if (w instanceof Bf16Weight)
    throw new Error("a weight read from its bfloat16 bits has no gradient: under a tape the model widens it");
  return w;
}

/**
 * x [N, in] @ w^T for w [out, in], read transposed in place (OpenBLAS only: XNNPACK's transposed
 * products are slow). The tied LM head uses it on the embedding [V, h], so no transposed copy of the
 * largest matrix exists; the gradient of w comes out [out, in] as well.
 */
const linearTransposedOp = tf.customGrad(((...args: unknown[]) => {
  const [x, w, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
  const weightIsVariable = w instanceof tf.Variable;
  save(weightIsVariable ? [x] : [x, w]);
  return {
    value: tf.matMul(x as tf.Tensor2D, w as tf.Tensor2D, false, true),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
      tf.tidy(() => {
        const xs = saved[0] as tf.Tensor2D;
        const ws = (weightIsVariable ? w : saved[1]) as tf.Tensor2D;
        const d = dy as tf.Tensor2D;
        return [tf.matMul(d, ws), tf.matMul(d, xs, true, false)];
      }),
  };
}) as any) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor2D;

export function linearTransposed(x: tf.Tensor2D, w: LinearWeight): tf.Tensor2D {
  if (w instanceof Bf16Weight) return matmulBf16(x, w, true);
  const bits = bitsBehind(w);
  if (bits) return linearFromBits(x, w, bits, true);
  if (!nativeMatmulActive(tf.getBackend()))
    throw new Error("linearTransposed reads its weight transposed in place: OpenBLAS's matrix product only");
  return linearTransposedOp(x, w);
}
