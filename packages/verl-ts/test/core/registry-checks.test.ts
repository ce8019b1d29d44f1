// The registries (advantage estimators, policy losses, prompt templates) check names, functions and
// requirements when a registration is made, and estimators' and templates' answers where they are used.
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  AlgorithmInputError,
  computeAdvantage,
  getPolicyLoss,
  registerAdvantageEstimator,
  registerPolicyLoss,
  vanillaPolicyLossTf,
} from "../../src/algorithms/index.js";
import { checkTrainerConfig, loadTrainerConfig } from "../../src/config/index.js";
import { PromptTemplateError, registerPromptTemplate, renderPrompt } from "../../src/data/index.js";

const rewards = { data: Float32Array.from([0, 1, 0, 0]), shape: [2, 2] as [number, number] };
const mask = { data: Float32Array.from([1, 1, 1, 0]), shape: [2, 2] as [number, number] };
const input = { tokenLevelRewards: rewards, responseMask: mask, index: ["a", "a"] };

test("registerAdvantageEstimator refuses a name that is not a non-empty string and a non-function", (t) => {
  t.throws(
    () =>
      registerAdvantageEstimator(42 as unknown as string, () => ({ advantages: rewards, returns: rewards })),
    {
      instanceOf: TypeError,
      message: /registerAdvantageEstimator: the name must be a non-empty string, got 42/,
    },
  );
  t.throws(() => registerAdvantageEstimator("", () => ({ advantages: rewards, returns: rewards })), {
    instanceOf: TypeError,
  });
  t.throws(() => registerAdvantageEstimator("mine_x", "x" as never), {
    instanceOf: TypeError,
    message: /registerAdvantageEstimator\("mine_x"\): the estimator must be a function/,
  });
  // an unknown adv_estimator is still reported by name (no non-string name reached the list)
  const cfg = loadTrainerConfig({ values: { algorithm: { adv_estimator: "no_such_estimator" } } });
  t.true(
    checkTrainerConfig(cfg).some((issue) =>
      /"no_such_estimator" is not a registered estimator/.test(issue.message),
    ),
  );
});

test("requires is checked: an unknown key (with a did-you-mean) and wrong types are refused", (t) => {
  const fn = () => ({ advantages: rewards, returns: rewards });
  t.throws(() => registerAdvantageEstimator("req_x", fn, { min_group_size: 4 } as never), {
    instanceOf: TypeError,
    message:
      /registerAdvantageEstimator\("req_x"\): unknown requirement "min_group_size" \(did you mean "minGroupSize"\?\)/,
  });
  t.throws(() => registerAdvantageEstimator("req_x", fn, { critic: "no" } as never), {
    message: /requires\.critic must be true or false, got "no"/,
  });
  t.throws(() => registerAdvantageEstimator("req_x", fn, { minGroupSize: 1.5 }), {
    message: /requires\.minGroupSize must be an integer >= 1/,
  });
  t.throws(
    () => registerPolicyLoss("req_loss_x", vanillaPolicyLossTf, [], { greedybaseline: true } as never),
    {
      message: /unknown requirement "greedybaseline" \(did you mean "greedyBaseline"\?\)/,
    },
  );
  t.notThrows(() => registerAdvantageEstimator("req_ok_x", fn, { minGroupSize: 2, critic: false }));
});

test("an estimator's non-finite advantages on response tokens are refused, naming it and algorithm.adv_estimator", (t) => {
  registerAdvantageEstimator("nan_adv_x", ({ tokenLevelRewards }) => {
    const advantages = {
      data: new Float32Array(tokenLevelRewards.data.length).fill(Number.NaN),
      shape: tokenLevelRewards.shape,
    };
    return { advantages, returns: advantages };
  });
  t.throws(() => computeAdvantage("nan_adv_x", input), {
    instanceOf: AlgorithmInputError,
    message:
      /advantage estimator "nan_adv_x" \(algorithm\.adv_estimator\) returned a non-finite value in advantages \(NaN at row 0, token 0/,
  });
  // off the response mask a value is never used: NaN there is accepted
  registerAdvantageEstimator("masked_nan_x", ({ tokenLevelRewards }) => {
    const data = new Float32Array(tokenLevelRewards.data.length);
    data[3] = Number.NaN;
    const advantages = { data, shape: tokenLevelRewards.shape };
    return { advantages, returns: advantages };
  });
  t.notThrows(() => computeAdvantage("masked_nan_x", input));
  t.notThrows(() => computeAdvantage("grpo", input));
});

test("an async estimator, one returning undefined or a wrong shape is refused by name", (t) => {
  registerAdvantageEstimator("async_x", (async () => ({ advantages: rewards, returns: rewards })) as never);
  t.throws(() => computeAdvantage("async_x", input), { message: /"async_x" .* returned a Promise/ });
  registerAdvantageEstimator("undef_x", (() => undefined) as never);
  t.throws(() => computeAdvantage("undef_x", input), {
    message: /"undef_x" .* returned undefined; expected \{advantages, returns\}/,
  });
  registerAdvantageEstimator("shape_x", () => ({
    advantages: { data: new Float32Array(1), shape: [1, 1] },
    returns: rewards,
  }));
  t.throws(() => computeAdvantage("shape_x", input), {
    message: /"shape_x" .* returned advantages that is not a \[2, 2\] matrix/,
  });
});

test("registerPolicyLoss refuses a built-in name: the workers would run the built-in", (t) => {
  const mine = (i: Parameters<typeof vanillaPolicyLossTf>[0]) => ({
    pgLoss: i.aggregate(tf.neg(i.logProb)),
    metrics: {},
  });
  for (const name of ["vanilla", "gspo"])
    t.throws(() => registerPolicyLoss(name, mine, []), {
      instanceOf: AlgorithmInputError,
      message: /built-in policy loss .*register yours under a new name.*policy_loss\.loss_mode.*external_lib/,
    });
  t.is(getPolicyLoss("vanilla").fn, vanillaPolicyLossTf);
  // a new name, and registering it again (a module imported in the driver and by external_lib), is fine
  t.notThrows(() => registerPolicyLoss("mine_loss_x", mine, []));
  t.notThrows(() => registerPolicyLoss("mine_loss_x", mine, []));
  t.throws(() => registerPolicyLoss(7 as unknown as string, mine, []), {
    message: /non-empty string, got 7/,
  });
  t.throws(() => registerPolicyLoss("mine_loss_y", "x" as never, []), {
    message: /the loss must be a function/,
  });
  t.throws(() => registerPolicyLoss("mine_loss_y", mine, "pg" as never), {
    message: /metrics must be an array/,
  });
});

test("registerPromptTemplate checks its arguments; a template's answer must be a string", (t) => {
  t.throws(() => registerPromptTemplate(7 as unknown as string, () => "x"), {
    instanceOf: PromptTemplateError,
    message: /the name must be a non-empty string, got 7/,
  });
  t.throws(() => registerPromptTemplate("mine_t", "nope" as never), {
    instanceOf: PromptTemplateError,
    message: /registerPromptTemplate\("mine_t"\): the template must be a function/,
  });
  const messages = [{ role: "user" as const, content: "q" }];
  const answers: [unknown, RegExp][] = [
    [5, /returned number/],
    [{ text: "x" }, /returned object/],
    [Promise.resolve("x"), /returned a Promise/],
    [["x"], /returned an array/],
    [undefined, /returned undefined/],
  ];
  for (const [answer, why] of answers) {
    registerPromptTemplate("mine_t", () => answer as string);
    const err = t.throws(() => renderPrompt("mine_t", messages), { instanceOf: PromptTemplateError });
    t.regex(err!.message, /prompt template "mine_t" \(data\.template_type\)/);
    t.regex(err!.message, why);
  }
  registerPromptTemplate("mine_t", () => "ok");
  t.is(renderPrompt("mine_t", messages), "ok");
});
