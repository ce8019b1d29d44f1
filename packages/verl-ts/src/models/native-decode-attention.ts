/**
 * A decode step's attention for one layer as one native kernel on the wasm heap (the addon's
 * decodeAttention): biases, rotary embedding, the in-place KV-cache write and softmax(q K^T + mask) V over
 * the cache. The op-by-op step reads each layer's q, k and v back to the host for the rotation and the
 * cache write, then runs a mask add, a softmax and two batched products of 4-row matrices; this one call
 * keeps the whole step on the heap. Inference only (no gradient).
 */
import * as tf from "@tensorflow/tfjs";
import type { NativeBlas } from "@torl-ts/blas";
import { type AttentionShape, type AttentionWeights, qkvProjections } from "./attention.js";
import { project } from "./linear.js";
import type { WasmHeap } from "./wasm-heap.js";

/** The kernel's name in the tfjs registry (registered on wasm by installNativeMatmul). */
export const DECODE_ATTENTION_KERNEL = "TorlDecodeAttention";

/** The attrs the kernel reads. */
interface DecodeAttentionAttrs {
  heads: number;
  kvHeads: number;
  /** Shape [B]: the slot each row's new key and value go to. */
  slots: Int32Array;
  /** Slots [0, span) are scored (the mask rules out the ones a row does not attend to). */
  span: number;
}

export function wasmDecodeAttentionKernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const t = inputs as Record<string, tf.TensorInfo | undefined>;
    const { heads, kvHeads, slots, span } = attrs as unknown as DecodeAttentionAttrs;
    for (const [name, x] of Object.entries(t))
      if (x && x.dtype !== "float32")
        throw new Error(`${DECODE_ATTENTION_KERNEL}: ${name} must be float32, got ${x.dtype}`);
    const wasm = backend as unknown as WasmHeap;
    const [B, KV, capacity, D] = t.keys!.shape as [number, number, number, number];
    // Allocate first: growing the wasm heap detaches views taken before it.
    const out = wasm.makeOutput([B, heads * D], "float32");
    const heap = (x: tf.TensorInfo | undefined) => (x ? wasm.typedArrayFromHeap(x) : new Float32Array(0));
    if (KV !== kvHeads)
      throw new Error(`${DECODE_ATTENTION_KERNEL}: cache has ${KV} kv heads, attrs say ${kvHeads}`);
    blas.decodeAttention(
      heap(t.q),
      heap(t.k),
      heap(t.v),
      heap(t.qBias),
      heap(t.kBias),
      heap(t.vBias),
      heap(t.cos),
      heap(t.sin),
      heap(t.keys),
      heap(t.values),
      heap(t.mask),
      heap(out),
      B,
      heads,
      kvHeads,
      D,
      capacity,
      slots,
      span,
    );
    return out;
  };
}

/** What one decode step's layers share: each row's rotary table and the additive mask over the slots. */
export interface DecodeStepTables {
  /** [B, D/2] each. */
  cos: tf.Tensor2D;
  sin: tf.Tensor2D;
  /** Shape [B, capacity]: 0 for a slot to attend, a large negative number otherwise. */
  mask: tf.Tensor2D;
  /** Shape [B]: where each row's new key and value are written. */
  slots: Int32Array;
}

/**
 * The layer's attention context [B, H*D] for one new position per row, from its normed hidden states
 * hn [B, h]; writes the position's rotated key and its value into `keys` / `values` [B, KV, capacity, D]
 * at each row's slot, in place.
 */
export function nativeDecodeAttention(
  hn: tf.Tensor2D,
  w: AttentionWeights,
  keys: tf.Tensor4D,
  values: tf.Tensor4D,
  tables: DecodeStepTables,
  shape: AttentionShape,
): tf.Tensor2D {
  // With per-head norms of q and k (Qwen3), the projections are finished here, biases and norms
  // included, and the kernel only rotates; otherwise it adds the biases itself.
  const [q, k, v] = w.qkNorm ? qkvProjections(hn, w) : [project(hn, w.q), project(hn, w.k), project(hn, w.v)];
  const inputs: tf.NamedTensorMap = {
    q,
    k,
    v,
    cos: tables.cos,
    sin: tables.sin,
    keys,
    values,
    mask: tables.mask,
  };
  if (!w.qkNorm) {
    if (w.qBias) inputs.qBias = w.qBias;
    if (w.kBias) inputs.kBias = w.kBias;
    if (w.vBias) inputs.vBias = w.vBias;
  }
  const attrs: DecodeAttentionAttrs = {
    heads: shape.heads,
    kvHeads: shape.kvHeads,
    slots: tables.slots,
    span: Math.max(...tables.slots) + 1,
  };
  return tf
    .engine()
    .runKernel(DECODE_ATTENTION_KERNEL, inputs, attrs as unknown as tf.NamedAttrMap) as tf.Tensor2D;
}
