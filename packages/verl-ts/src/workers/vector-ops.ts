/**
 * Elementwise passes over long Float32Arrays for the sharded optimizer and the layer-by-layer update:
 * the addon's where it loads (arrays of 4096 values and more), else the same loops here, with the same
 * bits.
 */
import { registerReduceKernel } from "@torl-ts/actors";
import { sumSquaresInOrder } from "@torl-ts/blas";
import { nativeBlas } from "../models/native-blas.js";

/** y[i] += x[i]: the addon's pass where it loads, else the same loop here (the same bits). */
export function addInto(x: Float32Array, y: Float32Array): void {
  const blas = x.length >= 4096 ? nativeBlas() : undefined;
  if (blas) blas.addInto(x, y);
  else for (let k = 0; k < x.length; k++) y[k]! += x[k]!;
}

/** The sum of squares in double precision, in the addon's order (its pass where it loads: the same bits). */
export function sumSquares(x: Float32Array): number {
  const blas = x.length >= 4096 ? nativeBlas() : undefined;
  return blas ? blas.sumSquares(x) : sumSquaresInOrder(x);
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
