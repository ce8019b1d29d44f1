/** RMSNorm: x / sqrt(mean(x^2) + eps) * w, over the last axis. */
import * as tf from "@tensorflow/tfjs";

export function rmsNorm(x: tf.Tensor2D, w: tf.Tensor, eps: number): tf.Tensor2D {
  const ms = tf.mean(tf.square(x), -1, true);
  return tf.mul(tf.mul(x, tf.rsqrt(tf.add(ms, eps))), w);
}
