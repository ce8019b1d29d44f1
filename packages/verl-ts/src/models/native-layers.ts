/**
 * RMSNorm and the SwiGLU gate as native kernels on the wasm heap, forward and backward one kernel each
 * (through tf.customGrad). On the small models, where each tfjs kernel's fixed cost outweighs its
 * arithmetic, the op-by-op versions (six kernels and three, plus twice as many backward) cost more than
 * the numbers they compute.
 */
import * as tf from "@tensorflow/tfjs";
import type { NativeBlas } from "@torl-ts/blas";
import type { WasmHeap } from "./wasm-heap.js";

/** Kernel names in the tfjs registry (registered on wasm by installNativeMatmul). */
export const RMS_NORM_KERNEL = "TorlRmsNorm";
export const RMS_NORM_GRAD_KERNEL = "TorlRmsNormGrad";
export const SWIGLU_KERNEL = "TorlSwiglu";
export const SWIGLU_GRAD_KERNEL = "TorlSwigluGrad";

function checkFloat(kernel: string, ...ts: tf.TensorInfo[]): void {
  for (const t of ts)
    if (t.dtype !== "float32") throw new Error(`${kernel} runs on float32 only, got ${t.dtype}`);
}

/** The four kernels, by name, for registration. */
export function wasmLayerKernels(blas: NativeBlas): Array<[string, tf.KernelFunc]> {
  const rmsNorm: tf.KernelFunc = ({ inputs, attrs, backend }) => {
    const { x, w } = inputs as Record<string, tf.TensorInfo>;
    checkFloat(RMS_NORM_KERNEL, x!, w!);
    const wasm = backend as unknown as WasmHeap;
    const y = wasm.makeOutput([...x!.shape], "float32");
    const heap = (t: tf.TensorInfo) => wasm.typedArrayFromHeap(t);
    blas.rmsNorm(heap(x!), heap(w!), (attrs as { eps: number }).eps, heap(y));
    return y;
  };
  const rmsNormGrad: tf.KernelFunc = ({ inputs, attrs, backend }) => {
    const { x, w, dy } = inputs as Record<string, tf.TensorInfo>;
    checkFloat(RMS_NORM_GRAD_KERNEL, x!, w!, dy!);
    const wasm = backend as unknown as WasmHeap;
    const dx = wasm.makeOutput([...x!.shape], "float32");
    const dw = wasm.makeOutput([...w!.shape], "float32");
    const heap = (t: tf.TensorInfo) => wasm.typedArrayFromHeap(t);
    blas.rmsNormGrad(heap(x!), heap(w!), (attrs as { eps: number }).eps, heap(dy!), heap(dx), heap(dw));
    return [dx, dw];
  };
  const swiglu: tf.KernelFunc = ({ inputs, backend }) => {
    const { g, u } = inputs as Record<string, tf.TensorInfo>;
    checkFloat(SWIGLU_KERNEL, g!, u!);
    const wasm = backend as unknown as WasmHeap;
    const y = wasm.makeOutput([...g!.shape], "float32");
    const heap = (t: tf.TensorInfo) => wasm.typedArrayFromHeap(t);
    blas.swiglu(heap(g!), heap(u!), heap(y));
    return y;
  };
  const swigluGrad: tf.KernelFunc = ({ inputs, backend }) => {
    const { g, u, dy } = inputs as Record<string, tf.TensorInfo>;
    checkFloat(SWIGLU_GRAD_KERNEL, g!, u!, dy!);
    const wasm = backend as unknown as WasmHeap;
    const dg = wasm.makeOutput([...g!.shape], "float32");
    const du = wasm.makeOutput([...g!.shape], "float32");
    const heap = (t: tf.TensorInfo) => wasm.typedArrayFromHeap(t);
    blas.swigluGrad(heap(g!), heap(u!), heap(dy!), heap(dg), heap(du));
    return [dg, du];
  };
  return [
    [RMS_NORM_KERNEL, rmsNorm],
    [RMS_NORM_GRAD_KERNEL, rmsNormGrad],
    [SWIGLU_KERNEL, swiglu],
    [SWIGLU_GRAD_KERNEL, swigluGrad],
  ];
}

/** RMSNorm of x [N, h] with weight w [h], on the native kernels. */
export function nativeRmsNorm(x: tf.Tensor2D, w: tf.Tensor, eps: number): tf.Tensor2D {
  if (w.shape.length !== 1 || w.shape[0] !== x.shape[1])
    throw new Error(`RMSNorm weight [${w.shape}] does not match rows of width ${x.shape[1]}`);
  const attrs = { eps } as unknown as tf.NamedAttrMap;
  const op = tf.customGrad(((...args: unknown[]) => {
    const [xs, ws, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
    save([xs, ws]);
    return {
      value: tf.engine().runKernel(RMS_NORM_KERNEL, { x: xs, w: ws }, attrs) as tf.Tensor2D,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
        tf.engine().runKernel(RMS_NORM_GRAD_KERNEL, { x: saved[0]!, w: saved[1]!, dy }, attrs) as tf.Tensor[],
    };
  }) as Parameters<typeof tf.customGrad<tf.Tensor2D>>[0]);
  return op(x, w) as tf.Tensor2D;
}

/** silu(gate) * up, elementwise, on the native kernels. */
export function nativeSwiglu(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D {
  const op = tf.customGrad(((...args: unknown[]) => {
    const [g, u, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
    save([g, u]);
    return {
      value: tf.engine().runKernel(SWIGLU_KERNEL, { g, u }) as tf.Tensor2D,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
        tf.engine().runKernel(SWIGLU_GRAD_KERNEL, { g: saved[0]!, u: saved[1]!, dy }) as tf.Tensor[],
    };
  }) as Parameters<typeof tf.customGrad<tf.Tensor2D>>[0]);
  return op(gate, up) as tf.Tensor2D;
}
