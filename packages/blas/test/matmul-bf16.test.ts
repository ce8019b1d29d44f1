import test, { type ExecutionContext } from "ava";
import { type Bf16Build, loadNativeBlas, type NativeBlas } from "../src/index.js";

// matmulBf16: float32 rows times a weight held as bfloat16 bits, against a float64 reference over the
// widened weight, in both layouts; its bounds checks; and the same bits from every build the CPU runs.

function addon(t: ExecutionContext): NativeBlas | undefined {
  const load = loadNativeBlas();
  if (load.ok) return load.blas;
  if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
  else t.log(`not checked: ${load.reason}`);
  t.pass();
  return undefined;
}

/** A seeded generator of uniform values in [-1, 1). */
function uniform(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return (((z ^ (z >>> 14)) >>> 0) / 2 ** 32) * 2 - 1;
  };
}

/** n random bfloat16 bit patterns (truncated float32 values of [-scale, scale)) and their values. */
function bf16Weight(n: number, seed: number, scale = 1): { bits: Uint16Array; values: Float32Array } {
  const r = uniform(seed);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const bits = new Uint16Array(n);
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    f[0] = r() * scale;
    bits[i] = u[0]! >>> 16;
    u[0] = bits[i]! << 16;
    values[i] = f[0]!;
  }
  return { bits, values };
}

function floats(n: number, seed: number): Float32Array {
  const r = uniform(seed);
  return Float32Array.from({ length: n }, () => r());
}

/** The largest |got - want| over (sum of |x w| terms) for each output: float32 rounding is about k eps. */
function maxScaledError(
  x: Float32Array,
  w: Float32Array,
  got: Float32Array,
  m: number,
  n: number,
  k: number,
  transposeW: boolean,
): number {
  let worst = 0;
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let sum = 0;
      let abs = 0;
      for (let p = 0; p < k; p++) {
        const term = x[i * k + p]! * w[transposeW ? j * k + p : p * n + j]!;
        sum += term;
        abs += Math.abs(term);
      }
      worst = Math.max(worst, Math.abs(got[i * n + j]! - sum) / Math.max(abs, 1e-30));
    }
  return worst;
}

const shapes: [number, number, number][] = [];
for (let m = 1; m <= 9; m++) shapes.push([m, 37, 83]);
shapes.push([33, 300, 129], [2, 17, 1000], [5, 64, 16], [3, 16, 64], [4, 1, 1], [1, 257, 7], [6, 80, 33]);

test("matmulBf16 matches a float64 product over the widened weight, both layouts, many shapes", (t) => {
  const blas = addon(t);
  if (!blas) return;
  for (const transposeW of [true, false])
    for (const [m, n, k] of shapes) {
      const x = floats(m * k, m * 1000 + k);
      const w = bf16Weight(n * k, n * 7 + k);
      const out = new Float32Array(m * n).fill(Number.NaN);
      blas.matmulBf16(x, w.bits, out, m, n, k, transposeW, "auto");
      const err = maxScaledError(x, w.values, out, m, n, k, transposeW);
      // float32 sums of k terms: within a few k float32 epsilons of the float64 sum
      t.true(err <= (k + 2) * 2 ** -24, `m=${m} n=${n} k=${k} transposeW=${transposeW}: ${err}`);
    }
});

test("matmulBf16 with empty dimensions: k = 0 writes zeros, m or n = 0 writes nothing", (t) => {
  const blas = addon(t);
  if (!blas) return;
  for (const transposeW of [true, false]) {
    const out = new Float32Array(6).fill(7);
    blas.matmulBf16(new Float32Array(0), new Uint16Array(0), out, 2, 3, 0, transposeW, "auto");
    t.deepEqual(Array.from(out), [0, 0, 0, 0, 0, 0]);
    const untouched = new Float32Array(3).fill(7);
    blas.matmulBf16(new Float32Array(0), new Uint16Array(12), untouched, 0, 3, 4, transposeW, "auto");
    blas.matmulBf16(new Float32Array(8), new Uint16Array(0), untouched, 2, 0, 4, transposeW, "auto");
    t.deepEqual(Array.from(untouched), [7, 7, 7]);
  }
});

test("matmulBf16 refuses operands shorter than m, n and k say, wrong array types and unknown builds", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const [m, n, k] = [3, 5, 7];
  const x = new Float32Array(m * k);
  const w = new Uint16Array(n * k);
  const out = new Float32Array(m * n);
  const short = /an operand is shorter than m, n and k say/;
  t.throws(() => blas.matmulBf16(x.subarray(1), w, out, m, n, k, true, "auto"), { message: short });
  t.throws(() => blas.matmulBf16(x, w.subarray(1), out, m, n, k, false, "auto"), { message: short });
  t.throws(() => blas.matmulBf16(x, w, out.subarray(1), m, n, k, true, "auto"), { message: short });
  t.throws(
    () => blas.matmulBf16(x, new Float32Array(n * k) as unknown as Uint16Array, out, m, n, k, true, "auto"),
    {
      message: /w must be a Uint16Array of bfloat16 bits/,
    },
  );
  t.throws(() => blas.matmulBf16(x, w, out, -1, n, k, true, "auto"), { message: /m must be in/ });
  t.throws(() => blas.matmulBf16(x, w, out, m, n, k, true, "sse9" as Bf16Build), {
    message: /build must be auto, avx512f, avx2 or baseline, got 'sse9'/,
  });
  // the checks run before any write
  t.deepEqual(Array.from(out), new Array(m * n).fill(0));
});

test("matmulBf16 gives the same bits from every build this CPU runs, and from call to call", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const builds: Bf16Build[] = ["auto", "avx512f", "avx2", "baseline"];
  const runnable = builds.filter((b) => {
    try {
      blas.matmulBf16(new Float32Array(1), new Uint16Array(1), new Float32Array(1), 1, 1, 1, true, b);
      return true;
    } catch (error) {
      t.regex((error as Error).message, /does not run the|only the baseline build/);
      return false;
    }
  });
  t.true(runnable.includes("baseline"));
  t.log(`builds compared: ${runnable.join(", ")}`);
  for (const transposeW of [true, false])
    for (const [m, n, k] of [
      [2, 300, 897],
      [9, 70, 130],
      [33, 40, 50],
    ] as const) {
      const x = floats(m * k, 11 + m);
      const w = bf16Weight(n * k, 12 + n);
      const outs = runnable.map((b) => {
        const out = new Float32Array(m * n);
        blas.matmulBf16(x, w.bits, out, m, n, k, transposeW, b);
        return new Uint32Array(out.buffer);
      });
      const again = new Float32Array(m * n);
      blas.matmulBf16(x, w.bits, again, m, n, k, transposeW, "auto");
      for (const [i, o] of outs.entries())
        t.deepEqual(
          o,
          outs[0]!,
          `${runnable[i]} vs ${runnable[0]}, m=${m} n=${n} k=${k} transposeW=${transposeW}`,
        );
      t.deepEqual(new Uint32Array(again.buffer), outs[0]!);
    }
});
