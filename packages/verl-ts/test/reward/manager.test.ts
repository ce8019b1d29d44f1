import { RewardBatchError, RewardManager, registerRewardScorer, tokenLevelScores } from "@torl-ts/verl";
import test from "ava";
import { MathScorePool, RewardPoolError } from "../../src/reward/score-pool.js";

const batch = {
  responses: ["\\boxed{2}", "\\boxed{3}", "no answer here", "\\boxed{x=5}"],
  groundTruths: ["2", "2", "7", "5"],
  dataSources: ["aime24", "aime24", "math500", "math500"],
  responseLengths: [3, 5, 0, 1],
  responseWidth: 6,
};

test("scores a batch and puts each score on the last valid response token", async (t) => {
  const m = new RewardManager({ numThreads: 0 });
  const r = await m.score(batch);
  t.deepEqual(r.scores, [1, -1, -1, 1]);
  t.deepEqual(r.correct, [true, false, false, true]);
  t.deepEqual(r.extracted, ["2", "3", null, "x=5"]);
  const expected = new Float32Array(24);
  expected[2] = 1;
  expected[6 + 4] = -1;
  expected[18] = 1;
  t.deepEqual(r.tokenLevelScores, { data: expected, shape: [4, 6] });
});

test("metrics: accuracy per data source and the no-answer rate", async (t) => {
  const r = await new RewardManager({ numThreads: 0 }).score(batch);
  t.is(r.metrics["reward/acc"], 0.5);
  t.is(r.metrics["reward/aime24/acc"], 0.5);
  t.is(r.metrics["reward/math500/acc"], 0.5);
  t.is(r.metrics["reward/math500/count"], 2);
  t.is(r.metrics["reward/no_answer_rate"], 0.25);
  t.is(r.metrics["reward/score/mean"], 0);
});

test("execution penalty and reward type pass through the manager", async (t) => {
  const m = new RewardManager({ numThreads: 0, rewardType: "v2.wformat", executionErrorPenalty: true });
  const r = await m.score({
    responses: ["\\boxed{2}", "\\boxed{3}", "none", "\\boxed{2}"],
    groundTruths: ["2", "2", "2", "2"],
    execution: [
      { hadCode: true, passed: false },
      undefined,
      { hadCode: false, passed: false },
      { hadCode: true, passed: true },
    ],
  });
  t.deepEqual(r.scores, [0.5, -0.5, -1, 1]);
});

test("worker threads give the same verdicts as this thread", async (t) => {
  const rows = 600;
  const big = {
    responses: Array.from({ length: rows }, (_, i) => `\\boxed{\\frac{${i}}{2}}`),
    groundTruths: Array.from({ length: rows }, (_, i) => String(i % 3 === 0 ? i / 2 : i)),
    dataSources: Array.from({ length: rows }, (_, i) => (i % 2 ? "a" : "b")),
  };
  const threaded = new RewardManager({ numThreads: 2, parallelThreshold: 100 });
  try {
    const a = await threaded.score(big);
    const b = await new RewardManager({ numThreads: 0 }).score(big);
    t.deepEqual(a.scores, b.scores);
    t.deepEqual(a.metrics, b.metrics);
    t.is(a.correct.filter(Boolean).length, 200); // rows with i % 3 == 0
  } finally {
    await threaded.close();
  }
});

test("scorers are chosen by data source and pluggable", async (t) => {
  const remove = registerRewardScorer(/^lenpen_/, async (input) => ({
    score: input.solution.length > 5 ? -0.1 : 0.1,
    correct: false,
    extracted: null,
  }));
  try {
    const r = await new RewardManager({ numThreads: 0 }).score({
      responses: ["\\boxed{1}", "short", "a long response"],
      groundTruths: ["1", "1", "1"],
      dataSources: ["math", "lenpen_x", "lenpen_y"],
    });
    t.deepEqual(r.scores, [1, 0.1, -0.1]);
  } finally {
    remove();
  }
  const after = await new RewardManager({ numThreads: 0 }).score({
    responses: ["short"],
    groundTruths: ["1"],
    dataSources: ["lenpen_x"],
  });
  t.deepEqual(after.scores, [-1], "removed scorer falls back to math");
});

test("a ragged batch is a typed error naming the field", async (t) => {
  const m = new RewardManager({ numThreads: 0 });
  await t.throwsAsync(m.score({ responses: ["a", "b"], groundTruths: ["1"] }), {
    instanceOf: RewardBatchError,
    message: /groundTruths has 1 rows but responses has 2/,
  });
  t.throws(() => tokenLevelScores([1], [7], 6), {
    instanceOf: RewardBatchError,
    message: /responseLengths\[0\] = 7/,
  });
});

test("the scoring pool grades alike under both pool libraries, in input order", async (t) => {
  const inputs = Array.from({ length: 90 }, (_, i) => ({
    solution: `\\boxed{${i % 4}}`,
    groundTruth: String(i % 3),
    dataSource: "math",
  }));
  const options = {
    rewardType: "default",
    executionErrorPenalty: false,
    executionPenaltyValue: 0.5,
  } as const;
  const expected = inputs.map((x) => x.solution === `\\boxed{${x.groundTruth}}`);
  for (const library of ["tinypool", "piscina"] as const) {
    const pool = new MathScorePool(2, library);
    try {
      const results = await pool.score(inputs, options);
      t.deepEqual(
        results.map((r) => r.correct),
        expected,
        library,
      );
    } finally {
      await pool.close();
    }
    await t.throwsAsync(pool.score(inputs, options), { instanceOf: RewardPoolError });
  }
});
