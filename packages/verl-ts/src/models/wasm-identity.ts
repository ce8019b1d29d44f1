/**
 * A zero-copy Identity kernel for the wasm backend. tfjs's engine clones (Identity) every tensor a kernel
 * saves for the backward pass, and wasm's own Identity copies the data: with the tape on, each matrix
 * product copied its input and its weight, each log-prob pick its logits. Tensors are immutable, so the
 * clone can share the data and count one more reference, as the cpu backend's Identity and wasm's own
 * Reshape already do. (The KV caches that write into tensor memory in place already work on the cpu
 * backend, whose clones share their data too.)
 */
import * as tf from "@tensorflow/tfjs";

interface WasmRefs {
  incRef(dataId: tf.DataId): void;
}

function sharedIdentity({ inputs, backend }: Parameters<tf.KernelFunc>[0]): tf.TensorInfo {
  const { x } = inputs as { x: tf.TensorInfo };
  (backend as unknown as WasmRefs).incRef(x.dataId);
  return { dataId: x.dataId, shape: [...x.shape], dtype: x.dtype };
}

let installed = false;

/** Replaces the wasm backend's Identity with the sharing one (once per process). */
export function installSharedIdentity(): void {
  if (installed) return;
  tf.unregisterKernel("Identity", "wasm");
  tf.registerKernel({ kernelName: "Identity", backendName: "wasm", kernelFunc: sharedIdentity });
  installed = true;
}
