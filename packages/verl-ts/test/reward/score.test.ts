import { answerReward, computeMathScore, RewardTypeError } from "@torl-ts/verl";
import test from "ava";

const right = "so the answer is \\boxed{\\frac{1}{2}}";
const wrong = "so the answer is \\boxed{\\frac{1}{3}}";
const none = "so the answer is one half";

test("default reward: +1 correct, -1 wrong or missing", (t) => {
  t.deepEqual(computeMathScore(right, "0.5"), { score: 1, correct: true, extracted: "\\frac{1}{2}" });
  t.is(computeMathScore(wrong, "0.5").score, -1);
  t.deepEqual(computeMathScore(none, "0.5"), { score: -1, correct: false, extracted: null });
});

test("v2.wformat: -0.5 for a wrong boxed answer, -1 for none", (t) => {
  const o = { rewardType: "v2.wformat" as const };
  t.is(computeMathScore(right, "0.5", o).score, 1);
  t.is(computeMathScore(wrong, "0.5", o).score, -0.5);
  t.is(computeMathScore(none, "0.5", o).score, -1);
});

test("accuracy reward is 1/0", (t) => {
  const o = { rewardType: "accuracy" as const };
  t.is(computeMathScore(right, "0.5", o).score, 1);
  t.is(computeMathScore(wrong, "0.5", o).score, 0);
  t.is(answerReward("accuracy", false, false), 0);
});

test("execution penalty hits failed code only, never responses without code", (t) => {
  const o = { executionErrorPenalty: true };
  t.is(computeMathScore(right, "0.5", o, { hadCode: true, passed: false }).score, 0.5);
  t.is(computeMathScore(wrong, "0.5", o, { hadCode: true, passed: false }).score, -1.5);
  t.is(computeMathScore(right, "0.5", o, { hadCode: true, passed: true }).score, 1);
  t.is(computeMathScore(right, "0.5", o, { hadCode: false, passed: false }).score, 1);
  t.is(computeMathScore(right, "0.5", {}, { hadCode: true, passed: false }).score, 1, "off by default");
});

test("an unknown reward type is a typed error naming the choices", (t) => {
  const e = t.throws(() => computeMathScore(right, "0.5", { rewardType: "bogus" as never }), {
    instanceOf: RewardTypeError,
  });
  t.regex(e!.message, /bogus.*default, v2\.wformat, accuracy/);
});
