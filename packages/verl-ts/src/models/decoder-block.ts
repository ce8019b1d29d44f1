/**
 * One decoder layer (pre-norm): x + attention(rmsNorm(x)), then + mlp(rmsNorm(.)). Written in two halves
 * around the attention itself, so the full-sequence forward and the cached decode step share every
 * part but the attention.
 */
import * as tf from "@tensorflow/tfjs";
import {
  type AttentionWeights,
  qkvProjections,
  type SequenceAttention,
  sequenceAttention,
} from "./attention.js";
import { linear } from "./linear.js";
import { type MlpWeights, mlp } from "./mlp.js";
import { rmsNorm } from "./rms-norm.js";

/** A decoder layer's weights. */
export interface BlockWeights {
  inputNorm: tf.Tensor;
  attention: AttentionWeights;
  postNorm: tf.Tensor;
  mlp: MlpWeights;
}

/** First half: the attention's q, k and v projections of the normed input. */
export function blockProjections(
  x: tf.Tensor2D,
  w: BlockWeights,
  eps: number,
): [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D] {
  return qkvProjections(rmsNorm(x, w.inputNorm, eps), w.attention);
}

/** Second half: the attention's output projection and residual, then the MLP and its residual. */
export function blockFinish(x: tf.Tensor2D, context: tf.Tensor2D, w: BlockWeights, eps: number): tf.Tensor2D {
  const h = tf.add(x, linear(context, w.attention.o)) as tf.Tensor2D;
  return tf.add(h, mlp(rmsNorm(h, w.postNorm, eps), w.mlp));
}

/** The whole layer over a full sequence, x [B*L, h] -> [B*L, h]. */
export function decoderBlock(
  x: tf.Tensor2D,
  w: BlockWeights,
  seq: SequenceAttention,
  eps: number,
): tf.Tensor2D {
  const [q, k, v] = blockProjections(x, w, eps);
  return blockFinish(x, sequenceAttention(q, k, v, seq), w, eps);
}
