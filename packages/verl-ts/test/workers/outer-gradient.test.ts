/**
 * The outer units' gradient over a mini-batch's rounds (workers/outer-gradient.ts): the LM head's
 * factors kept and exchanged, or the whole buffer reduce-scattered past the budget. Two ranks run in
 * this process over an in-memory exchange; every rank's piece is checked against the sum computed in
 * float64 from everything the ranks added.
 */
import { shardRange } from "@torl-ts/actors";
import test from "ava";
import { nativeBlas } from "../../src/models/native-blas.js";
import { OuterUnitGradient, type UnitExchange } from "../../src/workers/outer-gradient.js";
import type { FlatUnit, ShardPiece } from "../../src/workers/sharded-parameters.js";

const V = 37; // rows of the head matrix
const H = 5;
const NORM = H;
const ENTRIES = [
  { name: "emb", offset: 0, size: V * H },
  { name: "norm", offset: V * H, size: NORM },
];
const SHAPES = new Map([
  ["emb", [V, H]],
  ["norm", [NORM]],
]);
const UNIT: FlatUnit = { key: "outside the layers", start: 0, end: V * H + NORM, entries: ENTRIES };
const SIZE = UNIT.end;

/** A seeded generator of values in [-1, 1). */
function values(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 31 - 1;
  });
}

/** W ranks' collectives in one process: each call resolves once every rank made it, with all their inputs. */
class Bus {
  private waiting: { inputs: unknown[]; resolve: ((all: unknown[]) => void)[] } | null = null;
  readonly calls: string[] = [];
  constructor(readonly worldSize: number) {}
  exchange<T>(rank: number, op: string, input: T): Promise<T[]> {
    if (rank === 0) this.calls.push(op);
    this.waiting ??= { inputs: [], resolve: [] };
    const w = this.waiting;
    w.inputs[rank] = input;
    return new Promise<T[]>((resolve) => {
      w.resolve.push(resolve as (all: unknown[]) => void);
      if (w.resolve.length === this.worldSize) {
        this.waiting = null;
        for (const r of w.resolve) r(w.inputs);
      }
    });
  }
}

function rankExchange(bus: Bus, rank: number): UnitExchange {
  const range = shardRange(SIZE, bus.worldSize, rank);
  const piece: ShardPiece = { start: range.start, end: range.end, local: 0 };
  const exchange: UnitExchange = {
    units: [UNIT],
    pieces: [piece],
    everyRank: async (mine) => (await bus.exchange(rank, "everyRank", mine)).every((m) => m),
    allGatherConcat: async (v) => {
      const all = await bus.exchange(rank, "allGather", v.slice());
      const out = new Float32Array(all.reduce((n, a) => n + a.length, 0));
      let at = 0;
      for (const a of all) {
        out.set(a, at);
        at += a.length;
      }
      return out;
    },
    reduceScatterUnit: async (_u, unitGrad, shardGrad, overwrite) => {
      const all = await bus.exchange(rank, "reduceScatter", unitGrad.slice());
      for (let i = piece.start; i < piece.end; i++) {
        let sum = 0;
        for (const g of all) sum += g[i]!;
        if (overwrite) shardGrad[i - piece.start] = sum;
        else shardGrad[i - piece.start]! += sum;
      }
    },
  };
  return exchange;
}

/** What one rank adds in a mini-batch: head products, embedding rows, the norm's gradient. */
function rankInputs(rank: number, positions: number[]) {
  return positions.map((n, round) => ({
    left: values(n * V, 100 * rank + round),
    right: values(n * H, 200 * rank + round + 7),
    ids: Int32Array.from({ length: n }, (_, i) => (i * 7 + rank * 3 + round) % V),
    rowsDy: values(n * H, 300 * rank + round + 11),
    norm: values(NORM, 400 * rank + round + 13),
  }));
}

/** The unit's summed gradient in float64 over every rank's inputs. */
function expected(inputs: ReturnType<typeof rankInputs>[]): Float64Array {
  const g = new Float64Array(SIZE);
  for (const rounds of inputs)
    for (const r of rounds) {
      const n = r.ids.length;
      for (let k = 0; k < n; k++)
        for (let i = 0; i < V; i++)
          for (let j = 0; j < H; j++) g[i * H + j]! += r.left[k * V + i]! * r.right[k * H + j]!;
      for (let k = 0; k < n; k++) for (let j = 0; j < H; j++) g[r.ids[k]! * H + j]! += r.rowsDy[k * H + j]!;
      for (let j = 0; j < NORM; j++) g[V * H + j]! += r.norm[j]!;
    }
  return g;
}

/** Runs a mini-batch on every rank (budgets per rank); each rank's shard gradient and whether it went dense. */
async function miniBatch(positions: number[][], budgets: number[]) {
  const bus = new Bus(positions.length);
  const inputs = positions.map((p, rank) => rankInputs(rank, p));
  const results = await Promise.all(
    positions.map(async (_, rank) => {
      const exchange = rankExchange(bus, rank);
      const g = new OuterUnitGradient(exchange, 0, SHAPES, budgets[rank]!);
      g.begin();
      for (const [round, r] of inputs[rank]!.entries()) {
        g.addProduct("emb", r.left, r.right, r.ids.length);
        g.addValues("norm", r.norm, round === 0);
        g.addRows("emb", r.ids, r.rowsDy);
      }
      const dense = g.isDense;
      const piece = exchange.pieces[0]!;
      // whatever the memory held before (the layers' gathers, between updates): written over
      const shardGrad = new Float32Array(piece.end - piece.start).fill(Number.NaN);
      await g.reduceInto(shardGrad);
      return { dense, shardGrad, piece, bytes: g.bytes };
    }),
  );
  return { results, want: expected(inputs), calls: bus.calls };
}

function maxError(results: Awaited<ReturnType<typeof miniBatch>>["results"], want: Float64Array): number {
  let worst = 0;
  for (const r of results)
    for (let i = r.piece.start; i < r.piece.end; i++)
      worst = Math.max(worst, Math.abs(r.shardGrad[i - r.piece.start]! - want[i]!));
  return worst;
}

test("the head's factors kept and exchanged give each rank its piece of the summed gradient, written over what its memory held", async (t) => {
  if (!nativeBlas()) return t.pass("skipped: the OpenBLAS addon (its products) is not loaded here");
  for (const ranks of [1, 2, 3]) {
    const positions = Array.from({ length: ranks }, (_, r) => [3 + r, 2, 4]);
    const { results, want, calls } = await miniBatch(
      positions,
      positions.map(() => 10_000),
    );
    t.true(
      results.every((r) => !r.dense),
      `${ranks} ranks: kept as records`,
    );
    t.deepEqual(calls, ["everyRank", "allGather"], "the factors are gathered, not the matrix");
    t.true(maxError(results, want) < 1e-5, `${ranks} ranks: max error ${maxError(results, want)}`);
    // no rank held the unit's whole buffer
    t.true(results.every((r) => r.bytes < SIZE * 4 + 4 * (1 << 20)));
  }
});

test("past the budget on any rank, every rank sums the whole buffer and reduce-scatters it", async (t) => {
  if (!nativeBlas()) return t.pass("skipped: the OpenBLAS addon (its products) is not loaded here");
  const positions = [
    [3, 2, 4],
    [5, 1, 2],
  ];
  // rank 0 goes past its budget in its second round; rank 1 keeps its records until the exchange
  const mixed = await miniBatch(positions, [3 * (V + H) + 20, 10_000]);
  t.deepEqual(
    mixed.results.map((r) => r.dense),
    [true, false],
  );
  t.deepEqual(mixed.calls, ["everyRank", "reduceScatter"]);
  t.true(maxError(mixed.results, mixed.want) < 1e-5, `max error ${maxError(mixed.results, mixed.want)}`);
  // a budget too small for anything: dense from the first value, the same sums
  const dense = await miniBatch(positions, [0, 0]);
  t.true(dense.results.every((r) => r.dense));
  t.true(maxError(dense.results, dense.want) < 1e-5);
});

test("bad input is refused with the parameter named, and nothing is kept of it", async (t) => {
  if (!nativeBlas()) return t.pass("skipped: the OpenBLAS addon (its products) is not loaded here");
  const bus = new Bus(1);
  const g = new OuterUnitGradient(rankExchange(bus, 0), 0, SHAPES, 10_000);
  g.begin();
  t.throws(() => g.addRows("emb", Int32Array.of(1, V), new Float32Array(2 * H)), {
    instanceOf: RangeError,
    message: /emb: row id 37 outside 0\.\.36/,
  });
  t.throws(() => g.addProduct("emb", new Float32Array(V), new Float32Array(H), 2), {
    instanceOf: RangeError,
    message: /emb: gradient factors of 37 and 5 values for 2 rows/,
  });
  t.throws(() => g.addValues("norm", new Float32Array(3), true), { message: /norm: 3 gradient values/ });
  t.throws(() => g.addValues("lm_head", new Float32Array(3), true), { message: /lm_head is not in unit 0/ });
  // what was refused left nothing behind: the exchange gives zeros
  const shardGrad = new Float32Array(SIZE);
  await g.reduceInto(shardGrad);
  t.true(shardGrad.every((x) => x === 0));
  t.false(g.isDense);
});
