import test, { type ExecutionContext } from "ava";
import { applyAmxSetting, type NativeBlas, sumSquaresInOrder } from "../src/index.js";
import { addon } from "./helpers.js";

// matmulBf16: float32 rows times a weight held as bfloat16 bits, against a float64 reference over the
// widened weight, in both layouts, on one tile and on many (past 8 rows the weight is widened a tile at a
// time); up to 8 rows, the bits of its arithmetic written out; its bounds checks; and the same bits from
// call to call whatever ran before.

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
// k = 4096 makes tiles of 32 columns past 8 rows: several whole tiles and a short last one
shapes.push([1, 150, 4096], [3, 200, 4096], [17, 150, 4096], [9, 64, 4096]);
// k past 65,536: a [k, n] weight is tiled by runs of rows, each added onto the sums before it
shapes.push([2, 20, 70000], [9, 24, 70000]);

test("matmulBf16 matches a float64 product over the widened weight, both layouts, many shapes", (t) => {
  const blas = addon(t);
  if (!blas) return;
  for (const transposeW of [true, false])
    for (const [m, n, k] of shapes) {
      const x = floats(m * k, m * 1000 + k);
      const w = bf16Weight(n * k, n * 7 + k);
      const out = new Float32Array(m * n).fill(Number.NaN);
      blas.matmulBf16(x, w.bits, out, m, n, k, transposeW);
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
    blas.matmulBf16(new Float32Array(0), new Uint16Array(0), out, 2, 3, 0, transposeW);
    t.deepEqual(Array.from(out), [0, 0, 0, 0, 0, 0]);
    const untouched = new Float32Array(3).fill(7);
    blas.matmulBf16(new Float32Array(0), new Uint16Array(12), untouched, 0, 3, 4, transposeW);
    blas.matmulBf16(new Float32Array(8), new Uint16Array(0), untouched, 2, 0, 4, transposeW);
    t.deepEqual(Array.from(untouched), [7, 7, 7]);
  }
});

test("matmulBf16 refuses operands shorter than m, n and k say, wrong array types and a transposeW that is not a boolean", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const [m, n, k] = [3, 5, 7];
  const x = new Float32Array(m * k);
  const w = new Uint16Array(n * k);
  const out = new Float32Array(m * n);
  const short = /an operand is shorter than m, n and k say/;
  t.throws(() => blas.matmulBf16(x.subarray(1), w, out, m, n, k, true), { message: short });
  t.throws(() => blas.matmulBf16(x, w.subarray(1), out, m, n, k, false), { message: short });
  t.throws(() => blas.matmulBf16(x, w, out.subarray(1), m, n, k, true), { message: short });
  t.throws(() => blas.matmulBf16(x, new Float32Array(n * k) as unknown as Uint16Array, out, m, n, k, true), {
    message: /w must be a Uint16Array of bfloat16 bits/,
  });
  t.throws(() => blas.matmulBf16(x, w, out, -1, n, k, true), { message: /m must be in/ });
  t.throws(() => blas.matmulBf16(x, w, out, m, n, k, 1 as unknown as boolean), {
    message: /transposeW must be a boolean/,
  });
  // the checks run before any write
  t.deepEqual(Array.from(out), new Array(m * n).fill(0));
});

test("matmulBf16 gives the same bits from call to call, whatever product ran before", (t) => {
  const blas = addon(t);
  if (!blas) return;
  for (const transposeW of [true, false])
    for (const [m, n, k] of [
      [2, 300, 897],
      [1, 150, 4096],
      [33, 40, 50],
    ] as const) {
      const x = floats(m * k, 11 + m);
      const w = bf16Weight(n * k, 12 + n);
      const first = new Float32Array(m * n);
      blas.matmulBf16(x, w.bits, first, m, n, k, transposeW);
      // a larger product between: the tile buffer then holds other values, and more of them
      const big = bf16Weight(64 * 8192, 5);
      blas.matmulBf16(floats(3 * 8192, 6), big.bits, new Float32Array(3 * 64), 3, 64, 8192, true);
      const again = new Float32Array(m * n);
      blas.matmulBf16(x, w.bits, again, m, n, k, transposeW);
      t.deepEqual(new Uint32Array(again.buffer), new Uint32Array(first.buffer), `m=${m} n=${n} k=${k}`);
    }
});

/**
 * The few-rows path's arithmetic written out in float32 (Math.fround after every operation): [n, k] read
 * transposed takes 16 running sums (lane l: the indices l mod 16 of the whole chunks of 16), halved twice
 * into 4 and added ((l0 + l1) + (l2 + l3)), then the rest in order; [k, n] adds x[p] W[p][j] in order of p.
 */
function fewRowsReference(
  x: Float32Array,
  w: Float32Array,
  m: number,
  n: number,
  k: number,
  transposeW: boolean,
) {
  const f = Math.fround;
  const out = new Float32Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      if (!transposeW) {
        let acc = 0;
        for (let p = 0; p < k; p++) acc = f(acc + f(x[i * k + p]! * w[p * n + j]!));
        out[i * n + j] = acc;
        continue;
      }
      const lanes = new Array<number>(16).fill(0);
      const whole = k - (k % 16);
      for (let p = 0; p < whole; p++) lanes[p % 16] = f(lanes[p % 16]! + f(x[i * k + p]! * w[j * k + p]!));
      let rest = 0;
      for (let p = whole; p < k; p++) rest = f(rest + f(x[i * k + p]! * w[j * k + p]!));
      const half = lanes.slice(0, 8).map((v, l) => f(v + lanes[l + 8]!));
      const quarter = half.slice(0, 4).map((v, l) => f(v + half[l + 4]!));
      out[i * n + j] = f(f(f(quarter[0]! + quarter[1]!) + f(quarter[2]! + quarter[3]!)) + rest);
    }
  return out;
}

test("matmulBf16 of up to 8 rows (decode steps) has the bits of its arithmetic written out, each row's whatever the others", (t) => {
  const blas = addon(t);
  if (!blas) return;
  // n past the kernel's blocks of rows and columns (of 128, 64 and 32) and short of them, with a band of
  // 16 left; k with and without a rest of 16 after its chunks of 32, over several chunks of depth
  for (const transposeW of [true, false])
    for (const [n, k] of [
      [37, 83],
      [178, 83],
      [200, 96],
      [65, 33],
      [16, 16],
      [3, 7],
    ] as const) {
      const x = floats(8 * k, n + k);
      const w = bf16Weight(n * k, 3 * n + k);
      const want = fewRowsReference(x, w.values, 8, n, k, transposeW);
      for (let m = 1; m <= 8; m++) {
        const out = new Float32Array(m * n).fill(Number.NaN);
        blas.matmulBf16(x.subarray(0, m * k), w.bits, out, m, n, k, transposeW);
        t.deepEqual(
          new Uint32Array(out.buffer),
          new Uint32Array(want.slice(0, m * n).buffer),
          `m=${m} n=${n} k=${k} transposeW=${transposeW}`,
        );
      }
    }
});

test("roundBf16 rounds to nearest even (NaN quiet, overflow to infinity) and widenBf16 widens exactly", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const special = [
    0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f800000, 0xff800000, 0x7f800001, 0xffc00000, 0x7f7fffff,
    0xff7fffff, 0x00000001, 0x80008000, 0x00018000,
  ];
  const words = new Uint32Array(100_003);
  words.set(special);
  const r = uniform(77);
  for (let i = special.length; i < words.length; i++) words[i] = Math.floor(((r() + 1) / 2) * 2 ** 32) >>> 0;
  const bits = new Uint16Array(words.length);
  blas.roundBf16(new Float32Array(words.buffer), bits);
  for (let i = 0; i < words.length; i++) {
    const b = words[i]!;
    const want = (b & 0x7fffffff) > 0x7f800000 ? 0x7fc0 : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
    if (bits[i] !== want)
      return t.fail(`word ${b.toString(16)}: got ${bits[i]!.toString(16)}, want ${want.toString(16)}`);
  }
  t.deepEqual(
    Array.from(bits.subarray(0, 9)),
    [0x3f80, 0x3f82, 0x3f81, 0x7f80, 0xff80, 0x7fc0, 0x7fc0, 0x7f80, 0xff80],
  );
  const widened = new Float32Array(bits.length);
  blas.widenBf16(bits, widened);
  const u = new Uint32Array(widened.buffer);
  for (let i = 0; i < bits.length; i++)
    if (u[i] !== (bits[i]! << 16) >>> 0)
      return t.fail(`bits ${bits[i]!.toString(16)} widened to ${u[i]!.toString(16)}`);
  t.throws(() => blas.roundBf16(new Float32Array(3), new Uint16Array(2)), {
    message: /3 values into 2 bits/,
  });
  t.throws(() => blas.widenBf16(new Uint16Array(3), new Float32Array(4)), {
    message: /3 values into an array of 4/,
  });
  t.throws(() => blas.widenBf16(new Float32Array(3) as unknown as Uint16Array, new Float32Array(3)), {
    message: /bits must be a Uint16Array/,
  });
});

/** Sums of squares in the documented order: 8 running sums over whole chunks of 8, paired, then the rest. */
function laneSumSquares(x: Float32Array): number {
  const lanes = [0, 0, 0, 0, 0, 0, 0, 0];
  const whole = x.length - (x.length % 8);
  for (let i = 0; i < whole; i++) lanes[i % 8]! += x[i]! * x[i]!;
  const [a, b, c, d, e, f, g, h] = lanes as [number, number, number, number, number, number, number, number];
  let s = a + b + (c + d) + (e + f + (g + h));
  for (let i = whole; i < x.length; i++) s += x[i]! * x[i]!;
  return s;
}

test("addInto gives the bits of its JavaScript loop, sumSquares those of its documented order; mismatched lengths are refused", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const n = 50_001;
  const x = floats(n, 31).map((v, i) => v * 2 ** ((i % 40) - 20));
  const y = floats(n, 32);
  const want = y.slice();
  for (let i = 0; i < n; i++) want[i]! += x[i]!;
  blas.addInto(x, y);
  t.deepEqual(new Uint32Array(y.buffer), new Uint32Array(want.buffer));
  t.is(blas.sumSquares(x), laneSumSquares(x));
  t.is(sumSquaresInOrder(x), laneSumSquares(x), "the JavaScript spelling of the order");
  for (const short of [0, 3, 8, 13])
    t.is(blas.sumSquares(x.subarray(0, short)), laneSumSquares(x.subarray(0, short)));
  t.throws(() => blas.addInto(new Float32Array(3), new Float32Array(2)), {
    message: /3 values into an array of 2/,
  });
});

/**
 * matmulBf16(x, w) checked against a float64 product of `against` (x itself, or what x should become) and
 * the widened weight: within a few k float32 epsilons of each output's sum of |terms|. Returns the output.
 */
function checkProduct(
  t: ExecutionContext,
  blas: NativeBlas,
  x: Float32Array,
  w: { bits: Uint16Array; values: Float32Array },
  [m, n, k]: readonly [number, number, number],
  transposeW: boolean,
  against: Float32Array,
  label: string,
): Float32Array {
  // out at an offset of 0 to 2 floats into its buffer (off a cache line at times, as the tiles' last
  // stores may then write it), with a guard on both sides that must stay untouched
  const offset = (m + n + k) % 3;
  const guarded = new Float32Array(m * n + 8).fill(-1234.5);
  const out = guarded.subarray(offset, offset + m * n).fill(Number.NaN);
  blas.matmulBf16(x, w.bits, out, m, n, k, transposeW);
  t.true(
    guarded.subarray(0, offset).every((v) => v === -1234.5) &&
      guarded.subarray(offset + m * n).every((v) => v === -1234.5),
    `${label} m=${m} n=${n} k=${k}: nothing written outside out`,
  );
  const err = maxScaledError(against, w.values, out, m, n, k, transposeW);
  t.true(err <= (k + 2) * 2 ** -24, `${label} m=${m} n=${n} k=${k} transposeW=${transposeW}: ${err}`);
  return out;
}

/** The addon with its AMX tiles on (undefined, with the reason logged, where the machine has none). */
function withTiles(t: ExecutionContext, blas: NativeBlas): boolean {
  const { supported, reason } = blas.amx();
  if (!supported) t.log(`AMX not checked: ${reason}`);
  return supported;
}

test.serial(
  "past 8 rows, on AMX tiles and off them, matmulBf16 has float32 accuracy in both layouts",
  (t) => {
    const blas = addon(t);
    if (!blas) return;
    const settings = withTiles(t, blas) ? [true, false] : [false];
    // whole tiles and short ones (m, n not multiples of 16, k not of 32); k past one depth block (1024);
    // a [k, n] weight too wide for one packed panel of 32 whole rows (n past 24,576), in two panels
    const tileShapes: [number, number, number][] = [
      [17, 24640, 70],
      [9, 16, 32],
      [16, 32, 64],
      [32, 64, 1024],
      [17, 40, 70],
      [48, 96, 896],
      [33, 48, 2100],
      [20, 200, 1030],
      [40, 24, 3000],
    ];
    try {
      for (const tiles of settings) {
        blas.setAmx(tiles);
        t.is(blas.amx().enabled, tiles);
        for (const transposeW of [true, false])
          for (const [m, n, k] of [...tileShapes, ...shapes.filter(([m]) => m > 8)]) {
            const x = floats(m * k, m * 31 + k);
            const w = bf16Weight(n * k, n * 5 + k);
            checkProduct(t, blas, x, w, [m, n, k], transposeW, x, `tiles ${tiles}`);
          }
      }
    } finally {
      blas.setAmx(blas.amx().supported);
    }
  },
);

test.serial(
  "on AMX tiles a weight read transposed gives, bit for bit, the product of the same weight laid out [k, n] (few rows: the weight is the tiles' left operand)",
  (t) => {
    const blas = addon(t);
    if (!blas || !withTiles(t, blas)) return t.pass();
    // up to 32 rows with whole tiles of W (n a multiple of 32, k of 32 up to 1024) take the left-operand
    // path; the others (33 rows, n or k off a tile, k past 1024) the packed one
    const shapes = [
      ...[9, 16, 31, 32, 33].map((m) => [m, 64 * m, 896] as const),
      [32, 96, 1024] as const,
      [9, 32, 32] as const,
      [20, 48, 896] as const,
      [12, 64, 1056] as const,
    ];
    try {
      blas.setAmx(true);
      for (const dtype of ["float32", "bfloat16"] as const) {
        blas.setActivationDtype(dtype);
        for (const [m, n, k] of shapes) {
          const x = floats(m * k, m * 13 + k);
          const w = bf16Weight(n * k, n * 7 + k);
          // W [n, k] and its transpose [k, n]
          const plain = new Uint16Array(n * k);
          for (let j = 0; j < n; j++) for (let q = 0; q < k; q++) plain[q * n + j] = w.bits[j * k + q]!;
          const transposed = new Float32Array(m * n);
          const laidOut = new Float32Array(m * n);
          blas.matmulBf16(x, w.bits, transposed, m, n, k, true);
          blas.matmulBf16(x, plain, laidOut, m, n, k, false);
          t.deepEqual(
            new Uint32Array(transposed.buffer),
            new Uint32Array(laidOut.buffer),
            `${dtype} m=${m} n=${n} k=${k}`,
          );
        }
      }
    } finally {
      blas.setActivationDtype("float32");
      blas.setAmx(blas.amx().supported);
    }
  },
);

test.serial(
  "on AMX tiles each float32 x is split exactly: a product with the identity gives x back, bit for bit",
  (t) => {
    const blas = addon(t);
    if (!blas || !withTiles(t, blas)) return t.pass();
    // x of full float32 precision (24 significant bits); one bfloat16 piece alone would keep 8 of them
    const [m, k] = [24, 64];
    const x = floats(m * k, 77).map((v) => v * 1e3 + 1 / 3);
    const identity = new Uint16Array(k * k);
    for (let i = 0; i < k; i++) identity[i * k + i] = 0x3f80;
    for (const transposeW of [true, false]) {
      const out = new Float32Array(m * k);
      blas.matmulBf16(x, identity, out, m, k, k, transposeW);
      t.deepEqual(new Uint32Array(out.buffer), new Uint32Array(x.buffer), `transposeW=${transposeW}`);
    }
    // infinities and NaNs come through as in a float32 product: inf times a nonzero weight, inf times 0 NaN
    const special = new Float32Array(m * k);
    special[0] = Number.POSITIVE_INFINITY;
    special[k + 1] = Number.NEGATIVE_INFINITY;
    special[2 * k + 2] = Number.NaN;
    const out = new Float32Array(m * k);
    blas.matmulBf16(special, identity, out, m, k, k, false);
    t.is(out[0], Number.POSITIVE_INFINITY);
    t.true(Number.isNaN(out[1]!), "inf x 0 is NaN");
    t.is(out[k + 1], Number.NEGATIVE_INFINITY);
    t.true(Number.isNaN(out[2 * k + 2]!));
    t.is(out[3 * k + 3], 0);
  },
);

test.serial(
  "on AMX tiles a row's outputs have the same bits whatever rows share its call (a pass and its recomputation agree)",
  (t) => {
    const blas = addon(t);
    if (!blas || !withTiles(t, blas)) return t.pass();
    for (const transposeW of [true, false])
      for (const [n, k] of [
        [96, 1500],
        [40, 70],
      ] as const) {
        const m = 45;
        const x = floats(m * k, n + k);
        const w = bf16Weight(n * k, 2 * n + k);
        const all = new Float32Array(m * n);
        blas.matmulBf16(x, w.bits, all, m, n, k, transposeW);
        for (const [from, rows] of [
          [0, 9],
          [7, 16],
          [20, 25],
          [3, 33],
        ] as const) {
          const part = new Float32Array(rows * n);
          blas.matmulBf16(x.subarray(from * k, (from + rows) * k), w.bits, part, rows, n, k, transposeW);
          t.deepEqual(
            new Uint32Array(part.buffer),
            new Uint32Array(all.slice(from * n, (from + rows) * n).buffer),
            `rows ${from}..${from + rows} n=${n} k=${k} transposeW=${transposeW}`,
          );
        }
      }
  },
);

test.serial(
  "TORL_BLAS_AMX is on, off or unset; any other value, or on without tiles, throws naming it",
  (t) => {
    const state = { supported: true, enabled: true, reason: "" };
    const fake = {
      amx: () => ({ ...state }),
      setAmx: (enabled: boolean) => {
        if (enabled && !state.supported) throw new Error("no tiles");
        state.enabled = enabled;
      },
    };
    applyAmxSetting(fake, {});
    t.true(state.enabled);
    applyAmxSetting(fake, { TORL_BLAS_AMX: "off" });
    t.false(state.enabled);
    applyAmxSetting(fake, { TORL_BLAS_AMX: " on " });
    t.true(state.enabled);
    t.throws(() => applyAmxSetting(fake, { TORL_BLAS_AMX: "0" }), {
      message: /TORL_BLAS_AMX must be "on" or "off"/,
    });
    state.supported = false;
    state.reason = "the CPU has no AMX-BF16";
    t.throws(() => applyAmxSetting(fake, { TORL_BLAS_AMX: "on" }), {
      message: "TORL_BLAS_AMX=on, but this machine has no AMX tiles: the CPU has no AMX-BF16",
    });
    applyAmxSetting(fake, { TORL_BLAS_AMX: "off" });
    t.false(state.enabled);
    const blas = addon(t);
    if (!blas) return;
    t.throws(() => blas.setAmx(1 as unknown as boolean), { message: /setAmx: enabled must be a boolean/ });
    if (!blas.amx().supported) t.throws(() => blas.setAmx(true), { message: /setAmx: no AMX tiles here/ });
  },
);

test.serial(
  "with bfloat16 activations every product takes x rounded to bfloat16 first, on the tiles and off them",
  (t) => {
    const blas = addon(t);
    if (!blas) return;
    t.is(blas.activationDtype(), "float32");
    t.throws(() => blas.setActivationDtype("float16" as "float32"), {
      message: /must be "float32" or "bfloat16"/,
    });
    const settings = withTiles(t, blas) ? [true, false] : [false];
    try {
      blas.setActivationDtype("bfloat16");
      t.is(blas.activationDtype(), "bfloat16");
      for (const tiles of settings) {
        blas.setAmx(tiles);
        for (const transposeW of [true, false])
          for (const [m, n, k] of [
            [3, 40, 70],
            [8, 16, 32],
            [9, 48, 64],
            [33, 96, 1500],
          ] as const) {
            const x = floats(m * k, m + 7 * k);
            const w = bf16Weight(n * k, n + 3 * k);
            const rounded = new Float32Array(m * k);
            const bits = new Uint16Array(m * k);
            blas.roundBf16(x, bits);
            blas.widenBf16(bits, rounded);
            const out = checkProduct(t, blas, x, w, [m, n, k], transposeW, rounded, `tiles ${tiles}`);
            // and not the product of x whole: bfloat16 keeps 8 significant bits
            t.true(maxScaledError(x, w.values, out, m, n, k, transposeW) > 1e-4);
          }
      }
    } finally {
      blas.setActivationDtype("float32");
      blas.setAmx(blas.amx().supported);
    }
  },
);

test.serial(
  "a weight in the tile layout: packBf16Tiles puts W[p][j] where the layout says, in whole or in any run, unpackBf16Tiles undoes it, and matmulBf16Tiles gives matmulBf16's bits (on the tiles and off, float32 and bfloat16 activations, few rows and many)",
  (t) => {
    const blas = addon(t);
    if (!blas) return;
    // the layout's formula, written out: strips of 32 columns, pairs of rows, the pair's values side by side
    const k = 96;
    const n = 64;
    const w = bf16Weight(k * n, 11);
    const tiles = new Uint16Array(k * n);
    blas.packBf16Tiles(w.bits, k, n, 0, tiles);
    let placed = true;
    for (let p = 0; p < k; p++)
      for (let j = 0; j < n; j++) {
        const at = Math.floor(j / 32) * 32 * k + Math.floor(p / 2) * 64 + (j % 32) * 2 + (p % 2);
        if (tiles[at] !== w.bits[p * n + j]) placed = false;
      }
    t.true(placed, "every value where the layout puts it");
    // runs that start and end inside a pair-row, as a rank's piece of a sharded weight does
    for (const [from, to] of [
      [0, 1],
      [5, 70],
      [63, 64],
      [1000, 3333],
      [k * n - 7, k * n],
    ] as const) {
      const run = new Uint16Array(to - from);
      blas.packBf16Tiles(w.bits, k, n, from, run);
      t.deepEqual(run, tiles.subarray(from, to), `the run [${from}, ${to})`);
    }
    const back = new Uint16Array(k * n);
    blas.unpackBf16Tiles(tiles, k, n, back);
    t.deepEqual(back, w.bits);

    const settings = withTiles(t, blas) ? [true, false] : [false];
    try {
      for (const dtype of ["float32", "bfloat16"] as const) {
        blas.setActivationDtype(dtype);
        for (const onTiles of settings) {
          blas.setAmx(onTiles);
          // few rows (the addon's own loops), short tiles of rows, and depths past one block of pieces
          for (const [m, nn, kk] of [
            [1, 32, 32],
            [8, 64, 96],
            [9, 32, 64],
            [17, 96, 896],
            [33, 896, 128],
            [48, 64, 4864],
            [66, 128, 1024],
          ] as const) {
            const x = floats(m * kk, m * 13 + kk);
            const weight = bf16Weight(kk * nn, nn + 5 * kk);
            const laid = new Uint16Array(kk * nn);
            blas.packBf16Tiles(weight.bits, kk, nn, 0, laid);
            const want = new Float32Array(m * nn);
            const got = new Float32Array(m * nn);
            blas.matmulBf16(x, weight.bits, want, m, nn, kk, false);
            blas.matmulBf16Tiles(x, laid, got, m, nn, kk);
            t.deepEqual(got, want, `${dtype}, tiles ${onTiles}, [${m}, ${nn}, ${kk}]: the same bits`);
          }
        }
      }
    } finally {
      blas.setActivationDtype("float32");
      blas.setAmx(blas.amx().supported);
    }

    // shapes the layout does not hold, runs past the weight, short operands
    const out = new Float32Array(64);
    t.throws(() => blas.packBf16Tiles(new Uint16Array(48 * 32), 48, 32, 0, new Uint16Array(10)), {
      message: /multiples of 32, got k 48, n 32/,
    });
    t.throws(() => blas.packBf16Tiles(w.bits, k, n, k * n - 4, new Uint16Array(8)), {
      message: /must lie within them/,
    });
    t.throws(() => blas.packBf16Tiles(w.bits.subarray(1), k, n, 0, new Uint16Array(8)), {
      message: /needs 6144 values \(got 6143\)/,
    });
    t.throws(() => blas.unpackBf16Tiles(tiles, k, n, new Uint16Array(5)), { message: /room for 5/ });
    t.throws(() => blas.matmulBf16Tiles(new Float32Array(32), tiles, out, 1, 40, 32), {
      message: /multiples of 32, got k 32, n 40/,
    });
    t.throws(() => blas.matmulBf16Tiles(new Float32Array(32), tiles, out, 2, 64, 96), {
      message: /shorter than m, n and k say/,
    });
  },
);
