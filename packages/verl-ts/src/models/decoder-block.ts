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
import { linear, rowsIndependentPast } from "./linear.js";
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

/**
 * The rows past which every matrix of the layer gives each row of its product from that row alone
 * (rowsIndependentPast), or undefined where one of them does not promise it.
 */
export function blockRowsIndependentPast(w: BlockWeights): number | undefined {
  const { q, k, v, o } = w.attention;
  let past = 0;
  for (const m of [q, k, v, o, w.mlp.gate, w.mlp.up, w.mlp.down]) {
    const p = rowsIndependentPast(m);
    if (p === undefined) return undefined;
    past = Math.max(past, p);
  }
  return past;
}

/**
 * The layer over several batches at once, xs[i] [B_i*L_i, h] -> [B_i*L_i, h]: the projections and the MLP
 * run on their rows stacked (each matrix read once for all of them), the attention on each batch with its
 * own `seqs[i]`. Each output is, bit for bit, decoderBlock's on that batch alone where every batch has
 * more rows than blockRowsIndependentPast(w) (the caller's to check): every other step works row by row.
 */
export function decoderBlocks(
  xs: tf.Tensor2D[],
  w: BlockWeights,
  seqs: SequenceAttention[],
  eps: number,
): tf.Tensor2D[] {
  if (xs.length !== seqs.length)
    throw new RangeError(`decoderBlocks: ${xs.length} batches with ${seqs.length} attention inputs`);
  if (xs.length === 1) return [decoderBlock(xs[0]!, w, seqs[0]!, eps)];
  const rows = xs.map((x) => x.shape[0]);
  const x = tf.concat(xs) as tf.Tensor2D;
  const [q, k, v] = blockProjections(x, w, eps);
  const [qs, ks, vs] = [q, k, v].map((t) => tf.split(t, rows) as tf.Tensor2D[]);
  const context = tf.concat(
    seqs.map((seq, i) => sequenceAttention(qs![i]!, ks![i]!, vs![i]!, seq)),
  ) as tf.Tensor2D;
  return tf.split(blockFinish(x, context, w, eps), rows) as tf.Tensor2D[];
}

/**
 * Most rows a layer's products take at once where batches share them (decoderBlocks): past a few hundred
 * rows a product reads its matrix at full speed anyway, and the shared activations stay small (the MLP's
 * [rows, intermediate] float32).
 */
export const SHARED_BLOCK_ROWS = 512;

/**
 * Which batches (by index, in order) share each layer's products: batches of `rows` rows each past `past`
 * (blockRowsIndependentPast), together up to `cap` rows; every other batch alone. With `past` undefined,
 * every batch alone.
 */
export function sharedBlockGroups(
  rows: number[],
  past: number | undefined,
  cap = SHARED_BLOCK_ROWS,
): number[][] {
  const groups: number[][] = [];
  let open: number[] = [];
  let openRows = 0;
  for (const [k, n] of rows.entries()) {
    if (past === undefined || n <= past || n >= cap) {
      groups.push([k]);
      continue;
    }
    if (openRows + n > cap) {
      groups.push(open);
      open = [];
      openRows = 0;
    }
    open.push(k);
    openRows += n;
  }
  if (open.length) groups.push(open);
  return groups.sort((a, b) => a[0]! - b[0]!);
}
