/**
 * The addon's elementwise passes against the same loops in JavaScript, bit for bit, and the collectives'
 * float32 sums done by the addon's loop once useNativeReductions has run (in a 2-rank group of plain
 * child processes, as the workers' reduce-scatters run them).
 */
import { createCollectiveGroupOn, ProcessMember, shardRange } from "@torl-ts/actors";
import { sumSquaresInOrder } from "@torl-ts/blas";
import test from "ava";
import { nativeBlas } from "../../src/models/native-blas.js";
import { addInto, sumSquares } from "../../src/workers/vector-ops.js";

const FIXTURE = new URL("./fixtures/native-reductions.ts", import.meta.url).href;

/** Float32 values with every awkward case a sum can meet: signed zeros, subnormals, infinities, NaN, huge. */
function awkward(n: number, seed: number): Float32Array {
  const special = [
    0,
    -0,
    1e-45,
    -1e-45,
    1.1754942e-38,
    Infinity,
    -Infinity,
    Number.NaN,
    3.4028235e38,
    -3.4028235e38,
  ];
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] =
      i % 17 === 0 ? special[(s >>> 8) % special.length]! : ((s / 2 ** 32) * 2 - 1) * 2 ** ((s % 60) - 30);
  }
  return a;
}

/** The values' bit patterns (NaN compares equal to itself, -0 differs from 0). */
const bits = (a: Float32Array) =>
  Array.from(new Uint32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength)));

test("addInto and sumSquares give the bits of their documented order (the addon's where it loads)", (t) => {
  t.log(
    nativeBlas() ? "the addon is loaded: its passes are checked" : "no addon: the JavaScript passes only",
  );
  for (const n of [5, 4096, 10_007]) {
    const x = awkward(n, 1);
    const y = awkward(n, 2);
    const want = Float32Array.from(y);
    for (let i = 0; i < n; i++) want[i]! += x[i]!;
    addInto(x, y);
    t.deepEqual(bits(y), bits(want), `addInto n=${n}`);
    const finite = awkward(n, 3).map((v) => (Number.isFinite(v) && Math.abs(v) < 1e30 ? v : 0.5));
    t.is(sumSquares(finite), sumSquaresInOrder(finite), `sumSquares n=${n}`);
  }
});

test("after useNativeReductions the collectives' float32 sums run in the addon, with the ring's own bits", async (t) => {
  const procs = await Promise.all([0, 1].map(() => ProcessMember.spawn()));
  try {
    const g = await createCollectiveGroupOn(procs, { name: "native-reductions" });
    try {
      const n = 50_001;
      const run = (native: boolean) =>
        Promise.all(procs.map((p) => p.invoke(FIXTURE, "sumBoth", [g.name, n, native]))) as Promise<
          { registered: boolean; shard: Float32Array; all: Float32Array }[]
        >;
      const plain = await run(false);
      const native = await run(true);
      for (let r = 0; r < 2; r++) {
        t.false(plain[r]!.registered);
        t.is(native[r]!.registered, nativeBlas() !== undefined, "registered where the addon loads");
        t.deepEqual(bits(native[r]!.shard), bits(plain[r]!.shard));
        t.deepEqual(bits(native[r]!.all), bits(plain[r]!.all));
        t.is(native[r]!.shard.length, shardRange(n, 2, r).end - shardRange(n, 2, r).start);
      }
    } finally {
      await g.destroy();
    }
  } finally {
    await Promise.all(procs.map((p) => p.close()));
  }
});
