/**
 * Elementwise passes over long Float32Arrays for the sharded optimizer and the layer-by-layer update:
 * the addon's where it loads (arrays of 4096 values and more), else the same loops here, with the same
 * bits.
 */
import { registerReduceKernel } from "@torl-ts/actors";
import { nativeBlas } from "../models/native-blas.js";

/** y[i] += x[i]: the addon's pass where it loads, else the same loop here (the same bits). */
export function addInto(x: Float32Array, y: Float32Array): void {
  const blas = x.length >= 4096 ? nativeBlas() : undefined;
  if (blas) blas.addInto(x, y);
  else for (let k = 0; k < x.length; k++) y[k]! += x[k]!;
}

/**
 * The sum of squares in double precision, in the addon's order (the addon's pass where it loads: the same
 * bits): eight running sums, sum l over the indices l mod 8 of the whole chunks of 8, added
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the rest in index order.
 */
export function sumSquares(x: Float32Array): number {
  const blas = x.length >= 4096 ? nativeBlas() : undefined;
  if (blas) return blas.sumSquares(x);
  const acc = new Float64Array(8);
  const whole = x.length - (x.length % 8);
  for (let i = 0; i < whole; i += 8) for (let l = 0; l < 8; l++) acc[l]! += x[i + l]! * x[i + l]!;
  let s = acc[0]! + acc[1]! + (acc[2]! + acc[3]!) + (acc[4]! + acc[5]! + (acc[6]! + acc[7]!));
  for (let i = whole; i < x.length; i++) s += x[i]! * x[i]!;
  return s;
}

let reductionsRegistered = false;

/**
 * Makes addInto this process's loop for the collectives' float32 sums (reduce-scatter, all-reduce), where
 * the addon loads: the ring's own loop is JavaScript, and at Qwen2.5-0.5B's size a rank adds 426M
 * received values per update. Both add one pair of float32 values at a time, so the sums are the same
 * bits. Once per process; true when the addon's loop is registered.
 */
export function useNativeReductions(): boolean {
  if (reductionsRegistered) return true;
  if (!nativeBlas()) return false;
  const add = (acc: Float32Array | Float64Array, src: Float32Array | Float64Array) =>
    addInto(src as Float32Array, acc as Float32Array);
  registerReduceKernel("sum", Float32Array, add);
  registerReduceKernel("mean", Float32Array, add);
  reductionsRegistered = true;
  return true;
}
