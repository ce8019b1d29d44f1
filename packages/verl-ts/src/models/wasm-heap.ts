/** What our native kernels use of the wasm backend: outputs on its heap, and heap views of tensors. */
import type * as tf from "@tensorflow/tfjs";

export interface WasmHeap {
  /** A new float32 tensor on the heap. Allocate every output before taking views: growth detaches them. */
  makeOutput(shape: number[], dtype: "float32"): tf.TensorInfo;
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array;
}
