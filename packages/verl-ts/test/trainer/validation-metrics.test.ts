import test from "ava";
import {
  bootstrapSizes,
  computeMultiSampleValidationMetrics,
  type ValidationSample,
} from "../../src/trainer/index.js";

const sample = (uid: string, dataSource: string, acc: boolean, pred: string | null): ValidationSample => ({
  uid,
  dataSource,
  acc,
  reward: acc ? 1 : -1,
  pred,
});

test("sizes of the best@/maj@ draws: 2, 4, ... below N, then N", (t) => {
  t.deepEqual(bootstrapSizes(1), []);
  t.deepEqual(bootstrapSizes(2), [2]);
  t.deepEqual(bootstrapSizes(4), [2, 4]);
  t.deepEqual(bootstrapSizes(6), [2, 4, 6]);
});

test("val_kwargs.n > 1: veRL's val-core/val-aux names, mean@N, best@N, maj@N, pass@k, test_score", (t) => {
  const samples = [
    // prompt a: 1 of 4 correct; the majority answer (3 x "5") is wrong
    sample("a", "aime", true, "7"),
    sample("a", "aime", false, "5"),
    sample("a", "aime", false, "5"),
    sample("a", "aime", false, "5"),
    // prompt b: all 4 correct
    ...Array.from({ length: 4 }, () => sample("b", "aime", true, "3")),
    // another source: one prompt, never correct
    ...Array.from({ length: 4 }, () => sample("c", "math", false, null)),
  ];
  const m = computeMultiSampleValidationMetrics(samples);
  t.is(m["val-core/aime/acc/mean@4"], (0.25 + 1) / 2);
  // pass@k = 1 - C(N-c, k)/C(N, k): prompt a (c=1): pass@2 = 1 - C(3,2)/C(4,2) = 0.5, pass@4 = 1
  t.is(m["val-aux/aime/acc/pass@2"], (0.5 + 1) / 2);
  t.is(m["val-core/aime/acc/pass@4"], 1);
  t.is(m["val-core/math/acc/pass@4"], 0);
  // the majority of a's draws votes "5" (wrong) most of the time; b is always right
  const maj = m["val-core/aime/acc/maj@4/mean"]!;
  t.true(maj > 0.5 && maj < 0.75, String(maj));
  // best@4 of a is 1 unless all four draws miss the one correct sample: (3/4)^4
  t.true(Math.abs(m["val-core/aime/acc/best@4/mean"]! - (1 - 0.75 ** 4 + 1) / 2) < 0.03);
  t.true(Math.abs(m["val-aux/aime/acc/worst@2/mean"]! - (0.25 ** 2 + 1) / 2) < 0.03);
  t.is(m["val-aux/aime/acc/std@4"], (Math.sqrt(0.25 * 0.75) + 0) / 2);
  t.is(m["val-aux/aime/reward/mean@4"], (-0.5 + 1) / 2, "the reward is an aux variable");
  t.is(m["val/test_score/aime"], 0.25);
  t.is(m["val/test_score/math"], -1);
  t.deepEqual(computeMultiSampleValidationMetrics(samples), m, "deterministic");
  // one sample per prompt: mean@1 and pass@1 only
  const one = computeMultiSampleValidationMetrics([
    sample("a", "s", true, "1"),
    sample("b", "s", false, "2"),
  ]);
  t.deepEqual(Object.keys(one).sort(), [
    "val-aux/s/reward/mean@1",
    "val-core/s/acc/mean@1",
    "val-core/s/acc/pass@1",
    "val/test_score/s",
  ]);
  t.is(one["val-core/s/acc/pass@1"], 0.5);
});
