/**
 * OpenBLAS matrix products as the wasm backend's BatchMatMul kernel, plus the addon's fused kernels (AdamW
 * update: native-adam.ts; log-prob pick: native-log-prob.ts). The addon reads and writes the wasm heap in
 * place (it is one ArrayBuffer), so a kernel costs no copies. `TORL_NATIVE_MATMUL=off` keeps
 * XNNPACK's kernel. (The plain-JS cpu backend stays as it is: it is the reference for tests, and its other
 * kernels are far slower than wasm's, so OpenBLAS there would not pay.)
 */

import * as tf from "@tensorflow/tfjs";
import { coreChoice, loadNativeBlas, type NativeBlas } from "@torl-ts/blas";
import { ADAMW_KERNEL, wasmAdamWKernel } from "./native-adam.js";
import { nativeMatmulWanted } from "./native-blas.js";
import { DECODE_ATTENTION_KERNEL, wasmDecodeAttentionKernel } from "./native-decode-attention.js";
import { wasmLayerKernels } from "./native-layers.js";
import { PICK_GRAD_KERNEL, PICK_KERNEL, wasmPickGradKernel, wasmPickKernel } from "./native-log-prob.js";
import { MATMUL_BF16_KERNEL, wasmMatmulBf16Kernel } from "./native-matmul-bf16.js";
import {
  type NativeMatmulBackend,
  type NativeMatmulState,
  nativeMatmulState,
  setNativeMatmulState,
} from "./native-state.js";
import type { WasmHeap } from "./wasm-heap.js";
import { installWasmHostKernels } from "./wasm-host-kernels.js";
import { installSharedIdentity } from "./wasm-identity.js";

export { nativeBlas, nativeMatmulWanted } from "./native-blas.js";

interface MatmulShape {
  batch: number;
  batchA: number;
  batchB: number;
  m: number;
  n: number;
  k: number;
  outShape: number[];
}

/** tfjs's BatchMatMul shape rule, restricted (as the wasm kernel is) to equal batches or a batch of one. */
export function matmulShape(
  a: readonly number[],
  b: readonly number[],
  transposeA: boolean,
  transposeB: boolean,
): MatmulShape {
  const ra = a.length;
  const rb = b.length;
  if (ra < 2 || rb < 2) throw new Error(`BatchMatMul needs rank >= 2 operands, got [${a}] and [${b}]`);
  const m = transposeA ? a[ra - 1]! : a[ra - 2]!;
  const kA = transposeA ? a[ra - 2]! : a[ra - 1]!;
  const kB = transposeB ? b[rb - 1]! : b[rb - 2]!;
  const n = transposeB ? b[rb - 2]! : b[rb - 1]!;
  if (kA !== kB)
    throw new Error(
      `BatchMatMul: inner sizes ${kA} and ${kB} of [${a}] and [${b}] (transposeA=${transposeA}, transposeB=${transposeB}) differ`,
    );
  const outerA = a.slice(0, -2);
  const outerB = b.slice(0, -2);
  const batchA = outerA.reduce((p, q) => p * q, 1);
  const batchB = outerB.reduce((p, q) => p * q, 1);
  if (batchA !== batchB && batchA !== 1 && batchB !== 1)
    throw new Error(`BatchMatMul: batch dimensions of [${a}] and [${b}] neither match nor broadcast from 1`);
  const outer = tf.backend_util.assertAndGetBroadcastShape(outerA, outerB);
  return { batch: Math.max(batchA, batchB), batchA, batchB, m, n, k: kA, outShape: [...outer, m, n] };
}

function runGemm(
  blas: NativeBlas,
  s: MatmulShape,
  av: Float32Array,
  bv: Float32Array,
  cv: Float32Array,
  transposeA: boolean,
  transposeB: boolean,
): void {
  const strideA = s.batchA === 1 ? 0 : s.m * s.k;
  const strideB = s.batchB === 1 ? 0 : s.k * s.n;
  blas.gemm(av, bv, cv, s.batch, s.m, s.n, s.k, transposeA, transposeB, strideA, strideB, false);
}

function checkFloat(a: tf.TensorInfo, b: tf.TensorInfo): void {
  if (a.dtype !== "float32" || b.dtype !== "float32")
    throw new Error(`BatchMatMul runs on float32 only, got ${a.dtype} and ${b.dtype}`);
}

type MatmulAttrs = { transposeA: boolean; transposeB: boolean };

function wasmKernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const { a, b } = inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    const { transposeA, transposeB } = attrs as unknown as MatmulAttrs;
    checkFloat(a, b);
    const s = matmulShape(a.shape, b.shape, transposeA, transposeB);
    const wasm = backend as unknown as WasmHeap;
    // Allocate first: growing the wasm heap detaches views taken before it.
    const out = wasm.makeOutput(s.outShape, "float32");
    runGemm(
      blas,
      s,
      wasm.typedArrayFromHeap(a),
      wasm.typedArrayFromHeap(b),
      wasm.typedArrayFromHeap(out),
      transposeA,
      transposeB,
    );
    return out;
  };
}

/**
 * The backend line's words for the native kernels: on, with OpenBLAS's version and CPU kernel, or off
 * with the reason (the loader's reasons name the command that gets the addon).
 */
export function nativeKernelsState(
  load: { config: string; coreName: string } | { off: string },
): NativeMatmulState {
  if ("off" in load)
    return { native: false, line: `native kernels off: ${load.off}; matmul on wasm XNNPACK` };
  const version = load.config.split(" ").slice(0, 2).join(" ");
  return {
    native: true,
    line: `native kernels on: ${version} sgemm, 1 thread, ${coreChoice(load.coreName)}; fused AdamW, log-prob pick, RMSNorm, SwiGLU, decode attention and bf16 weight products`,
  };
}

/** OpenBLAS's sgemm as `backendName`'s BatchMatMul, and the addon's fused kernels. */
function registerNativeKernels(backendName: NativeMatmulBackend, blas: NativeBlas): void {
  tf.unregisterKernel("BatchMatMul", backendName);
  tf.registerKernel({ kernelName: "BatchMatMul", backendName, kernelFunc: wasmKernel(blas) });
  // Our own kernel names: nothing else registers them, and a second install never runs (states).
  tf.registerKernel({ kernelName: ADAMW_KERNEL, backendName, kernelFunc: wasmAdamWKernel(blas) });
  tf.registerKernel({ kernelName: PICK_KERNEL, backendName, kernelFunc: wasmPickKernel(blas) });
  tf.registerKernel({ kernelName: PICK_GRAD_KERNEL, backendName, kernelFunc: wasmPickGradKernel(blas) });
  tf.registerKernel({
    kernelName: DECODE_ATTENTION_KERNEL,
    backendName,
    kernelFunc: wasmDecodeAttentionKernel(blas),
  });
  tf.registerKernel({ kernelName: MATMUL_BF16_KERNEL, backendName, kernelFunc: wasmMatmulBf16Kernel(blas) });
  for (const [kernelName, kernelFunc] of wasmLayerKernels(blas))
    tf.registerKernel({ kernelName, backendName, kernelFunc });
}

/**
 * Replaces `backendName`'s BatchMatMul with OpenBLAS's sgemm (one thread) and registers the fused kernels
 * when the addon loads; otherwise leaves the backend's own kernels and says why. Either way wasm's Identity
 * becomes the zero-copy one (wasm-identity.ts). Idempotent per backend.
 */
export function installNativeMatmul(backendName: NativeMatmulBackend): NativeMatmulState {
  const known = nativeMatmulState(backendName);
  if (known) return known;
  // Not a native kernel, but wasm's other saving: clones for the backward pass share their data.
  installSharedIdentity();
  // Likewise: 16-bit weights widened in place on the heap, the embedding's gradient in one pass.
  installWasmHostKernels();
  let state: NativeMatmulState;
  if (!nativeMatmulWanted()) state = nativeKernelsState({ off: "TORL_NATIVE_MATMUL=off" });
  else {
    const load = loadNativeBlas(1);
    if (load.ok) registerNativeKernels(backendName, load.blas);
    state = nativeKernelsState(load.ok ? load : { off: load.reason });
  }
  setNativeMatmulState(backendName, state);
  return state;
}
