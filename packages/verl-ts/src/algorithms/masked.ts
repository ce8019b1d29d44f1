import type { BatchTensor, TypedArray } from "../protocol/tensor.js";

/** A [batch, seq] float matrix (row-major). */
export type ScoreMatrix = BatchTensor<Float32Array>;
/** A [batch, seq] mask: 1 for tokens that count, 0 otherwise (any numeric typed array). */
export type MaskMatrix = BatchTensor<Exclude<TypedArray, BigInt64Array | BigUint64Array>>;

/** Thrown for bad algorithm inputs: shape mismatches, unknown names, degenerate masks. */
export class AlgorithmInputError extends Error {
  override name = "AlgorithmInputError";
}

export function dims2(t: BatchTensor, what: string): [number, number] {
  if (t.shape.length !== 2)
    throw new AlgorithmInputError(`${what} must be [batch, seq], got [${t.shape.join(", ")}]`);
  return [t.shape[0]!, t.shape[1]!];
}

export function sameShape(a: BatchTensor, b: BatchTensor, an: string, bn: string): void {
  if (a.shape.length !== b.shape.length || a.shape.some((d, i) => d !== b.shape[i])) {
    throw new AlgorithmInputError(
      `${an} [${a.shape.join(", ")}] and ${bn} [${b.shape.join(", ")}] differ in shape`,
    );
  }
}

export function matrix(data: Float32Array, rows: number, cols: number): ScoreMatrix {
  return { data, shape: [rows, cols] };
}

/** sum(values * mask) over all elements. */
export function maskedSum(values: BatchTensor, mask: MaskMatrix): number {
  sameShape(values, mask, "values", "mask");
  let s = 0;
  for (let i = 0; i < values.data.length; i++) s += (values.data[i] as number) * (mask.data[i] as number);
  return s;
}

function maskTotal(mask: MaskMatrix): number {
  let m = 0;
  for (let i = 0; i < mask.data.length; i++) m += mask.data[i] as number;
  return m;
}

/** masked_mean = sum(values * mask) / (sum(mask) + 1e-8), over all elements (veRL's verl_F.masked_mean). */
export function maskedMeanScalar(values: BatchTensor, mask: MaskMatrix): number {
  return maskedSum(values, mask) / (maskTotal(mask) + 1e-8);
}

/** Per-row masked mean: out[b] = sum_t(values[b,t] mask[b,t]) / (sum_t mask[b,t] + 1e-8). */
export function maskedMeanRows(values: BatchTensor, mask: MaskMatrix): Float64Array {
  sameShape(values, mask, "values", "mask");
  const [B, T] = dims2(values, "values");
  const out = new Float64Array(B);
  for (let b = 0; b < B; b++) {
    let s = 0;
    let m = 0;
    for (let t = 0; t < T; t++) {
      const w = mask.data[b * T + t] as number;
      s += (values.data[b * T + t] as number) * w;
      m += w;
    }
    out[b] = s / (m + 1e-8);
  }
  return out;
}

/**
 * masked_var: mean = masked_mean(v, m); var = masked_mean((v - mean)^2, m); when unbiased, var is
 * multiplied by the Bessel correction n / (n - 1) with n = sum(mask), which must be at least 2.
 */
export function maskedVar(values: BatchTensor, mask: MaskMatrix, unbiased = true): number {
  const mean = maskedMeanScalar(values, mask);
  let s = 0;
  for (let i = 0; i < values.data.length; i++) {
    const c = (values.data[i] as number) - mean;
    s += c * c * (mask.data[i] as number);
  }
  const n = maskTotal(mask);
  let v = s / (n + 1e-8);
  if (unbiased) {
    if (n === 0)
      throw new AlgorithmInputError("maskedVar: the mask is empty; at least one element must be 1");
    if (n === 1)
      throw new AlgorithmInputError("maskedVar: the mask sums to one, the unbiased variance divides by zero");
    v *= n / (n - 1);
  }
  return v;
}

/**
 * masked_whiten: (v - mean) / sqrt(var + 1e-8) with the masked mean and unbiased masked variance;
 * with shiftMean=false the mean is added back. Applied to every element (masked ones too).
 */
export function maskedWhiten(values: ScoreMatrix, mask: MaskMatrix, shiftMean = true): ScoreMatrix {
  const mean = maskedMeanScalar(values, mask);
  const v = maskedVar(values, mask);
  const r = 1 / Math.sqrt(v + 1e-8);
  const out = new Float32Array(values.data.length);
  for (let i = 0; i < out.length; i++) out[i] = (values.data[i]! - mean) * r + (shiftMean ? 0 : mean);
  return { data: out, shape: [...values.shape] };
}
