// Ranks that disagree (another collective, another type or length, another broadcast source) all
// fail promptly with CollectiveMismatchError: the rank that finds the mismatch tells the rest of the
// ring, so none waits for the group's timeout.
import test from "ava";
import { createCollectiveGroupOn, ProcessMember } from "../src/collective/index.js";
import type { CallSpec } from "./collective.fixture.js";

const FIXTURE = new URL("./collective.fixture.ts", import.meta.url).href;
/** Far beyond the test's own bound: a rank that is not told waits this long. */
const GROUP_TIMEOUT_MS = 600_000;
/** Generous on a loaded machine; a rank left waiting for the group timeout fails here. */
const SETTLE_MS = 60_000;

let procs: ProcessMember[] = [];
test.before(async () => {
  procs = await Promise.all([0, 1, 2].map(() => ProcessMember.spawn()));
});
test.after.always(async () => {
  await Promise.all(procs.map((p) => p.close()));
});

const OPS: CallSpec[] = [
  { op: "allReduce" },
  { op: "broadcast", src: 0 },
  { op: "broadcast", src: 1 },
  { op: "allGather" },
  { op: "reduceScatter" },
  { op: "barrier" },
];

/** Pairs of calls that must not meet: every two different ops, and same op with other type/length. */
const PAIRS: Array<[CallSpec, CallSpec]> = [];
for (const a of OPS) for (const b of OPS) if (a !== b) PAIRS.push([a, b]);
PAIRS.push(
  [
    { op: "allReduce", n: 8 },
    { op: "allReduce", n: 16 },
  ],
  [{ op: "allReduce" }, { op: "allReduce", dtype: "Float64Array" }],
  [
    { op: "broadcast", n: 8 },
    { op: "broadcast", n: 3 },
  ],
  [
    { op: "reduceScatter", n: 8 },
    { op: "reduceScatter", n: 12 },
  ],
  [{ op: "allGather" }, { op: "allGather", dtype: "Int32Array" }],
);

let seq = 0;
async function runOn(specs: CallSpec[]): Promise<string[]> {
  const members = procs.slice(0, specs.length);
  const g = await createCollectiveGroupOn(members, { name: `mm${++seq}`, timeoutMs: GROUP_TIMEOUT_MS });
  let timer: NodeJS.Timeout | undefined;
  try {
    const calls = Promise.all(
      members.map((p, rank) => p.invoke(FIXTURE, "doSpec", [g.name, specs[rank]])),
    ) as Promise<string[]>;
    const late = new Promise<string[]>((resolve) => {
      timer = setTimeout(() => resolve(specs.map(() => "a rank was still waiting")), SETTLE_MS);
    });
    return await Promise.race([calls, late]);
  } finally {
    clearTimeout(timer);
    await g.destroy(); // releases a rank still waiting
  }
}

const label = (s: CallSpec) =>
  `${s.op}(${s.dtype ?? "Float32Array"}[${s.n ?? 8}]${s.src !== undefined ? `, src ${s.src}` : ""})`;

test.serial("in a 2-rank group every pair of disagreeing calls fails on both ranks", async (t) => {
  for (const [a, b] of PAIRS) {
    const got = await runOn([a, b]);
    for (const [rank, r] of got.entries())
      t.regex(r, /^CollectiveMismatchError/, `${label(a)} vs ${label(b)}, rank ${rank}: ${r}`);
  }
});

test.serial("in a 3-rank group one disagreeing rank fails every rank", async (t) => {
  for (const odd of [0, 1, 2]) {
    const specs: CallSpec[] = [0, 1, 2].map((r) =>
      r === odd ? { op: "broadcast", src: 0 } : { op: "allReduce" },
    );
    const got = await runOn(specs);
    for (const [rank, r] of got.entries())
      t.regex(r, /^CollectiveMismatchError/, `rank ${odd} differs, rank ${rank}: ${r}`);
  }
});
