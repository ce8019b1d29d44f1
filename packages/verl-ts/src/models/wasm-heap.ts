/** What our native kernels use of the wasm backend: outputs on its heap, and heap views of tensors. */
import * as tf from "@tensorflow/tfjs";

export interface WasmHeap {
  /** A new float32 tensor on the heap. Allocate every output before taking views: growth detaches them. */
  makeOutput(shape: number[], dtype: "float32"): tf.TensorInfo;
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array;
}

/**
 * The float32 values of `t` in the backend's own host memory (a view of the wasm heap, or the cpu
 * backend's array), no copy; null on a backend that keeps tensors elsewhere. A wasm heap view is valid
 * until the heap grows: use it before the next tensor is made.
 */
export function hostMemory(t: tf.Tensor): Float32Array | null {
  if (t.dtype !== "float32") return null;
  const name = tf.getBackend();
  if (name === "wasm") return (tf.backend() as unknown as WasmHeap).typedArrayFromHeap(t);
  if (name === "cpu") {
    const values = (tf.backend() as unknown as { data: { get(id: object): { values?: unknown } } }).data.get(
      t.dataId,
    ).values;
    return values instanceof Float32Array ? values : null;
  }
  return null;
}

/**
 * Bytes of the wasm backend's heap (its linear memory: it only grows, and its pages once written stay
 * resident); 0 on other backends.
 */
export function backendHeapBytes(): number {
  if (tf.getBackend() !== "wasm") return 0;
  const wasm = (tf.backend() as unknown as { wasm?: { HEAPU8?: Uint8Array } }).wasm;
  return wasm?.HEAPU8?.buffer.byteLength ?? 0;
}
