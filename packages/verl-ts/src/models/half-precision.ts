/**
 * 16-bit weight storage. tfjs has no bfloat16 or float16 tensor, so weights stored in a half dtype live
 * on the host as their 16-bit patterns (HalfArray) and are widened to float32 for compute; widening is
 * exact, so a bf16-stored model computes with exactly the bf16-rounded weights. Rounding is to nearest
 * even (what torch's `.to(torch.bfloat16)` / `.half()` do).
 */
import { nativeBlas } from "./native-blas.js";

/** Arrays at least this long are converted by the addon where it loads (the same bits, ~10x faster). */
const NATIVE_CONVERT_MIN = 4096;

/** veRL's `actor_rollout_ref.model.dtype` values: how weights are stored. */
export type WeightDtype = "float32" | "bfloat16" | "float16";
export const WEIGHT_DTYPES: readonly WeightDtype[] = ["float32", "bfloat16", "float16"];
export type HalfDtype = Exclude<WeightDtype, "float32">;

/** Bytes one value takes in a dtype. */
export function bytesPerValue(dtype: WeightDtype): number {
  return dtype === "float32" ? 4 : 2;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> bfloat16 bits, round to nearest even; NaN stays NaN. */
export function floatToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  if ((b & 0x7f800000) === 0x7f800000 && b & 0x7fffff) return 0x7fc0;
  return ((b + 0x7fff + ((b >> 16) & 1)) >>> 16) & 0xffff;
}

/** float32 -> IEEE float16 bits, round to nearest even (subnormals kept, overflow to infinity). */
export function floatToHalf(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  return sign | half;
}

/** IEEE float16 bits -> the number they hold. */
export function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? Number.NaN : s * Number.POSITIVE_INFINITY;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

/** Values stored as bfloat16 or float16 bit patterns, row-major like the Float32Array they stand for. */
export class HalfArray {
  constructor(
    readonly dtype: HalfDtype,
    readonly bits: Uint16Array,
  ) {}

  /** Rounds float32 values into a half dtype. */
  static fromFloat32(values: ArrayLike<number>, dtype: HalfDtype): HalfArray {
    const bits = new Uint16Array(values.length);
    if (dtype === "bfloat16" && values instanceof Float32Array) roundToBf16Into(values, bits);
    else {
      const round = dtype === "bfloat16" ? floatToBf16 : floatToHalf;
      for (let i = 0; i < values.length; i++) bits[i] = round(values[i]!);
    }
    return new HalfArray(dtype, bits);
  }

  get length(): number {
    return this.bits.length;
  }

  get byteLength(): number {
    return this.bits.byteLength;
  }

  /** The values as float32 (exact), into `out` when given. */
  toFloat32(out: Float32Array = new Float32Array(this.bits.length)): Float32Array {
    const n = this.bits.length;
    if (out.length !== n) throw new RangeError(`toFloat32: ${n} values into an array of ${out.length}`);
    const bits = this.bits; // a local: the loop runs over hundreds of millions of values
    const blas = this.dtype === "bfloat16" && n >= NATIVE_CONVERT_MIN ? nativeBlas() : undefined;
    if (blas) blas.widenBf16(bits, out);
    else if (this.dtype === "bfloat16") {
      const u = new Uint32Array(out.buffer, out.byteOffset, n);
      for (let i = 0; i < n; i++) u[i] = bits[i]! << 16;
    } else for (let i = 0; i < n; i++) out[i] = halfToFloat(bits[i]!);
    return out;
  }

  /** Overwrites the values from float32 (rounded), keeping the storage. */
  assign(values: ArrayLike<number>): void {
    if (values.length !== this.bits.length)
      throw new RangeError(
        `assign: ${values.length} values into a ${this.dtype} array of ${this.bits.length}`,
      );
    if (this.dtype === "bfloat16" && values instanceof Float32Array) {
      roundToBf16Into(values, this.bits);
      return;
    }
    const round = this.dtype === "bfloat16" ? floatToBf16 : floatToHalf;
    for (let i = 0; i < values.length; i++) this.bits[i] = round(values[i]!);
  }
}

/**
 * floatToBf16 over a whole array, reading the float32 bits through an integer view: the same bits as
 * the per-value function (round to nearest even, NaN to the quiet NaN 0x7fc0) without a call and a
 * scratch round trip per value (the actor's gathers round hundreds of millions of values per step). Long
 * arrays go to the addon's roundBf16 where it loads: the same bits.
 */
export function roundToBf16Into(values: Float32Array, bits: Uint16Array): void {
  const n = values.length;
  if (bits.length !== n) throw new RangeError(`bf16 rounding: ${n} values into ${bits.length}`);
  const blas = n >= NATIVE_CONVERT_MIN ? nativeBlas() : undefined;
  if (blas) {
    blas.roundBf16(values, bits);
    return;
  }
  const u = new Uint32Array(values.buffer, values.byteOffset, n);
  for (let i = 0; i < n; i++) {
    const b = u[i]!;
    bits[i] = (b & 0x7fffffff) > 0x7f800000 ? 0x7fc0 : (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
}

/** Values in a storage dtype: float32 as is, half dtypes as bit patterns. */
export type StoredValues = Float32Array | HalfArray;

/** Stores float32 values in `dtype` (a copy-free pass-through for float32). */
export function toStored(values: Float32Array, dtype: WeightDtype): StoredValues {
  return dtype === "float32" ? values : HalfArray.fromFloat32(values, dtype);
}

/** float32 values rounded to `dtype` (a new array), or the values themselves for float32. */
export function roundedTo(values: Float32Array, dtype: WeightDtype): Float32Array {
  return dtype === "float32" ? values : HalfArray.fromFloat32(values, dtype).toFloat32();
}

/** Values [from, to) of stored values, in their dtype (a view, not a copy). */
export function storedRange(values: StoredValues, from: number, to: number): StoredValues {
  return values instanceof HalfArray
    ? new HalfArray(values.dtype, values.bits.subarray(from, to))
    : values.subarray(from, to);
}

/** Values [from, to) of stored values as float32, written into `out` (widened when half). */
export function float32Range(values: StoredValues, from: number, to: number, out: Float32Array): void {
  if (values instanceof HalfArray)
    new HalfArray(values.dtype, values.bits.subarray(from, to)).toFloat32(out.subarray(0, to - from));
  else out.set(values.subarray(from, to));
}
