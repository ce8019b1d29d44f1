/**
 * The linear layer the model is built from: x [N, in] @ w [in, out] (+ b). Weights are held transposed
 * from HF's [out, in] because plain matmuls are ~10x faster than transposed ones on the wasm backend; the
 * gradient is written out for the same reason.
 */
import * as tf from "@tensorflow/tfjs";
import { nativeMatmulActive } from "./native-matmul.js";

/**
 * x [N, in] @ w [in, out]. The gradient transposes explicitly for XNNPACK (faster on untransposed
 * operands); OpenBLAS reads transposed operands in place, so there the transpose flags save two kernels.
 */
const linearOp = tf.customGrad(((...args: unknown[]) => {
  const [x, w, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
  save([x, w]);
  return {
    value: tf.matMul(x as tf.Tensor2D, w as tf.Tensor2D),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ws] = saved as [tf.Tensor2D, tf.Tensor2D];
      const d = dy as tf.Tensor2D;
      if (nativeMatmulActive(tf.getBackend()))
        return [tf.matMul(d, ws, false, true), tf.matMul(xs, d, true, false)];
      return [tf.matMul(d, tf.transpose(ws) as tf.Tensor2D), tf.matMul(tf.transpose(xs) as tf.Tensor2D, d)];
    },
  };
}) as any) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor2D;

export function linear(x: tf.Tensor2D, w: tf.Tensor, b?: tf.Tensor): tf.Tensor2D {
  const y = linearOp(x, w);
  return b ? tf.add(y, b) : y;
}
