/** RMSNorm: x / sqrt(mean(x^2) + eps) * w, over the last axis (one native kernel where they run). */
import * as tf from "@tensorflow/tfjs";
import { nativeRmsNorm } from "./native-layers.js";
import { nativeMatmulActive } from "./native-state.js";

export function rmsNorm(x: tf.Tensor2D, w: tf.Tensor, eps: number): tf.Tensor2D {
  if (nativeMatmulActive(tf.getBackend())) return nativeRmsNorm(x, w, eps);
  const ms = tf.mean(tf.square(x), -1, true);
  return tf.mul(tf.mul(x, tf.rsqrt(tf.add(ms, eps))), w);
}
