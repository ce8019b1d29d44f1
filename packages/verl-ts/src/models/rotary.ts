/**
 * Rotary position embeddings (rotate_half form): x * cos + rotate_half(x) * sin, with angle
 * position * theta^(-2i / D) for the i-th of the D/2 frequencies, repeated over both halves; Llama 3's
 * scaling rescales those frequencies (rotaryFrequencies).
 */
import * as tf from "@tensorflow/tfjs";
import type { Llama3RopeScaling } from "./config.js";

/**
 * The D/2 rotary frequencies theta^(-2i / D), rescaled as Llama 3 does where `scaling` is given
 * (transformers' _compute_llama3_parameters): low frequencies divided by the factor, high ones kept, the
 * band between interpolated smoothly.
 */
export function rotaryFrequencies(headDim: number, theta: number, scaling?: Llama3RopeScaling): Float64Array {
  const half = headDim / 2;
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / theta ** ((2 * i) / headDim);
  if (!scaling) return inv;
  const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: old } = scaling;
  const lowFreqWavelen = old / lowFreqFactor;
  const highFreqWavelen = old / highFreqFactor;
  for (let i = 0; i < half; i++) {
    const f = inv[i]!;
    const wavelen = (2 * Math.PI) / f;
    if (wavelen > lowFreqWavelen) inv[i] = f / factor;
    else if (wavelen >= highFreqWavelen) {
      const smooth = (old / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
      inv[i] = (1 - smooth) * (f / factor) + smooth * f;
    }
  }
  return inv;
}

export class Rotary {
  /** Signed permutation R with x @ R = rotate_half(x). */
  private readonly rot: tf.Tensor2D;
  private readonly invFreq: Float64Array;

  constructor(
    private readonly headDim: number,
    theta: number,
    scaling?: Llama3RopeScaling,
  ) {
    const D = headDim;
    const half = D / 2;
    const r = new Float32Array(D * D);
    for (let j = 0; j < half; j++) r[(j + half) * D + j] = -1;
    for (let j = half; j < D; j++) r[(j - half) * D + j] = 1;
    this.rot = tf.keep(tf.tensor2d(r, [D, D]));
    this.invFreq = rotaryFrequencies(D, theta, scaling);
  }

  /** cos and sin tables for rows of positions, expanded to [B, L, heads, D]. */
  tables(positions: Int32Array, B: number, L: number, heads: number): [tf.Tensor4D, tf.Tensor4D] {
    const D = this.headDim;
    const half = D / 2;
    const cos = new Float32Array(B * L * heads * D);
    const sin = new Float32Array(B * L * heads * D);
    const c = new Float32Array(D);
    const s = new Float32Array(D);
    for (let t = 0; t < B * L; t++) {
      const p = positions[t]!;
      for (let i = 0; i < half; i++) {
        const a = p * this.invFreq[i]!;
        c[i] = c[i + half] = Math.cos(a);
        s[i] = s[i + half] = Math.sin(a);
      }
      for (let h = 0; h < heads; h++) {
        cos.set(c, (t * heads + h) * D);
        sin.set(s, (t * heads + h) * D);
      }
    }
    return [tf.tensor4d(cos, [B, L, heads, D]), tf.tensor4d(sin, [B, L, heads, D])];
  }

  /** Rotates x [B, L, H, D] by tables from `tables`. */
  apply(x: tf.Tensor4D, cos: tf.Tensor4D, sin: tf.Tensor4D): tf.Tensor4D {
    const [B, L, H, D] = x.shape;
    const rotated = tf.reshape(tf.matMul(tf.reshape(x, [B * L * H, D]) as tf.Tensor2D, this.rot), [
      B,
      L,
      H,
      D,
    ]);
    return tf.add(tf.mul(x, cos), tf.mul(rotated, sin));
  }

  /**
   * A host-side rotation for one decode step: returns `rotate(x) * scale` for x [B, heads, D] in place,
   * each row at its own position.
   */
  hostStep(positions: Int32Array): (x: Float32Array, heads: number, scale: number) => Float32Array {
    const D = this.headDim;
    const half = D / 2;
    const B = positions.length;
    const { cos, sin } = this.stepTables(positions);
    return (x, heads, scale) => {
      for (let b = 0; b < B; b++)
        for (let h = 0; h < heads; h++) {
          const o = (b * heads + h) * D;
          for (let j = 0; j < half; j++) {
            const c = cos[b * half + j]!;
            const s = sin[b * half + j]!;
            const x1 = x[o + j]!;
            const x2 = x[o + j + half]!;
            x[o + j] = (x1 * c - x2 * s) * scale;
            x[o + j + half] = (x2 * c + x1 * s) * scale;
          }
        }
      return x;
    };
  }

  /** cos and sin [B, D/2] of one position per row (each frequency once: both halves share it). */
  stepTables(positions: Int32Array): { cos: Float32Array; sin: Float32Array } {
    const half = this.headDim / 2;
    const B = positions.length;
    const cos = new Float32Array(B * half);
    const sin = new Float32Array(B * half);
    for (let b = 0; b < B; b++)
      for (let j = 0; j < half; j++) {
        const a = positions[b]! * this.invFreq[j]!;
        cos[b * half + j] = Math.cos(a);
        sin[b * half + j] = Math.sin(a);
      }
    return { cos, sin };
  }

  dispose(): void {
    this.rot.dispose();
  }
}
