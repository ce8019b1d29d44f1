import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import {
  criticSettings,
  logProbMicroRows,
  microBatches,
  perWorkerRows,
  responseTokenBatch,
} from "../../src/workers/index.js";
import { responseBatch } from "./helpers.js";

// How a pass is cut into micro-batches, and the trimmed token batch each one runs on.

const B = 12;
const P = 6;
const R = 10;
const data = responseBatch({
  B,
  P,
  R,
  promptLen: (b) => 1 + ((b * 5) % P),
  responseLen: (b) => 1 + ((b * 7) % R),
  token: (b, t) => 97 + ((b + t) % 26),
  valueKey: "advantages",
  rowValue: () => 0,
});
const promptLen = (b: number) => 1 + ((b * 5) % P);
const responseLen = (b: number) => 1 + ((b * 7) % R);

test("fixed micro-batches: `rows` rows each, in order", (t) => {
  t.deepEqual(microBatches(data, 5), [
    [0, 1, 2, 3, 4],
    [5, 6, 7, 8, 9],
    [10, 11],
  ]);
});

test("dynamic micro-batches: every row once, longest first, within the token budget", (t) => {
  for (const budget of [8, 20, 40, 1000]) {
    const groups = microBatches(data, 1, budget);
    t.deepEqual(
      groups.flat().sort((a, b) => a - b),
      Array.from({ length: B }, (_, i) => i),
      `budget ${budget}: every row exactly once`,
    );
    const lengths = groups.flat().map((b) => promptLen(b) + responseLen(b));
    t.deepEqual(
      lengths,
      [...lengths].sort((a, b) => b - a),
      "rows sorted by length, longest first",
    );
    for (const g of groups) {
      const width = Math.max(...g.map(promptLen)) + Math.max(...g.map(responseLen));
      if (g.length > 1) t.true(g.length * width <= budget, `budget ${budget}: ${g.length} rows x ${width}`);
    }
    if (budget === 1000) t.is(groups.length, 1);
    if (budget === 8) t.true(groups.some((g) => g.length === 1 && promptLen(g[0]!) + responseLen(g[0]!) > 8));
  }
});

test("the token batch drops columns that are padding in every row, on both sides", (t) => {
  const part = data.selectRows([1, 2]); // prompts 6 and 5 tokens, responses 8 and 5
  const { tb, P: kp, R: r, kept } = responseTokenBatch(part);
  t.is(r, R);
  t.is(kp, 6);
  t.is(kept, 8);
  t.is(tb.length, 14);
  t.deepEqual(Array.from(tb.mask.subarray(0, 14)), [...Array(6).fill(1), ...Array(8).fill(1)]);
  t.deepEqual(Array.from(tb.mask.subarray(14)), [0, ...Array(5).fill(1), ...Array(5).fill(1), 0, 0, 0]);
});

test("veRL's deprecated global micro-batch keys split over the workers: log-prob passes and the critic's forward", (t) => {
  const cfg = loadTrainerConfig({ overrides: ["algorithm.adv_estimator=gae"] });
  t.is(logProbMicroRows(cfg, "rollout", 4), 8, "nothing set: 8 rows");
  cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size = 12;
  cfg.actor_rollout_ref.ref.log_prob_micro_batch_size = 40;
  t.is(logProbMicroRows(cfg, "rollout", 4), 3, "12 rows over 4 workers");
  t.is(logProbMicroRows(cfg, "ref", 4), 10, "40 rows over 4 workers");
  t.is(logProbMicroRows(cfg, "ref", 64), 1, "at least one row");
  cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu = 5;
  t.is(logProbMicroRows(cfg, "ref", 4), 5, "the per-worker key wins");
  cfg.actor_rollout_ref.model.path = "/models/m";
  const critic = cfg.critic as Record<string, unknown>;
  t.is(criticSettings(cfg, 2).forwardMicro, 8);
  critic.forward_micro_batch_size = 6;
  t.is(criticSettings(cfg, 2).forwardMicro, 3, "6 rows over 2 workers");
  t.is(perWorkerRows(null, null, 2), null);
});
