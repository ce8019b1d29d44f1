import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { addonMissingReason, coreChoice, loadNativeBlas } from "@torl-ts/blas";
import test from "ava";
import { installNativeMatmul, selectBackend } from "../../src/index.js";
import { linear, linearTransposed } from "../../src/models/linear.js";
import { matmulShape, nativeKernelsState } from "../../src/models/native-matmul.js";
import { nativeAddon, seededUniform as random } from "./helpers.js";

const ROOT = join(import.meta.dirname, "..", "..", "..", "..");

/**
 * Plain-loop product in float64 for tfjs's BatchMatMul with batch broadcasting from 1: each entry's
 * value and its magnitude sum |a_iq| |b_qj| (what bounds the rounding of any float32 summation order).
 * float32 products are exact in float64, so `value` is the exact product to within k * 2^-53 * magnitude.
 */
function product64(
  a: Float32Array,
  aShape: number[],
  b: Float32Array,
  bShape: number[],
  transposeA: boolean,
  transposeB: boolean,
): { value: Float64Array; magnitude: Float64Array; k: number } {
  const s = matmulShape(aShape, bShape, transposeA, transposeB);
  const value = new Float64Array(s.batch * s.m * s.n);
  const magnitude = new Float64Array(value.length);
  for (let p = 0; p < s.batch; p++) {
    const ao = s.batchA === 1 ? 0 : p * s.m * s.k;
    const bo = s.batchB === 1 ? 0 : p * s.k * s.n;
    for (let i = 0; i < s.m; i++)
      for (let j = 0; j < s.n; j++) {
        let sum = 0;
        let abs = 0;
        for (let q = 0; q < s.k; q++) {
          const term =
            a[ao + (transposeA ? q * s.m + i : i * s.k + q)]! *
            b[bo + (transposeB ? j * s.k + q : q * s.n + j)]!;
          sum += term;
          abs += Math.abs(term);
        }
        value[(p * s.m + i) * s.n + j] = sum;
        magnitude[(p * s.m + i) * s.n + j] = abs;
      }
  }
  return { value, magnitude, k: s.k };
}

/** The plain-loop product rounded to float32, as tfjs returns it. */
function reference(...args: Parameters<typeof product64>): Float32Array {
  return Float32Array.from(product64(...args).value);
}

/**
 * The largest |got - exact| over the rounding bound a float32 sum of k products allows in any order,
 * with or without FMA, blocked or not: gamma_k * sum |terms|, gamma_k = k u / (1 - k u), u = 2^-24
 * (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), plus float64's own k * 2^-53 for the
 * reference. At most 1 means within what the arithmetic guarantees on any CPU.
 */
function roundingRatio(got: ArrayLike<number>, want: ReturnType<typeof product64>): number {
  const u = 2 ** -24;
  const gamma = (want.k * u) / (1 - want.k * u) + want.k * 2 ** -53;
  let worst = 0;
  for (let i = 0; i < want.value.length; i++) {
    const bound = gamma * want.magnitude[i]! + Number.MIN_VALUE;
    worst = Math.max(worst, Math.abs(got[i]! - want.value[i]!) / bound);
  }
  return worst;
}

const CASES: Array<{ a: number[]; b: number[]; tA: boolean; tB: boolean; nativeOnly?: boolean }> = [
  { a: [5, 7], b: [7, 3], tA: false, tB: false },
  { a: [7, 5], b: [7, 3], tA: true, tB: false },
  { a: [5, 7], b: [3, 7], tA: false, tB: true },
  { a: [7, 5], b: [3, 7], tA: true, tB: true },
  { a: [4, 6, 8], b: [4, 8, 2], tA: false, tB: false },
  { a: [2, 3, 6, 8], b: [2, 3, 5, 8], tA: false, tB: true }, // attention scores [B, H, L, D] x [B, H, L, D]^T
  { a: [1, 6, 8], b: [4, 8, 2], tA: false, tB: false }, // a broadcast over the batch
  { a: [4, 6, 8], b: [8, 2], tA: false, tB: false }, // b (a weight) broadcast over the batch
  { a: [1, 64], b: [64, 33], tA: false, tB: false }, // decode: one row (sgemv)
  { a: [3, 1, 8], b: [3, 5, 8], tA: false, tB: true }, // one row per batch entry against transposed b
  { a: [8, 1], b: [8, 6], tA: true, tB: false }, // one row stored as a column
  { a: [2, 1, 8], b: [8, 6], tA: false, tB: false }, // one row per entry, b shared
  // Empty inner dimension: zeros. Only checked on OpenBLAS: XNNPACK refuses it (status 2) and leaves the
  // output uninitialised.
  { a: [3, 0], b: [0, 4], tA: false, tB: false, nativeOnly: true },
];

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("BatchMatMul on wasm matches a plain-loop product for transposes, batches and broadcasts", (t) => {
  const state = installNativeMatmul("wasm");
  const load = loadNativeBlas();
  if (!load.ok) {
    // A machine without libopenblas-dev keeps the wasm kernel and the line says why; CI installs it
    // (.ci/setup.d/openblas.sh), so there the addon must be present.
    t.false(state.native);
    t.regex(state.line, /^native kernels off: the OpenBLAS addon .*; matmul on wasm XNNPACK$/);
    if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
  } else {
    t.true(state.native);
    t.is(
      state.line,
      `native kernels on: ${load.config.split(" ").slice(0, 2).join(" ")} sgemm, 1 thread, ${coreChoice(load.coreName)}; fused AdamW, log-prob pick, RMSNorm, SwiGLU, decode attention and bf16 weight products`,
    );
  }
  for (const [i, c] of CASES.entries()) {
    if (c.nativeOnly && !state.native) continue;
    const av = random(
      c.a.reduce((p, q) => p * q, 1),
      11 + i,
    );
    const bv = random(
      c.b.reduce((p, q) => p * q, 1),
      101 + i,
    );
    const got = tf.tidy(() => tf.matMul(tf.tensor(av, c.a), tf.tensor(bv, c.b), c.tA, c.tB));
    const want = reference(av, c.a, bv, c.b, c.tA, c.tB);
    const g = got.dataSync();
    t.is(g.length, want.length, `case ${i}`);
    let err = 0;
    for (let j = 0; j < want.length; j++) err = Math.max(err, Math.abs(g[j]! - want[j]!));
    t.true(err < 1e-5, `case ${i} [${c.a}]x[${c.b}] tA=${c.tA} tB=${c.tB}: max |diff| ${err}`);
    got.dispose();
  }
});

test("gradients through the native BatchMatMul match the plain-loop products", (t) => {
  installNativeMatmul("wasm");
  const av = random(4 * 6, 5);
  const bv = random(6 * 3, 6);
  const gy = random(4 * 3, 7);
  const [da, db] = tf.grads((a: tf.Tensor, b: tf.Tensor) =>
    tf.sum(tf.mul(tf.matMul(a as tf.Tensor2D, b as tf.Tensor2D), tf.tensor2d(gy, [4, 3]))),
  )([tf.tensor2d(av, [4, 6]), tf.tensor2d(bv, [6, 3])]);
  const wantA = reference(gy, [4, 3], bv, [6, 3], false, true);
  const wantB = reference(av, [4, 6], gy, [4, 3], true, false);
  const maxDiff = (x: Float32Array | Int32Array | Uint8Array, y: Float32Array) =>
    y.reduce((m, v, i) => Math.max(m, Math.abs(v - x[i]!)), 0);
  t.true(maxDiff(da!.dataSync(), wantA) < 1e-5);
  t.true(maxDiff(db!.dataSync(), wantB) < 1e-5);
});

// The two paths are different BLAS calls (x E^T against x (E^T) with E^T copied; dy^T x against
// (x^T dy)^T): OpenBLAS promises neither the same summation order for them nor the same order on every
// CPU kernel (Haswell's and Zen's differ from SkylakeX's in the embedding gradient's last bits). What
// holds everywhere is the rounding bound, so each result is checked against the exact product with it.
test("the tied LM head read transposed in place: logits and both gradients equal the transposed copy's to within float32 rounding", (t) => {
  if (!nativeAddon(t)) return;
  t.true(installNativeMatmul("wasm").native);
  // sizes past OpenBLAS's blocking in every dimension, as a real head is
  for (const [N, h, V] of [
    [37, 64, 300],
    [70, 300, 1030],
  ] as const) {
    const [xv, ev, dyv] = [random(N * h, 11), random(V * h, 12), random(N * V, 13)];
    const x = tf.tensor2d(xv, [N, h]);
    const embedding = tf.variable(tf.tensor2d(ev, [V, h]));
    const dy = tf.tensor2d(dyv, [N, V]);
    const loss = (y: tf.Tensor) => tf.sum(tf.mul(y, dy)) as tf.Scalar;
    const copy = tf.variableGrads(() => loss(linear(x as tf.Tensor2D, tf.transpose(embedding))), [embedding]);
    const inPlace = tf.variableGrads(() => loss(linearTransposed(x as tf.Tensor2D, embedding)), [embedding]);
    const [dxCopy, dxInPlace] = [copy, inPlace].map((_, i) =>
      tf.grad((xx: tf.Tensor) =>
        loss(
          i === 0
            ? linear(xx as tf.Tensor2D, tf.transpose(embedding))
            : linearTransposed(xx as tf.Tensor2D, embedding),
        ),
      )(x),
    );
    const logitsCopy = linear(x as tf.Tensor2D, tf.transpose(embedding));
    const logitsInPlace = linearTransposed(x as tf.Tensor2D, embedding);
    const checks: Array<[string, ReturnType<typeof product64>, tf.Tensor, tf.Tensor]> = [
      [`logits [${N}, ${V}]`, product64(xv, [N, h], ev, [V, h], false, true), logitsInPlace, logitsCopy],
      [
        "embedding gradient",
        product64(dyv, [N, V], xv, [N, h], true, false),
        inPlace.grads[embedding.name]!,
        copy.grads[embedding.name]!,
      ],
      ["hidden-state gradient", product64(dyv, [N, V], ev, [V, h], false, false), dxInPlace!, dxCopy!],
    ];
    for (const [what, exact, a, b] of checks) {
      t.deepEqual(a.shape, b.shape, what);
      const [av, bv] = [a.dataSync(), b.dataSync()];
      const [ra, rb] = [roundingRatio(av, exact), roundingRatio(bv, exact)];
      t.true(ra <= 1, `${what}, in place: ${ra} of the rounding bound`);
      t.true(rb <= 1, `${what}, transposed copy: ${rb} of the rounding bound`);
      let differ = 0;
      for (let i = 0; i < av.length; i++) if (av[i] !== bv[i]) differ++;
      t.log(
        `[${N}, ${h}, ${V}] ${what}: ${differ} of ${av.length} entries differ; worst ${Math.max(ra, rb).toPrecision(2)} of the bound`,
      );
    }
    tf.dispose([x, embedding, dy, copy.value, inPlace.value, dxCopy!, dxInPlace!, logitsCopy, logitsInPlace]);
    tf.dispose(Object.values(copy.grads));
    tf.dispose(Object.values(inPlace.grads));
  }
});

test("batches that neither match nor broadcast from 1 are refused with both shapes", (t) => {
  const err = t.throws(() => matmulShape([2, 3, 4], [3, 4, 5], false, false));
  t.regex(err!.message, /\[2,3,4\] and \[3,4,5\] neither match nor broadcast/);
  const inner = t.throws(() => matmulShape([3, 4], [5, 6], false, false));
  t.regex(inner!.message, /inner sizes 4 and 5/);
});

test("gemm with accumulate adds the product to what c holds, on each of its paths (sgemm, one row, k = 0)", (t) => {
  const load = loadNativeBlas();
  if (!load.ok) {
    if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
    t.pass(`no addon: ${load.reason}`);
    return;
  }
  // a [m, k] times b^T ([n, k] read transposed) and a^T ([k, m] read transposed) times b [k, n]
  for (const [m, n, k] of [
    [3, 4, 5],
    [1, 6, 7],
    [2, 3, 0],
  ] as const) {
    for (const [transposeA, transposeB] of [
      [false, true],
      [true, false],
    ] as const) {
      const a = Float32Array.from({ length: m * k }, (_, i) => Math.sin(i + 1));
      const b = Float32Array.from({ length: k * n }, (_, i) => Math.cos(i * 0.5));
      const product = new Float32Array(m * n);
      load.blas.gemm(a, b, product, 1, m, n, k, transposeA, transposeB, 0, 0, false);
      const held = Float32Array.from({ length: m * n }, (_, i) => i * 0.25 - 1);
      // without the 12th argument c is replaced, as before it existed
      const replaced = held.slice();
      load.blas.gemm(a, b, replaced, 1, m, n, k, transposeA, transposeB, 0, 0);
      t.deepEqual(replaced, product, "the 11-argument form replaces c");
      const noFlag = held.slice();
      load.blas.gemm(a, b, noFlag, 1, m, n, k, transposeA, transposeB, 0, 0, undefined);
      t.deepEqual(noFlag, product, "accumulate undefined: replaced");
      t.throws(
        () =>
          (load.blas.gemm as (...args: unknown[]) => void)(
            a,
            b,
            noFlag,
            1,
            m,
            n,
            k,
            transposeA,
            transposeB,
            0,
            0,
            "yes",
          ),
        { instanceOf: TypeError, message: "gemm: accumulate must be a boolean" },
      );
      const c = held.slice();
      load.blas.gemm(a, b, c, 1, m, n, k, transposeA, transposeB, 0, 0, true);
      const what = `[${m}, ${n}, ${k}] transposeA=${transposeA}`;
      for (let i = 0; i < m * n; i++)
        t.true(Math.abs(c[i]! - (held[i]! + product[i]!)) <= 1e-6 * (1 + Math.abs(c[i]!)), what);
      if (k === 0) t.deepEqual(c, held, `${what}: nothing to add`);
      else t.notDeepEqual(c, product, `${what}: added, not replaced`);
    }
  }
});

test("the addon refuses operands shorter than the sizes say instead of reading past them", (t) => {
  const load = loadNativeBlas();
  if (!load.ok) {
    t.regex(load.reason, /OpenBLAS addon/);
    if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
    return;
  }
  const c = new Float32Array(4);
  const err = t.throws(() =>
    load.blas.gemm(new Float32Array(3), new Float32Array(4), c, 1, 2, 2, 2, false, false, 4, 4, false),
  );
  t.regex(err!.message, /shorter than/);
  t.throws(
    () => load.blas.gemm(new Float32Array(8), new Float32Array(4), c, 2, 2, 2, 2, false, false, 4, 0, false),
    {
      message: /shorter than/,
    },
  );
  // a call with the wrong number of arguments is refused by name, not ignored
  const call = (f: unknown, ...args: unknown[]) => (f as (...a: unknown[]) => unknown)(...args);
  t.throws(() => call(load.blas.setThreads), {
    instanceOf: TypeError,
    message: "setThreads takes 1 arguments",
  });
  t.throws(() => call(load.blas.gemm, c), {
    instanceOf: TypeError,
    message: "gemm takes 11 or 12 arguments",
  });
  t.throws(() => call(load.blas.swiglu, c, c), {
    instanceOf: TypeError,
    message: "swiglu takes 3 arguments",
  });
});

test("TORL_NATIVE_MATMUL=off keeps the wasm kernel and the backend line says so; a bad value is refused", (t) => {
  const run = (value: string) =>
    spawnSync(
      process.execPath,
      [
        "--import=tsx",
        "--input-type=module",
        "-e",
        `import { selectBackend } from "./src/index.ts"; const i = await selectBackend({ backend: "wasm", log: null }); console.log(JSON.stringify({ line: i.line, native: i.nativeMatmul }));`,
      ],
      {
        cwd: join(ROOT, "packages", "verl-ts"),
        env: { ...process.env, TORL_NATIVE_MATMUL: value },
        encoding: "utf8",
      },
    );
  const off = run("off");
  t.is(off.status, 0, off.stderr);
  const info = JSON.parse(off.stdout.trim().split("\n").at(-1)!);
  t.false(info.native);
  t.regex(info.line, /; native kernels off: TORL_NATIVE_MATMUL=off; matmul on wasm XNNPACK$/);
  const bad = run("maybe");
  t.not(bad.status, 0);
  t.regex(bad.stderr, /TORL_NATIVE_MATMUL must be on or off, got 'maybe'/);
});

test("without the addon the backend line says the native kernels are off, why, and the command that gets them", (t) => {
  // a package whose install ran before libopenblas-dev was there: the status its install script wrote
  const root = mkdtempSync(join(tmpdir(), "torl-no-addon-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  writeFileSync(
    join(root, "build-status.json"),
    JSON.stringify({ built: false, reason: "cblas.h not found" }),
  );
  const state = nativeKernelsState({ off: addonMissingReason(root) });
  t.false(state.native);
  t.is(
    state.line,
    `native kernels off: the OpenBLAS addon did not build: cblas.h not found; run node ${join(root, "scripts", "setup-native.mjs")} to install what it needs and build it; matmul on wasm XNNPACK`,
  );
  // in this repository the command is the README's
  t.regex(nativeKernelsState({ off: addonMissingReason() }).line, /run pnpm setup:native/);
});

test("the kernel choice names OPENBLAS_CORETYPE when it forces one", (t) => {
  t.is(
    coreChoice("Haswell", { OPENBLAS_CORETYPE: "Haswell" }),
    "Haswell kernel, forced by OPENBLAS_CORETYPE=Haswell",
  );
  t.is(coreChoice("Cooperlake", {}), "Cooperlake kernel, detected from the CPU");
});
