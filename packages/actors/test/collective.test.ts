// Ring collectives between plain child processes (ProcessMember): the transport on its own,
// without the actor runtime. collective-actors.test.ts runs the same operations in real actors.
import test from "ava";
import { benchCollectivesCommand, runCollectiveBench } from "../src/bench/collectives.js";
import {
  CollectiveArgumentError,
  type CollectiveGroup,
  createCollectiveGroupOn,
  destroyCollectiveGroup,
  getCollectiveGroup,
  ProcessMember,
  type ReduceOp,
  registerReduceKernel,
  shardBounds,
  shardRange,
} from "../src/collective/index.js";
import { type DtypeName, makeData, valueAt } from "./collective.fixture.js";

const FIXTURE = new URL("./collective.fixture.ts", import.meta.url).href;

let procs: ProcessMember[] = [];

test.before(async () => {
  procs = await Promise.all([0, 1, 2, 3].map(() => ProcessMember.spawn()));
});

test.after.always(async () => {
  await Promise.all(procs.map((p) => p.close()));
});

let groupSeq = 0;
async function group(
  W: number,
  opts: Parameters<typeof createCollectiveGroupOn>[1] = {},
): Promise<CollectiveGroup> {
  return createCollectiveGroupOn(procs.slice(0, W), { name: `g${++groupSeq}`, ...opts });
}

function onAll<T>(g: CollectiveGroup, fn: string, args: (rank: number) => unknown[]): Promise<T[]> {
  return Promise.all(
    procs.slice(0, g.worldSize).map((p, rank) => p.invoke(FIXTURE, fn, args(rank))),
  ) as Promise<T[]>;
}

const isFloat = (d: DtypeName) => d.startsWith("Float");

/** A value as the array type stores it (Float32 rounding). */
function stored(dtype: DtypeName, v: number): number {
  return dtype === "Float32Array" ? Math.fround(v) : v;
}

/** The reduction computed here in float64 / exact integers, then stored in the array type. */
function expectedReduce(dtype: DtypeName, n: number, W: number, op: ReduceOp): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const vals = Array.from({ length: W }, (_, r) => stored(dtype, valueAt(dtype, r, i)));
    let v: number;
    if (op === "sum" || op === "mean") v = vals.reduce((s, x) => s + x, 0);
    else if (op === "max") v = Math.max(...vals);
    else if (op === "min") v = Math.min(...vals);
    else v = vals.reduce((s, x) => s * x, 1);
    if (op === "mean") v = isFloat(dtype) ? v / W : Math.trunc(v / W);
    out.push(v);
  }
  // Store through the array type so integer wrap-around matches.
  const C = makeData(dtype, 0, 0).constructor as new (a: number[]) => ArrayLike<number>;
  return Array.from(new C(out));
}

function assertClose(
  t: import("ava").ExecutionContext,
  got: ArrayLike<number>,
  want: number[],
  dtype: DtypeName,
  what: string,
) {
  t.is(got.length, want.length, `${what}: length`);
  const tol = dtype === "Float32Array" ? 1e-5 : 1e-12;
  for (let i = 0; i < want.length; i++) {
    const ok = isFloat(dtype)
      ? Math.abs(got[i]! - want[i]!) <= tol * Math.max(1, Math.abs(want[i]!))
      : got[i] === want[i];
    if (!ok) {
      t.fail(`${what}: element ${i} is ${got[i]}, expected ${want[i]}`);
      return;
    }
  }
  t.pass();
}

test("shardRange gives the first length % worldSize ranks one extra element", (t) => {
  t.deepEqual(shardBounds(10, 4), [0, 3, 6, 8, 10]);
  t.deepEqual(shardRange(10, 4, 1), { start: 3, end: 6 });
  t.deepEqual(shardRange(10, 4, 3), { start: 8, end: 10 });
  t.deepEqual(shardBounds(2, 4), [0, 1, 2, 2, 2]);
  t.deepEqual(shardBounds(0, 3), [0, 0, 0, 0]);
  for (let n = 0; n < 40; n++) {
    for (let W = 1; W <= 5; W++) {
      const b = shardBounds(n, W);
      t.is(b[W], n);
      for (let r = 0; r < W; r++) {
        const sz = b[r + 1]! - b[r]!;
        t.true(sz === Math.floor(n / W) || sz === Math.ceil(n / W));
        t.deepEqual(shardRange(n, W, r), { start: b[r]!, end: b[r + 1]! });
      }
    }
  }
  t.throws(() => shardRange(10, 4, 4), { instanceOf: RangeError });
  t.throws(() => shardBounds(-1, 2), { instanceOf: RangeError });
  t.throws(() => shardBounds(4, 0), { instanceOf: RangeError });
});

for (const W of [1, 2, 3, 4]) {
  test.serial(`allReduce sum/mean/max on float and int arrays, world size ${W}, odd lengths`, async (t) => {
    // Small slices (40 bytes) so every chunk crosses the ring as many messages.
    const g = await group(W, { sliceBytes: 40 });
    try {
      for (const dtype of ["Float32Array", "Float64Array", "Int32Array"] as DtypeName[]) {
        for (const op of ["sum", "mean", "max"] as ReduceOp[]) {
          for (const n of [W === 1 ? 0 : W - 1, 1001]) {
            const res = await onAll<{ sameObject: boolean; result: ArrayLike<number> }>(
              g,
              "doAllReduce",
              () => [g.name, dtype, n, op],
            );
            const want = expectedReduce(dtype, n, W, op);
            for (let r = 0; r < W; r++) {
              t.true(res[r]!.sameObject, "allReduce works in place");
              t.is(res[r]!.result.constructor.name, dtype);
              assertClose(t, res[r]!.result, want, dtype, `${dtype} ${op} n=${n} rank ${r}`);
              // Every rank holds bit-identical results (each element is reduced once, by its owner).
              t.deepEqual(res[r]!.result, res[0]!.result);
            }
          }
        }
      }
    } finally {
      await g.destroy();
    }
  });
}

test.serial("allReduce min/prod and small integer types are exact, including wrap-around", async (t) => {
  const W = 3;
  const g = await group(W);
  try {
    for (const [dtype, op] of [
      ["Int16Array", "sum"],
      ["Uint8Array", "sum"],
      ["Uint32Array", "sum"],
      ["Int32Array", "min"],
      ["Int32Array", "prod"],
      ["Uint32Array", "prod"],
      ["Float64Array", "min"],
    ] as [DtypeName, ReduceOp][]) {
      const n = 257;
      const res = await onAll<{ result: ArrayLike<number> }>(g, "doAllReduce", () => [g.name, dtype, n, op]);
      // Integer products are compared modulo 2^32 through the array type (exact, no float rounding).
      const want =
        op === "prod" && dtype !== "Float64Array"
          ? Array.from(
              new (dtype === "Int32Array" ? Int32Array : Uint32Array)(
                Array.from({ length: n }, (_, i) =>
                  Number(
                    BigInt.asUintN(
                      32,
                      [0, 1, 2].reduce((p, r) => p * BigInt(valueAt(dtype, r, i)), 1n),
                    ),
                  ),
                ),
              ),
            )
          : expectedReduce(dtype, n, W, op);
      for (let r = 0; r < W; r++) assertClose(t, res[r]!.result, want, dtype, `${dtype} ${op} rank ${r}`);
    }
  } finally {
    await g.destroy();
  }
});

for (const W of [1, 2, 3, 4]) {
  test.serial(`broadcast from every source rank, world size ${W}`, async (t) => {
    const g = await group(W, { sliceBytes: 64 });
    try {
      for (let src = 0; src < W; src++) {
        for (const dtype of ["Float32Array", "Int32Array"] as DtypeName[]) {
          const n = 333;
          const res = await onAll<ArrayLike<number>>(g, "doBroadcast", () => [g.name, dtype, n, src]);
          const want = Array.from(makeData(dtype, n, src));
          for (let r = 0; r < W; r++) t.deepEqual(Array.from(res[r]!), want, `src ${src} rank ${r} ${dtype}`);
        }
      }
    } finally {
      await g.destroy();
    }
  });
}

for (const [W, sharedMemory] of [1, 2, 3, 4].flatMap((w) => [[w, true] as const, [w, false] as const])) {
  const through = sharedMemory ? "shared memory where it can" : "the ring";
  test.serial(
    `allGather of unequal lengths and into a preallocated array, world size ${W}, ${through}`,
    async (t) => {
      const g = await group(W, { sliceBytes: 48, sharedMemory });
      try {
        // one host: every member opens the others' files, unless the group is told not to
        for (const s of await onAll<{ shared: boolean; leftNamed: number }>(g, "sharedState", () => [g.name]))
          t.deepEqual(s, { shared: sharedMemory && W > 1, leftNamed: 0 });
        for (const dtype of ["Float64Array", "Int32Array", "Float32Array"] as DtypeName[]) {
          // Free lengths (zero included) without `out`.
          const lengths = [5, 0, 17, 101].slice(0, W);
          const res = await onAll<ArrayLike<number>>(g, "doAllGather", () => [g.name, dtype, lengths, false]);
          const want = lengths.flatMap((len, r) => Array.from(makeData(dtype, len, r)));
          for (let r = 0; r < W; r++) t.deepEqual(Array.from(res[r]!), want, `${dtype} rank ${r}`);
          // Shard lengths of a 1003-element array, written into `out`.
          const b = shardBounds(1003, W);
          const shardLens = Array.from({ length: W }, (_, r) => b[r + 1]! - b[r]!);
          const res2 = await onAll<ArrayLike<number>>(g, "doAllGather", () => [
            g.name,
            dtype,
            shardLens,
            true,
          ]);
          const want2 = shardLens.flatMap((len, r) => Array.from(makeData(dtype, len, r)));
          for (let r = 0; r < W; r++) t.deepEqual(Array.from(res2[r]!), want2, `${dtype} out rank ${r}`);
        }
      } finally {
        await g.destroy();
      }
    },
  );
}

for (const W of [1, 2, 3, 4]) {
  test.serial(
    `reduceScatter returns each rank its shardRange of the reduction, world size ${W}`,
    async (t) => {
      const g = await group(W, { sliceBytes: 40 });
      try {
        for (const dtype of ["Float32Array", "Float64Array", "Int32Array"] as DtypeName[]) {
          for (const op of ["sum", "mean", "max"] as ReduceOp[]) {
            for (const n of [2, 1001]) {
              const res = await onAll<{ shard: ArrayLike<number>; range: { start: number; end: number } }>(
                g,
                "doReduceScatter",
                () => [g.name, dtype, n, op],
              );
              const want = expectedReduce(dtype, n, W, op);
              for (let r = 0; r < W; r++) {
                const range = shardRange(n, W, r);
                t.deepEqual(res[r]!.range, range);
                assertClose(
                  t,
                  res[r]!.shard,
                  want.slice(range.start, range.end),
                  dtype,
                  `${dtype} ${op} n=${n} rank ${r}`,
                );
              }
            }
          }
        }
      } finally {
        await g.destroy();
      }
    },
  );
}

test.serial(
  "reduceScatter then allGather into a reused buffer equals the full sum (FSDP pattern)",
  async (t) => {
    for (const W of [2, 3]) {
      const g = await group(W, { sliceBytes: 1024 });
      try {
        const n = 5003;
        const rounds = 3;
        const res = await onAll<Float64Array>(g, "doReduceScatterAllGather", () => [g.name, n, rounds]);
        // Last round's gradients come from makeData(rank + rounds - 1).
        const want = Array.from({ length: n }, (_, i) => {
          let s = 0;
          for (let r = 0; r < W; r++) s += valueAt("Float64Array", r + rounds - 1, i);
          return s;
        });
        for (let r = 0; r < W; r++) assertClose(t, res[r]!, want, "Float64Array", `W=${W} rank ${r}`);
      } finally {
        await g.destroy();
      }
    }
  },
);

test.serial("inputs overwritten right after each call never leak into other ranks' results", async (t) => {
  for (const W of [2, 3, 4]) {
    const g = await group(W, { sliceBytes: 4096 });
    try {
      t.deepEqual(
        await onAll<number>(g, "doMutatingLoop", () => [g.name, 20_011, 30]),
        Array(W).fill(0),
        `W=${W}`,
      );
    } finally {
      await g.destroy();
    }
  }
});

test.serial(
  "allGather with inputUnchanged sends the caller's own array: right results while the caller keeps its promise",
  async (t) => {
    for (const W of [2, 3]) {
      // the ring's path (through shared memory every piece is written into a file: nothing to keep)
      const g = await group(W, { sliceBytes: 4096, sharedMemory: false });
      try {
        t.deepEqual(
          await onAll<number>(g, "doInputUnchangedLoop", () => [g.name, 20_011, 30]),
          Array(W).fill(0),
          `W=${W}`,
        );
        t.deepEqual(
          await onAll<string>(g, "doInputUnchangedLoop", () => [g.name, 8, 1, true]),
          Array(W).fill("TypeError"),
          "a non-boolean option is refused on every rank before anything is sent",
        );
      } finally {
        await g.destroy();
      }
    }
  },
);

test.serial(
  "allGather in place (each rank's input its own part of out) is right on both paths; another overlap is refused",
  async (t) => {
    for (const sharedMemory of [true, false])
      for (const W of [2, 3]) {
        const g = await group(W, { sliceBytes: 4096, sharedMemory });
        try {
          const res = await onAll<{ wrong: number; overlap: string }>(g, "doInPlaceGather", () => [
            g.name,
            10_007,
            4,
          ]);
          t.is(res[0]!.overlap, "CollectiveArgumentError", `W=${W} shared=${sharedMemory}`);
          t.deepEqual(
            res.map((r) => r.wrong),
            Array(W).fill(0),
            `W=${W} shared=${sharedMemory}`,
          );
        } finally {
          await g.destroy();
        }
      }
  },
);

test.serial(
  "reduceScatter in place (out: the input's own part) gives the bits of a separate out on both paths; another overlap is refused",
  async (t) => {
    for (const sharedMemory of [true, false])
      for (const W of [2, 3])
        for (const [dtype, op] of [
          ["Float32Array", "sum"],
          ["Float64Array", "max"],
        ] as const) {
          const g = await group(W, { sliceBytes: 4096, sharedMemory });
          const what = `W=${W} shared=${sharedMemory} ${dtype} ${op}`;
          try {
            // over a MiB a part: through shared memory the others' values come in several pieces
            const res = await onAll<{
              shard: ArrayLike<number>;
              inPlace: ArrayLike<number>;
              sameObject: boolean;
              othersChanged: number;
              overlap: string;
            }>(g, "doInPlaceReduceScatter", () => [g.name, dtype, 700_001, op]);
            t.is(res[0]!.overlap, "CollectiveArgumentError", what);
            for (const r of res) {
              t.true(r.sameObject, what);
              t.is(r.othersChanged, 0, what);
              t.deepEqual(Array.from(r.inPlace), Array.from(r.shard), what);
            }
          } finally {
            await g.destroy();
          }
        }
  },
);

test.serial(
  "reduceScatter through shared memory gives the ring's bits (the same order of additions)",
  async (t) => {
    for (const W of [2, 3, 4]) {
      const results: ArrayLike<number>[][] = [];
      for (const sharedMemory of [true, false]) {
        const g = await group(W, { sliceBytes: 64, sharedMemory });
        try {
          for (const s of await onAll<{ shared: boolean }>(g, "sharedState", () => [g.name]))
            t.is(s.shared, sharedMemory);
          const res = await onAll<{ shard: ArrayLike<number> }>(g, "doReduceScatter", () => [
            g.name,
            "Float32Array",
            1001,
            "sum",
          ]);
          results.push(res.map((x) => Array.from(x.shard)));
        } finally {
          await g.destroy();
        }
      }
      t.deepEqual(results[0], results[1], `W=${W}`);
    }
  },
);

test.serial(
  "a rank that cannot write its shared-memory part fails, and the others fail at once, naming it",
  async (t) => {
    for (const W of [2, 3]) {
      // far beyond the test's own time: a rank left waiting for the timeout would hang the test
      const g = await group(W, { timeoutMs: 600_000 });
      try {
        const started = Date.now();
        const res = await onAll<{ name: string; message: string }>(g, "doSharedWriteFailure", () => [
          g.name,
          0,
        ]);
        t.true(Date.now() - started < 30_000, `W=${W}: settled in ${Date.now() - started} ms`);
        t.is(res[0]!.name, "CollectiveError");
        t.regex(
          res[0]!.message,
          /rank 0 could not write its piece to shared memory in allGather #\d+ .*ENOSPC.*sharedMemory: false/,
        );
        for (const other of res.slice(1)) {
          t.is(other.name, "CollectiveGroupBrokenError", other.message);
          t.regex(other.message, /rank 0 failed: rank 0 could not write its piece to shared memory/);
        }
      } finally {
        await g.destroy();
      }
    }
  },
);

test.serial(
  "publish: every rank reads every rank's array at any time, its own included; bad reads are refused; without shared memory, or where one rank cannot write, every rank rejects alike and the group still works",
  async (t) => {
    for (const W of [2, 3]) {
      const g = await group(W, { sliceBytes: 4096 });
      try {
        const res = await onAll<{ wrong: number; refused: string[] }>(g, "doPublish", () => [g.name, 10_007]);
        for (const [rank, r] of res.entries()) {
          t.is(r.wrong, 0, `W=${W} rank ${rank}`);
          // past the end, another type, a rank outside the group, after close
          t.deepEqual(r.refused, Array(4).fill("CollectiveArgumentError"), `W=${W} rank ${rank}`);
        }
        const failed = await onAll<{ wrong: number; refused: string[] }>(g, "doPublish", () => [
          g.name,
          100,
          1,
        ]);
        for (const [rank, r] of failed.entries()) {
          t.is(r.wrong, 0, `the group still gathers (W=${W} rank ${rank})`);
          t.is(r.refused.length, 1);
          t.regex(
            r.refused[0]!,
            rank === 1
              ? /^CollectiveError: publish: rank 1 of group "\S+" could not write its array to \/dev\/shm \(ENOSPC/
              : /^CollectiveError: publish: rank 1 of group "\S+" could not write its array to \/dev\/shm; nothing was published/,
          );
        }
      } finally {
        await g.destroy();
      }
    }
    const ring = await group(2, { sharedMemory: false });
    try {
      const res = await onAll<{ wrong: number; refused: string[] }>(ring, "doPublish", () => [ring.name, 64]);
      for (const r of res) {
        t.is(r.wrong, 0);
        t.regex(r.refused[0]!, /^CollectiveArgumentError: publish: group "\S+" does not use shared memory/);
      }
    } finally {
      await ring.destroy();
    }
  },
);

test.serial(
  "over TCP the group gathers around the ring; sharedMemory true with TCP, or not a boolean, is refused",
  async (t) => {
    await t.throwsAsync(group(2, { transport: "tcp", sharedMemory: true }), {
      instanceOf: CollectiveArgumentError,
      message: /sharedMemory: true needs members that may share a host/,
    });
    await t.throwsAsync(group(2, { sharedMemory: "no" as never }), {
      instanceOf: CollectiveArgumentError,
      message: /sharedMemory must be true or false, got "no"/,
    });
    const g = await group(2, { transport: "tcp" });
    try {
      for (const s of await onAll<{ shared: boolean }>(g, "sharedState", () => [g.name])) t.false(s.shared);
      const lengths = [3, 5];
      const res = await onAll<ArrayLike<number>>(g, "doAllGather", () => [
        g.name,
        "Float32Array",
        lengths,
        false,
      ]);
      const want = lengths.flatMap((len, r) => Array.from(makeData("Float32Array", len, r)));
      for (const r of [0, 1]) t.deepEqual(Array.from(res[r]!), want);
    } finally {
      await g.destroy();
    }
  },
);

test.serial(
  "collectives issued without awaiting run in call order; barrier returns on all ranks",
  async (t) => {
    const W = 4;
    const g = await group(W, { transport: "tcp" });
    try {
      const res = await onAll<{ ra: Int32Array; rb: Float64Array; rc: Int32Array }>(g, "doPipelined", () => [
        g.name,
        99,
      ]);
      const wantMax = expectedReduce("Int32Array", 99, W, "max");
      const wantSum = expectedReduce("Float64Array", 99, W, "sum");
      for (let r = 0; r < W; r++) {
        t.deepEqual(Array.from(res[r]!.ra), wantMax);
        assertClose(t, res[r]!.rb, wantSum, "Float64Array", `rank ${r}`);
        t.deepEqual(Array.from(res[r]!.rc), [0, 1, 2, 3]);
      }
      t.deepEqual(await onAll<number>(g, "doBarrierSequence", () => [g.name, 5]), [4, 4, 4, 4]);
    } finally {
      await g.destroy();
    }
  },
);

test.serial("tcp and ipc transports give the same results", async (t) => {
  const out: Record<string, unknown> = {};
  for (const transport of ["tcp", "ipc"] as const) {
    const g = await group(3, { transport });
    try {
      out[transport] = await onAll(g, "doAllReduce", () => [g.name, "Float32Array", 4099, "sum"]);
    } finally {
      await g.destroy();
    }
  }
  t.deepEqual(out.tcp, out.ipc);
});

test.serial(
  "mismatched calls fail with CollectiveMismatchError and break the group until recreated",
  async (t) => {
    const g = await group(2, { timeoutMs: 5000 });
    const names = await onAll<string>(g, "doMismatch", () => [g.name]);
    t.true(names.includes("CollectiveMismatchError"), `errors: ${names.join(", ")}`);
    // A rank that saw the error refuses further calls on the broken group.
    const broken = names.indexOf("CollectiveMismatchError");
    const err = await t.throwsAsync(procs[broken]!.invoke(FIXTURE, "doCall", ["barrier", g.name]));
    t.regex(err!.message, /CollectiveGroupBrokenError/);
    await g.destroy();
    // Recreated under the same name, it works again.
    const g2 = await createCollectiveGroupOn(procs.slice(0, 2), { name: g.name });
    t.deepEqual(await onAll<number>(g2, "doBarrierSequence", () => [g2.name, 1]), [2, 2]);
    t.true(await destroyCollectiveGroup(g2.name));
    t.false(await destroyCollectiveGroup(g2.name));
  },
);

test.serial("a rank whose peer never arrives fails with CollectiveTimeoutError", async (t) => {
  const g = await group(3, { timeoutMs: 300 });
  try {
    // Only rank 0 enters the barrier.
    const err = await t.throwsAsync(procs[0]!.invoke(FIXTURE, "doCall", ["barrier", g.name]));
    t.regex(err!.message, /CollectiveTimeoutError: rank 0 waited 300 ms in barrier/);
  } finally {
    await g.destroy();
  }
});

test.serial(
  "destroying the group releases ranks blocked on a member that never calls (as when one died)",
  async (t) => {
    // A long timeout: only the destroy can end the wait.
    const g = await group(3, { timeoutMs: 10 * 60_000 });
    // Ranks 0 and 1 enter a barrier; rank 2 never does.
    const outcomes = [0, 1].map((r) => procs[r]!.invoke(FIXTURE, "barrierOutcome", [g.name]));
    for (const r of [0, 1])
      while (!(await procs[r]!.invoke(FIXTURE, "hasEnteredBarrier", [g.name])))
        await new Promise((resolve) => setTimeout(resolve, 20));
    await g.destroy();
    for (const outcome of (await Promise.all(outcomes)) as string[])
      t.regex(
        outcome,
        /^CollectiveGroupDestroyedError: group "g\d+" was destroyed while rank \d waited in barrier/,
      );
  },
);

test.serial("bad arguments are refused with a clear error and do not break the group", async (t) => {
  const g = await group(2);
  try {
    const p0 = procs[0]!;
    const cases: [string, unknown[], RegExp][] = [
      ["allReduce", [[1, 2, 3], "sum"], /CollectiveArgumentError: allReduce needs a Float32Array.*got Array/],
      ["allReduce", [new BigInt64Array(2), "sum"], /got BigInt64Array/],
      ["allReduce", [new Float32Array(2), "avg"], /unknown reduce op "avg"/],
      ["broadcast", [new Float32Array(2), 2], /source rank must be in \[0, 2\), got 2/],
      [
        "reduceScatter",
        [new Float32Array(5), "sum", "$group", new Float32Array(2)],
        /out must be a Float32Array of 3 elements/,
      ],
    ];
    for (const [op, args, re] of cases) {
      const err = await t.throwsAsync(p0.invoke(FIXTURE, "doCall", [op, g.name, ...args]));
      t.regex(err!.message, re);
    }
    const nf = await t.throwsAsync(p0.invoke(FIXTURE, "doCall", ["barrier", "no-such-group"]));
    t.regex(nf!.message, /CollectiveGroupNotFoundError: .* not a member of collective group "no-such-group"/);
    t.deepEqual(await onAll<number>(g, "doBarrierSequence", () => [g.name, 2]), [2, 2]);
    await t.throwsAsync(createCollectiveGroupOn(procs.slice(0, 2), { name: g.name }), {
      message: /already exists in this driver/,
    });
    t.is(getCollectiveGroup(g.name), g);
  } finally {
    await g.destroy();
  }
});

test.serial(
  "a registered float32 sum kernel does the ring's additions, with the same results; it is refused for other ops and types",
  async (t) => {
    const g = await group(2);
    try {
      const n = 10_001;
      const res = await onAll<{ calls: number; values: number; shard: Float32Array; all: Float32Array }>(
        g,
        "doRegisteredKernel",
        () => [g.name, n],
      );
      const want = expectedReduce("Float32Array", n, 2, "sum");
      for (const [r, x] of res.entries()) {
        // each rank adds the half it receives in the reduce-scatter, and again in the all-reduce
        const range = shardRange(n, 2, r);
        t.true(x.calls >= 2, `rank ${r}: the kernel ran (${x.calls} calls)`);
        t.is(x.values, 2 * (range.end - range.start), `rank ${r}: every received value of its chunk`);
        t.deepEqual(Array.from(x.shard), want.slice(range.start, range.end), `rank ${r} reduce-scatter`);
        t.deepEqual(Array.from(x.all), want, `rank ${r} all-reduce`);
      }
    } finally {
      await g.destroy();
    }
    const add = () => {};
    t.throws(() => registerReduceKernel("max", Float32Array, add), {
      instanceOf: CollectiveArgumentError,
      message: /op must be "sum" or "mean", got "max"/,
    });
    t.throws(() => registerReduceKernel("sum", Int32Array as never, add), {
      instanceOf: CollectiveArgumentError,
      message: /Float32Array or Float64Array, got Int32Array/,
    });
    t.throws(() => registerReduceKernel("sum", Float32Array, 3 as never), {
      instanceOf: CollectiveArgumentError,
      message: /kernel must be a function, got number/,
    });
  },
);

test.serial("the collective benchmark reports every figure next to its baselines", async (t) => {
  const lines: string[] = [];
  const res = await runCollectiveBench({
    // 0.2501 MiB is no whole number of float32 elements: the benchmark rounds to one
    mib: 0.2501,
    worldSizes: [2],
    iters: 3,
    progress: (l) => lines.push(l),
  });
  for (const key of [
    "memcpy_gbps",
    "zmq_oneway_gbps",
    "allreduce_w2_gbps",
    "reducescatter_w2_gbps",
    "allgather_w2_gbps",
    "broadcast_w2_gbps",
    "barrier_w2_us",
    "allreduce_w2_vs_zmq_oneway",
  ]) {
    t.true(typeof res[key] === "number" && (res[key] as number) > 0, `${key} = ${res[key]}`);
  }
  t.true(lines.some((l) => l.includes("W=2 allReduce")));
  await t.throwsAsync(benchCollectivesCommand.run(["--world-sizes", "0"]), { name: "UsageError" });
  await t.throwsAsync(benchCollectivesCommand.run(["--bogus"]), { message: /unknown flag --bogus/ });
  // slices past the largest frame a member accepts: refused before any process starts (the receiving
  // socket would drop them, and the one-way floor wait for them forever)
  await t.throwsAsync(benchCollectivesCommand.run(["--slice-bytes", String(4 << 20)]), {
    name: "UsageError",
  });
  await t.throwsAsync(runCollectiveBench({ sliceBytes: 4 << 20 }), {
    instanceOf: RangeError,
    message: /sliceBytes must be an integer from 8 to 1048576/,
  });
});
