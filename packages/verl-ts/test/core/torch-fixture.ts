/** The PyTorch reference fixtures of the algorithm tests: their [B, T] inputs, and the tolerance check. */
import { readFileSync } from "node:fs";
import type { ExecutionContext } from "ava";
import type { ScoreMatrix } from "../../src/algorithms/index.js";

/** A fixture of test/fixtures/core: `inputs` are [B, T] matrices (flattened) plus `index`. */
export function loadTorchFixture(file: string) {
  const fx = JSON.parse(readFileSync(new URL(`../fixtures/core/${file}`, import.meta.url), "utf8"));
  const [B, T] = fx.shape as [number, number];
  const m = (name: string): ScoreMatrix => ({ data: Float32Array.from(fx.inputs[name]), shape: [B, T] });
  return { fx, B, T, m, mask: m("mask"), index: fx.inputs.index as string[] };
}

/** A check that fails unless every value is within `tol` (default `defaultTol`) of the reference. */
export function closeWithin(defaultTol: number) {
  return (
    t: ExecutionContext,
    actual: ArrayLike<number> | number,
    expected: ArrayLike<number> | number,
    tol = defaultTol,
  ): void => assertClose(t, actual, expected, tol);
}

/** Fails unless every value is within `tol` of the reference (relative, absolute below 1). */
export function assertClose(
  t: ExecutionContext,
  actual: ArrayLike<number> | number,
  expected: ArrayLike<number> | number,
  tol: number,
): void {
  const a = typeof actual === "number" ? [actual] : Array.from(actual);
  const e = typeof expected === "number" ? [expected] : Array.from(expected);
  t.is(a.length, e.length, "length");
  let worst = 0;
  let at = -1;
  for (let i = 0; i < a.length; i++) {
    const err = Math.abs(a[i]! - e[i]!) / Math.max(1, Math.abs(e[i]!));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  t.true(worst <= tol, `max relative error ${worst} at ${at}: got ${a[at]}, want ${e[at]}`);
}
