/** Row and column helpers over a DataProto's host tensors: picking rows, trimming and padding columns. */
import * as tf from "@tensorflow/tfjs";
import type { TokenBatch } from "../models/token-batch.js";
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";

/** A host tensor's values as float32 (no copy when they already are). */
export function asFloat32(t: BatchTensor): Float32Array {
  return t.data instanceof Float32Array ? t.data : Float32Array.from(t.data as ArrayLike<number>);
}

/**
 * The token batch of input_ids / attention_mask, trimmed: leading columns that are padding in every
 * row (prompts are left-padded to max_prompt_length) and trailing ones (responses are right-padded to
 * max_response_length) are dropped. The scores of real tokens do not change (causal attention, and
 * positions count real tokens), the forward gets much cheaper. P: prompt columns kept; R: the data's
 * response width; kept: response columns kept (the rest are padding in every row, scored 0).
 */
export function responseTokenBatch(data: DataProto): { tb: TokenBatch; P: number; R: number; kept: number } {
  const ids = data.tensor("input_ids");
  const attn = data.tensor("attention_mask");
  const R = data.tensor("responses").shape[1]!;
  const [B, L] = ids.shape as [number, number];
  let c0 = L - R;
  let c1 = L - R + 1; // at least one response column, so that every slice has a width
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < c0; t++) {
      if (Number(attn.data[b * L + t]) !== 0) {
        c0 = t;
        break;
      }
    }
    for (let t = L - 1; t >= c1; t--) {
      if (Number(attn.data[b * L + t]) !== 0) {
        c1 = t + 1;
        break;
      }
    }
  }
  const W = c1 - c0;
  const idOut = new Int32Array(B * W);
  const maskOut = new Uint8Array(B * W);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < W; t++) {
      idOut[b * W + t] = Number(ids.data[b * L + c0 + t]);
      maskOut[b * W + t] = Number(attn.data[b * L + c0 + t]);
    }
  }
  return { tb: { ids: idOut, mask: maskOut, batch: B, length: W }, P: L - R - c0, R, kept: c1 - (L - R) };
}

/** Columns [start, start + kept) of every row of a [B, L] host array, as rows of width R (zero-filled). */
export function rowColumns(
  full: Float32Array,
  B: number,
  L: number,
  start: number,
  kept: number,
  R: number,
): Float32Array {
  const out = new Float32Array(B * R);
  for (let b = 0; b < B; b++) out.set(full.subarray(b * L + start, b * L + start + kept), b * R);
  return out;
}

/** [b, kept] -> [b, R] with zero columns on the right (a trimmed batch's scores at full width). */
export function padColumns(t: tf.Tensor2D, R: number): tf.Tensor2D {
  const kept = t.shape[1];
  return kept === R
    ? t
    : tf.pad(t, [
        [0, 0],
        [0, R - kept],
      ]);
}

/** Rows `idx` of a [B, R] host array. */
export function pickRows(data: Float32Array, R: number, idx: readonly number[]): Float32Array {
  const out = new Float32Array(idx.length * R);
  for (const [i, row] of idx.entries()) out.set(data.subarray(row * R, (row + 1) * R), i * R);
  return out;
}

/** Rows `idx` of `data`: a view when they are contiguous and in order, else a copy. */
export function rowsOf(data: DataProto, idx: readonly number[]): DataProto {
  const first = idx[0] ?? 0;
  return idx.every((row, i) => row === first + i)
    ? data.slice(first, first + idx.length)
    : data.selectRows(idx);
}
