/**
 * The log-prob pick as two native kernels on the wasm heap: forward (log p(target), entropy and logsumexp
 * per row, one pass over the logits) and backward (one pass writing d logits). The op-by-op path writes
 * the [rows, vocab] log-softmax, a one-hot and their product, and as many again for the gradient.
 */
import * as tf from "@tensorflow/tfjs";
import type { NativeBlas } from "@torl-ts/blas";
import type { WasmHeap } from "./wasm-heap.js";

/** Kernel names in the tfjs registry (registered on wasm by installNativeMatmul). */
export const PICK_KERNEL = "TorlLogSoftmaxPick";
export const PICK_GRAD_KERNEL = "TorlLogSoftmaxPickGrad";

/** Values per row of the pick's output: log p(target), entropy, logsumexp. */
export const PICK_STATS = 3;

interface PickAttrs {
  /** Per row, the token to score; -1 for a row nobody scores (its stats and gradient are 0). */
  targets: Int32Array;
}

function checkLogits(kernel: string, logits: tf.TensorInfo, targets: Int32Array): void {
  if (logits.dtype !== "float32" || logits.shape.length !== 2 || logits.shape[0] !== targets.length)
    throw new Error(
      `${kernel} needs float32 logits [rows, vocab] with one target per row, got ${logits.dtype} [${logits.shape}] and ${targets.length} targets`,
    );
}

/** Input logits [rows, vocab]; attr targets; output stats [rows, 3]. */
export function wasmPickKernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const { logits } = inputs as { logits: tf.TensorInfo };
    const { targets } = attrs as unknown as PickAttrs;
    checkLogits(PICK_KERNEL, logits, targets);
    const wasm = backend as unknown as WasmHeap;
    const out = wasm.makeOutput([targets.length, PICK_STATS], "float32");
    blas.logSoftmaxPick(
      wasm.typedArrayFromHeap(logits),
      targets,
      logits.shape[1]!,
      wasm.typedArrayFromHeap(out),
    );
    return out;
  };
}

/** Inputs logits, stats (the forward's output) and dStats ([rows, 3]); attr targets; output d logits. */
export function wasmPickGradKernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const { logits, stats, dStats } = inputs as Record<string, tf.TensorInfo>;
    const { targets } = attrs as unknown as PickAttrs;
    checkLogits(PICK_GRAD_KERNEL, logits!, targets);
    const wasm = backend as unknown as WasmHeap;
    const out = wasm.makeOutput([...logits!.shape], "float32");
    blas.logSoftmaxPickGrad(
      wasm.typedArrayFromHeap(logits!),
      targets,
      logits!.shape[1]!,
      wasm.typedArrayFromHeap(stats!),
      wasm.typedArrayFromHeap(dStats!),
      wasm.typedArrayFromHeap(out),
    );
    return out;
  };
}

/**
 * Differentiable [rows, 3] stats (log p(target), entropy, logsumexp) of `logits` [rows, vocab], on the
 * native kernels; the logsumexp column carries no gradient. Only where installNativeMatmul registered them.
 */
export function nativeLogSoftmaxPick(logits: tf.Tensor2D, targets: Int32Array): tf.Tensor2D {
  const attrs = { targets } as unknown as tf.NamedAttrMap;
  const op = tf.customGrad(((...args: unknown[]) => {
    const [x, save] = args as [tf.Tensor, tf.GradSaveFunc];
    const stats = tf.engine().runKernel(PICK_KERNEL, { logits: x }, attrs) as tf.Tensor2D;
    save([x, stats]);
    return {
      value: stats,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const inputs = { logits: saved[0]!, stats: saved[1]!, dStats: dy };
        return [tf.engine().runKernel(PICK_GRAD_KERNEL, inputs, attrs) as tf.Tensor];
      },
    };
  }) as Parameters<typeof tf.customGrad<tf.Tensor2D>>[0]);
  return op(logits) as tf.Tensor2D;
}
