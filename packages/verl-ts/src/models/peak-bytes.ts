/** Peak tensor memory of a computation, from tfjs's own accounting of the bytes its tensors hold. */
import * as tf from "@tensorflow/tfjs";

/**
 * The most tensor bytes held at any point while `f` runs (measured after every kernel, the inner
 * kernels of custom gradients included), less the bytes held when it started.
 */
export async function peakBytesDuring(
  f: () => tf.TensorContainer | Promise<tf.TensorContainer>,
): Promise<number> {
  const start = tf.memory().numBytes;
  const info = await tf.profile(f);
  return Math.max(0, info.peakBytes - start);
}
