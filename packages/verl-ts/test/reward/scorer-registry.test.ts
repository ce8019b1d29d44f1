// Registered scorers and custom_reward_function are bounded by reward_model.score_timeout, their results
// are checked like custom_reward_function's, and bad registrations are refused when they are made.
import {
  CustomRewardFunctionError,
  RewardManager,
  RewardScorerError,
  RewardScoreTimeoutError,
  registerRewardScorer,
} from "@torl-ts/verl";
import test from "ava";

const one = (dataSource: string) => ({
  responses: ["\\boxed{1}"],
  groundTruths: ["1"],
  dataSources: [dataSource],
});

test.serial(
  "a registered scorer that never settles fails within score_timeout, naming it and the data source",
  async (t) => {
    const remove = registerRewardScorer("probe_src", () => new Promise(() => {}));
    try {
      const started = Date.now();
      const err = await t.throwsAsync(
        new RewardManager({ numThreads: 0, scoreTimeout: 0.2 }).score(one("probe_src")),
        {
          instanceOf: RewardScoreTimeoutError,
        },
      );
      t.regex(err!.message, /registerRewardScorer\("probe_src"\)/);
      t.regex(err!.message, /data source "probe_src"/);
      t.regex(err!.message, /reward_model\.score_timeout/);
      t.true(Date.now() - started < 5000);
    } finally {
      remove();
    }
  },
);

test.serial(
  "a batch that fails leaves no timer of its rows still scoring (the process can exit)",
  async (t) => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const removeHang = registerRewardScorer("hangs", () => new Promise(() => {}));
    const removeThrow = registerRewardScorer("throws", () => {
      throw new Error("scorer exploded");
    });
    try {
      const before = timers();
      await t.throwsAsync(
        new RewardManager({ numThreads: 0, scoreTimeout: 60 }).score({
          responses: ["\\boxed{1}", "\\boxed{1}"],
          groundTruths: ["1", "1"],
          dataSources: ["hangs", "throws"],
        }),
        { message: /scorer exploded/ },
      );
      // the hanging row's 60 s timer would have kept Node alive a minute after the error
      t.is(timers(), before);
    } finally {
      removeHang();
      removeThrow();
    }
  },
);

test("a custom_reward_function that never settles fails within score_timeout, naming the function", async (t) => {
  const path = `data:text/javascript,${encodeURIComponent("export function hang() { return new Promise(() => {}); }")}`;
  const manager = new RewardManager({
    numThreads: 0,
    scoreTimeout: 0.2,
    customRewardFunction: { path, name: "hang" },
  });
  const err = await t.throwsAsync(manager.score(one("src_x")), { instanceOf: RewardScoreTimeoutError });
  t.regex(err!.message, /custom_reward_function hang in data:/);
  t.regex(err!.message, /data source "src_x"/);
  t.regex(err!.message, /reward_model\.score_timeout/);
});

test("score_timeout must be a number of seconds above 0", (t) => {
  for (const scoreTimeout of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, "5" as unknown as number])
    t.throws(() => new RewardManager({ scoreTimeout }), {
      message: /scoreTimeout \(reward_model\.score_timeout\)/,
    });
});

test.serial(
  'a registered scorer\'s result must be a finite score: NaN, Infinity, {}, undefined, {score: "1"} are refused',
  async (t) => {
    const bad: unknown[] = [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      {},
      undefined,
      { score: "1" },
      { score: Number.NaN },
      "1",
      { score: 1, correct: "yes" },
    ];
    for (const value of bad) {
      const remove = registerRewardScorer("probe_src", () => value as number);
      try {
        const err = await t.throwsAsync(new RewardManager({ numThreads: 0 }).score(one("probe_src")), {
          instanceOf: RewardScorerError,
        });
        t.regex(err!.message, /registerRewardScorer\("probe_src"\) returned .* for data source "probe_src"/);
      } finally {
        remove();
      }
    }
  },
);

test.serial(
  "a registered scorer may return a bare finite number, as custom_reward_function may",
  async (t) => {
    const remove = registerRewardScorer("probe_src", async () => 0.5);
    try {
      const r = await new RewardManager({ numThreads: 0 }).score(one("probe_src"));
      t.deepEqual(r.scores, [0.5]);
      t.deepEqual(r.correct, [true]);
      t.deepEqual(r.extracted, [null]);
    } finally {
      remove();
    }
  },
);

test("custom_reward_function's bad result names the data source", async (t) => {
  const path = `data:text/javascript,${encodeURIComponent("export function nan() { return NaN; }")}`;
  const manager = new RewardManager({ numThreads: 0, customRewardFunction: { path, name: "nan" } });
  await t.throwsAsync(manager.score(one("src_y")), {
    instanceOf: CustomRewardFunctionError,
    message: /nan in .* returned null; expected a number .*data source "src_y"/,
  });
});

test.serial(
  "a RegExp with the g or y flag is refused at registration (it would match every other row)",
  async (t) => {
    t.throws(() => registerRewardScorer(/probe_src/g, () => 1), {
      instanceOf: RewardScorerError,
      message: /g or y flag/,
    });
    t.throws(() => registerRewardScorer(/probe_src/y, () => 1), {
      instanceOf: RewardScorerError,
      message: /g or y flag/,
    });
    // a flag-less RegExp scores every row
    const remove = registerRewardScorer(/probe_src/i, () => 0.25);
    try {
      const r = await new RewardManager({ numThreads: 0 }).score({
        responses: ["a", "b", "c", "d"],
        groundTruths: ["1", "1", "1", "1"],
        dataSources: ["probe_src", "probe_src", "probe_src", "probe_src"],
      });
      t.deepEqual(r.scores, [0.25, 0.25, 0.25, 0.25]);
    } finally {
      remove();
    }
  },
);

test("registerRewardScorer refuses a data source that is not a non-empty string or RegExp, and a scorer that is not a function", (t) => {
  t.throws(() => registerRewardScorer(123 as unknown as string, () => 1), {
    instanceOf: RewardScorerError,
    message: /non-empty string or a RegExp, got 123/,
  });
  t.throws(() => registerRewardScorer("", () => 1), { instanceOf: RewardScorerError });
  t.throws(() => registerRewardScorer("probe_src", "x" as never), {
    instanceOf: RewardScorerError,
    message: /registerRewardScorer\("probe_src"\): the scorer must be a function/,
  });
});
