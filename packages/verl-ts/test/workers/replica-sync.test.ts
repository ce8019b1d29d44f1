// allReduceGradients / broadcastParameters between two replica processes over a collective group.
import { createCollectiveGroupOn, ProcessMember } from "@torl-ts/actors";
import test from "ava";
import { tinyModelDir } from "./helpers.js";

const FIXTURE = new URL("./fixtures/replica-sync-member.ts", import.meta.url).href;
let members: ProcessMember[] = [];
let modelDir = "";

test.before(async () => {
  members = await Promise.all([0, 1].map(() => ProcessMember.spawn()));
  modelDir = tinyModelDir(3);
});
test.after.always(async () => {
  await Promise.all(members.map((m) => m.close()));
});

interface Reduced {
  local: Float32Array;
  reduced: Float32Array;
  norm: number;
  shapesKept: boolean;
  inputsDisposed: boolean;
}

const ROWS = [
  [
    [104, 101, 108, 108, 111],
    [119, 111, 114],
  ],
  [
    [49, 50, 51, 52],
    [97, 98],
  ],
];

for (const op of ["mean", "sum"] as const) {
  test.serial(
    `allReduceGradients ${op}: every replica gets the ${op} of both replicas' gradients`,
    async (t) => {
      const group = await createCollectiveGroupOn(members, { name: `grads-${op}` });
      try {
        const [a, b] = (await Promise.all(
          members.map((m, rank) =>
            m.invoke(FIXTURE, "reduceGradients", [modelDir, ROWS[rank], group.name, op]),
          ),
        )) as [Reduced, Reduced];
        t.notDeepEqual(Array.from(a.local), Array.from(b.local), "the replicas' own gradients differ");
        t.deepEqual(Array.from(a.reduced), Array.from(b.reduced), "identical on both replicas, bit for bit");
        const scale = op === "mean" ? 0.5 : 1;
        let worst = 0;
        let squares = 0;
        for (let i = 0; i < a.local.length; i++) {
          const want = (a.local[i]! + b.local[i]!) * scale;
          worst = Math.max(worst, Math.abs(a.reduced[i]! - want));
          squares += a.reduced[i]! ** 2;
        }
        t.true(worst < 1e-6, `largest difference from the ${op}: ${worst}`);
        t.true(
          Math.abs(a.norm - Math.sqrt(squares)) < 1e-3 * Math.sqrt(squares),
          "norm of the reduced gradient",
        );
        t.true(a.shapesKept && a.inputsDisposed);
      } finally {
        await group.destroy();
      }
    },
  );
}

test.serial("broadcastParameters gives every replica the root's weights", async (t) => {
  const group = await createCollectiveGroupOn(members, { name: "weights" });
  try {
    const sums = (await Promise.all(
      members.map((m, rank) => m.invoke(FIXTURE, "broadcastFrom", [modelDir, rank, 1, group.name])),
    )) as number[];
    t.is(sums[0], sums[1]);
    const own = (await members[0]!
      .invoke(FIXTURE, "broadcastFrom", [modelDir, 0, 0, "none"])
      .catch((e: Error) => e.message)) as string;
    t.regex(own, /not a member of collective group "none"/);
  } finally {
    await group.destroy();
  }
});
