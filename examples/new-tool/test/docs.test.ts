/**
 * The metrics page in docs/ cannot go stale: every metric name the trainer's metric functions emit must
 * be listed in docs/metrics.md. (docs/configuration.md is checked with the recipe that owns its
 * generator, examples/torl/test/config-reference.test.ts.)
 */
import {
  balanceBatch,
  computeDataMetrics,
  computeMultiSampleValidationMetrics,
  computeMultiTurnMetrics,
  computeThroughputMetrics,
  computeTimingPerTokenMetrics,
  computeToolMetrics,
  computeValidationMetrics,
  DataProto,
  rolloutMetrics,
} from "@torl-ts/verl";
import test from "ava";
import { undocumented } from "./metrics-doc.js";

test("every metric name the trainer's metric functions emit is listed in docs/metrics.md", (t) => {
  const B = 2;
  const R = 3;
  const P = 2;
  const f = (n: number) => ({ data: new Float32Array(n).fill(1), shape: [B, n / B] });
  const batch = DataProto.fromDict(
    {
      token_level_scores: f(B * R),
      token_level_rewards: f(B * R),
      advantages: f(B * R),
      returns: f(B * R),
      values: f(B * R),
      response_mask: f(B * R),
      responses: { data: new Int32Array(B * R), shape: [B, R] },
      prompts: { data: new Int32Array(B * P), shape: [B, P] },
      attention_mask: f(B * (P + R)),
      num_tool_calls: { data: new Int32Array([1, 0]), shape: [B] },
      num_tool_passes: { data: new Int32Array([1, 0]), shape: [B] },
      num_turns: { data: new Int32Array([4, 2]), shape: [B] },
      num_malformed_calls: { data: new Int32Array([0, 0]), shape: [B] },
    },
    {
      tool_observations: [["42"], []],
      extracted_answer: ["42", null],
      acc: [true, false],
      tool_call_names: [["calculator"], []],
    },
  );
  const emitted = {
    ...computeDataMetrics(batch),
    ...computeToolMetrics(batch),
    ...computeMultiTurnMetrics(batch),
    ...computeToolMetrics(batch, "val/tool"),
    ...computeValidationMetrics(["aime24", "math500"], [true, false], [1, -1]),
    ...rolloutMetrics([]),
    ...computeMultiSampleValidationMetrics(
      [0, 1, 2, 3, 4, 5, 6, 7].map((i) => ({
        uid: `p${i % 2}`,
        dataSource: "aime24",
        acc: i % 3 === 0,
        reward: i % 3 === 0 ? 1 : -1,
        pred: String(i % 2),
      })),
    ),
    ...computeTimingPerTokenMetrics(
      batch,
      Object.fromEntries(
        ["gen", "ref", "values", "adv", "update_critic", "update_actor"].map((p) => [`timing_s/${p}`, 1]),
      ),
    ),
    ...computeThroughputMetrics(100, 2, 2),
    ...balanceBatch(batch, 2).metrics,
  };
  t.true(Object.keys(emitted).length > 25, Object.keys(emitted).join(" "));
  t.deepEqual(undocumented(Object.keys(emitted)), []);
});

test("the metric check itself rejects a name the page does not list", (t) => {
  t.deepEqual(undocumented(["actor/pg_loss", "reward/aime24/acc", "actor/made_up"]), ["actor/made_up"]);
  t.deepEqual(undocumented(["val-core/aime24/acc/maj@8/mean", "val-core/aime24/score/maj@8/mean"]), [
    "val-core/aime24/score/maj@8/mean",
  ]);
});
