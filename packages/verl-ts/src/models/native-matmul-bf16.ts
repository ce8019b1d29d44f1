/**
 * Products read straight from bfloat16 weights: x [m, k] (float32, on the wasm heap) times a weight held
 * as its 16-bit patterns on the host, widened a cache-sized tile at a time by the addon's matmulBf16 and
 * multiplied by OpenBLAS straight into the output tensor's memory on the heap. The widened path makes a
 * float32 tensor of the whole weight first (2x the bytes, written and then read again), for every layer
 * at every decode step where the store widens layer by layer.
 *
 * Used by the model (qwen2.ts) for every pass without a tape (the prefill's forward, the decode steps, the
 * log-prob passes, the LM head) on the wasm backend with the addon loaded. Under a tape the weights are
 * widened tensors, for their gradients, but their products still read the bits they were widened from
 * (bf16BitsOf; linear.ts), so the update's numbers are exactly those of the log-prob passes. Float16
 * storage, LoRA, a missing addon and the other backends widen.
 */
import * as tf from "@tensorflow/tfjs";
import type { NativeBlas } from "@torl-ts/blas";
import type { HalfArray } from "./half-precision.js";
import { nativeBlas } from "./native-blas.js";
import { nativeMatmulActive } from "./native-state.js";
import type { WasmHeap } from "./wasm-heap.js";

/** Kernel name in the tfjs registry (registered on wasm by installNativeMatmul). */
export const MATMUL_BF16_KERNEL = "TorlMatmulBf16";

/**
 * How a weight's bits lie: "rows", row-major in `shape`; "tiles", a [k, n] weight (k and n multiples of
 * 32) in the AMX tiles' own layout (NativeBlas.packBf16Tiles), laid out once for a frozen weight so that
 * no product packs it (the reference policy's decoder layers); read as [k, n] only, never transposed.
 */
export type Bf16Layout = "rows" | "tiles";

/**
 * A 2-D weight read from its bfloat16 bits in place (the store's own array: nothing is copied, and there
 * is nothing to free). `shape` is the weight's shape as stored: [in, out] for a linear layer's weight, or
 * [out, in] when it is read transposed (the tied LM head's embedding [V, h]).
 */
export class Bf16Weight {
  constructor(
    readonly values: HalfArray,
    readonly shape: readonly [number, number],
    readonly layout: Bf16Layout = "rows",
  ) {
    if (values.dtype !== "bfloat16")
      throw new RangeError(`products from 16-bit bits read bfloat16 only, got ${values.dtype}`);
    if (values.length !== shape[0] * shape[1])
      throw new RangeError(`a [${shape}] weight needs ${shape[0] * shape[1]} values, got ${values.length}`);
    if (layout === "tiles" && (shape[0] % 32 !== 0 || shape[1] % 32 !== 0))
      throw new RangeError(
        `the tile layout holds [k, n] weights with k and n multiples of 32, not [${shape}]`,
      );
  }

  /** Nothing to free (the bits belong to the weight store); here so a holder disposes any head alike. */
  dispose(): void {}
}

interface MatmulBf16Attrs {
  weight: Bf16Weight;
  transposeW: boolean;
}

/** The kernel: out [m, n] on the heap from x [m, k] on the heap and the weight's bits on the host. */
export function wasmMatmulBf16Kernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const { x } = inputs as { x: tf.TensorInfo };
    const { weight, transposeW } = attrs as unknown as MatmulBf16Attrs;
    const [rows, cols] = weight.shape;
    const [n, k] = transposeW ? [rows, cols] : [cols, rows];
    if (x.dtype !== "float32" || x.shape.length !== 2 || x.shape[1] !== k)
      throw new Error(
        `${MATMUL_BF16_KERNEL}: x must be float32 [m, ${k}] for a [${weight.shape}] weight${transposeW ? " read transposed" : ""}, got ${x.dtype} [${x.shape}]`,
      );
    if (weight.layout === "tiles" && transposeW)
      throw new Error(
        `${MATMUL_BF16_KERNEL}: a [${weight.shape}] weight in the tile layout is read as [k, n] only, not transposed (its gradient's product, which a frozen weight never takes)`,
      );
    const m = x.shape[0]!;
    const wasm = backend as unknown as WasmHeap;
    // Allocate first: growing the wasm heap detaches views taken before it.
    const out = wasm.makeOutput([m, n], "float32");
    const xs = wasm.typedArrayFromHeap(x);
    const outs = wasm.typedArrayFromHeap(out);
    if (weight.layout === "tiles") blas.matmulBf16Tiles(xs, weight.values.bits, outs, m, n, k);
    else blas.matmulBf16(xs, weight.values.bits, outs, m, n, k, transposeW);
    return out;
  };
}

/**
 * Float32 tensors widened from bfloat16 bits, by their data (a variable built from one shares it; a
 * variable assigned new values gets new data, so the tie ends there), with those bits: a product with such
 * a tensor reads the bits (linear.ts), so a pass under a tape computes the very products a pass without
 * one makes from the stored bits, and the first PPO ratio is exactly 1.
 */
const bitsOfData = new WeakMap<object, Bf16Weight>();

/** Ties `t` (float32, the widened values of `weight`) to the bits it was widened from. */
export function rememberBf16Bits(t: tf.Tensor, weight: Bf16Weight): void {
  if (
    t.dtype !== "float32" ||
    t.shape.length !== 2 ||
    t.shape[0] !== weight.shape[0] ||
    t.shape[1] !== weight.shape[1]
  )
    throw new RangeError(
      `a ${t.dtype} [${t.shape}] tensor cannot stand for a [${weight.shape}] bfloat16 weight`,
    );
  bitsOfData.set(t.dataId, weight);
}

/** The bits a float32 tensor was widened from (rememberBf16Bits), if any. */
export function bf16BitsOf(t: tf.Tensor): Bf16Weight | undefined {
  return bitsOfData.get(t.dataId);
}

/** Data of tensors that stand for bits whose widened values were never written (bitsOnlyTensor). */
const unwrittenData = new WeakSet<object>();

/** Marks `t`, tied to its bits, as holding no values: only products that read the bits may take it. */
export function markValuesUnwritten(t: tf.Tensor): void {
  if (!bitsOfData.has(t.dataId)) throw new RangeError("only a tensor tied to its bits can go unwritten");
  unwrittenData.add(t.dataId);
}

/**
 * Throws where a product would read `t`'s values and they were never written: a weight made by
 * bitsOnlyTensor reached a path that does not read its bits.
 */
export function refuseUnwritten(t: tf.Tensor, what: string): void {
  if (unwrittenData.has(t.dataId))
    throw new Error(
      `${what}: this [${t.shape}] weight holds its bfloat16 bits only (its float32 values were never written), and this product would read the values`,
    );
}

/** A clone of `t` (its own tensor, the same values) that keeps `t`'s tie to its bits, if it has one. */
export function cloneKeepingBits(t: tf.Tensor): tf.Tensor {
  const c = tf.clone(t);
  const bits = bf16BitsOf(t);
  if (bits) rememberBf16Bits(c, bits);
  return c;
}

/** x [m, k] times `weight` ([k, n], or [n, k] read transposed): [m, n]. No gradient. */
export function matmulBf16(x: tf.Tensor2D, weight: Bf16Weight, transposeW: boolean): tf.Tensor2D {
  const attrs: MatmulBf16Attrs = { weight, transposeW };
  return tf.engine().runKernel(MATMUL_BF16_KERNEL, { x }, attrs as unknown as tf.NamedAttrMap) as tf.Tensor2D;
}

/**
 * actor_rollout_ref.model.compute_dtype for this process: "bfloat16" makes every product with bfloat16
 * bits (matmulBf16) round its activations to bfloat16 first. Only where products read the bits (the wasm
 * backend with the addon): elsewhere a bfloat16 model computes in float32, and the setting is refused
 * rather than ignored.
 */
export function setActivationDtype(dtype: "float32" | "bfloat16", backendName: string): void {
  const blas = nativeMatmulActive(backendName) ? nativeBlas() : undefined;
  if (!blas) {
    if (dtype === "float32") return;
    throw new Error(
      `actor_rollout_ref.model.compute_dtype=bfloat16 needs the products that read bfloat16 bits (the wasm backend with the OpenBLAS addon); this process runs ${backendName} without them: remove the key, or run on wasm with the addon`,
    );
  }
  blas.setActivationDtype(dtype);
}
