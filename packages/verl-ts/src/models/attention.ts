/**
 * Grouped-query causal self-attention: H query heads share KV key/value heads in groups of G = H / KV;
 * softmax(q k^T / sqrt(D) + mask) v per head, with rotary embeddings on q and k. The query heads of a
 * group are stacked along the sequence axis ([B, KV, G*L, D]) so one batched matmul serves the group.
 */
import * as tf from "@tensorflow/tfjs";
import { type LinearWeight, linear } from "./linear.js";
import { rmsNorm } from "./rms-norm.js";
import type { Rotary } from "./rotary.js";
import type { TokenBatch } from "./token-batch.js";

/**
 * A layer's attention weights ([in, out]); the biases exist when the config has them (Qwen2), the
 * per-head norms of q and k when it has them (Qwen3).
 */
export interface AttentionWeights {
  q: LinearWeight;
  k: LinearWeight;
  v: LinearWeight;
  o: LinearWeight;
  qBias?: tf.Tensor;
  kBias?: tf.Tensor;
  vBias?: tf.Tensor;
  qkNorm?: QkNorm;
}

/** Qwen3's RMSNorm of each head of q and of k ([D] weights), after the projection, before the rotation. */
export interface QkNorm {
  q: tf.Tensor;
  k: tf.Tensor;
  eps: number;
}

/** RMSNorm over each head of projections [N, heads*D], with a [D] weight. */
export function headNorm(x: tf.Tensor2D, w: tf.Tensor, eps: number): tf.Tensor2D {
  const [N, width] = x.shape;
  const D = w.shape[0]!;
  return tf.reshape(rmsNorm(tf.reshape(x, [N * (width / D), D]), w, eps), [N, width]);
}

export interface AttentionShape {
  heads: number;
  kvHeads: number;
  headDim: number;
}

/**
 * What every layer's attention shares in one full-sequence forward: the batch shape, the additive mask
 * [B, H, L, L] and the rotary tables of the queries and keys.
 */
export interface SequenceAttention {
  shape: AttentionShape;
  B: number;
  L: number;
  mask: tf.Tensor4D;
  rotary: Rotary;
  cosQ: tf.Tensor4D;
  sinQ: tf.Tensor4D;
  cosK: tf.Tensor4D;
  sinK: tf.Tensor4D;
  /** Collects each layer's keys and values [B, KV, L, D] here (kept), for a cache to read back. */
  keysValues?: [tf.Tensor, tf.Tensor][];
}

const NEG = -1e9;

/** The additive attention mask [B, H, L, L] of a batch: causal, and padded keys masked out. */
export function causalMask(batch: TokenBatch, heads: number): Float32Array {
  const { batch: B, length: L } = batch;
  const H = heads;
  const maskArr = new Float32Array(B * H * L * L);
  for (let b = 0; b < B; b++) {
    const base = b * H * L * L;
    for (let i = 0; i < L; i++)
      for (let j = 0; j < L; j++) maskArr[base + i * L + j] = j <= i && batch.mask[b * L + j] ? 0 : NEG;
    for (let h = 1; h < H; h++) maskArr.copyWithin(base + h * L * L, base, base + L * L);
  }
  return maskArr;
}

/** The query, key and value projections of normed hidden states [N, h]: [N, H*D], [N, KV*D], [N, KV*D]. */
export function qkvProjections(
  hn: tf.Tensor2D,
  w: AttentionWeights,
): [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D] {
  const q = linear(hn, w.q, w.qBias);
  const k = linear(hn, w.k, w.kBias);
  const v = linear(hn, w.v, w.vBias);
  if (!w.qkNorm) return [q, k, v];
  return [headNorm(q, w.qkNorm.q, w.qkNorm.eps), headNorm(k, w.qkNorm.k, w.qkNorm.eps), v];
}

/**
 * Attention over a whole sequence from the projections [B*L, *]: returns the heads' context, merged back
 * to [B*L, H*D] (the output projection's input).
 */
export function sequenceAttention(
  q2: tf.Tensor2D,
  k2: tf.Tensor2D,
  v2: tf.Tensor2D,
  seq: SequenceAttention,
): tf.Tensor2D {
  const { B, L } = seq;
  const { heads: H, kvHeads: KV, headDim: D } = seq.shape;
  const G = H / KV;
  const q = seq.rotary.apply(tf.reshape(q2, [B, L, H, D]) as tf.Tensor4D, seq.cosQ, seq.sinQ);
  const k = seq.rotary.apply(tf.reshape(k2, [B, L, KV, D]) as tf.Tensor4D, seq.cosK, seq.sinK);
  const v = tf.reshape(v2, [B, L, KV, D]);
  const qt = tf.reshape(tf.transpose(q, [0, 2, 1, 3]), [B, KV, G * L, D]);
  const kt = tf.transpose(k, [0, 2, 1, 3]); // [B, KV, L, D]
  const vt = tf.transpose(v, [0, 2, 1, 3]);
  if (seq.keysValues) seq.keysValues.push([tf.keep(kt), tf.keep(vt)]);
  const scores = tf.mul(tf.matMul(qt, kt, false, true), 1 / Math.sqrt(D)); // [B, KV, G*L, L]
  const probs = tf.softmax(tf.add(tf.reshape(scores, [B, H, L, L]), seq.mask));
  const ctx = tf.matMul(tf.reshape(probs, [B, KV, G * L, L]), vt); // [B, KV, G*L, D]
  return tf.reshape(tf.transpose(tf.reshape(ctx, [B, H, L, D]), [0, 2, 1, 3]), [B * L, H * D]) as tf.Tensor2D;
}

/**
 * Attention of one new position per row against a cache: q [B, KV, G, D] (rotated, pre-scaled by
 * 1/sqrt(D)), keys and values [B, KV, cap, D], mask [B, KV, G, cap]; returns the context [B, H*D].
 */
export function cachedAttention(
  q: tf.Tensor4D,
  keys: tf.Tensor4D,
  values: tf.Tensor4D,
  mask: tf.Tensor4D,
  shape: AttentionShape,
): tf.Tensor2D {
  const B = q.shape[0];
  const scores = tf.matMul(q, keys, false, true); // [B, KV, G, cap]
  const probs = tf.softmax(tf.add(scores, mask));
  return tf.reshape(tf.matMul(probs, values), [B, shape.heads * shape.headDim]) as tf.Tensor2D;
}
