import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  computeGrpoOutcomeAdvantage,
  registerAdvantageEstimator,
  registerPolicyLoss,
  vanillaPolicyLossTf,
} from "../../src/algorithms/index.js";
import {
  assertTrainerConfig,
  ConfigSchema,
  checkLoggerNames,
  checkTrainerConfig,
  checkTrainerSetup,
  checkUnsupportedKeys,
  configValue,
  loadSftConfig,
  loadTrainerConfig,
  miniBatchRows,
  parseConfigOverrides,
  runRequirements,
  splitConfigArgs,
  TrainerConfigError,
  trainerConfigSchema,
} from "../../src/config/index.js";
import { closestName } from "../../src/config/schema.js";

const dir = mkdtempSync(join(tmpdir(), "verl-config-"));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

test("defaults carry veRL's trainer keys and ToRL's additions", (t) => {
  const c = loadTrainerConfig();
  t.is(c.data.max_prompt_length, 512);
  t.is(c.actor_rollout_ref.rollout.n, 1);
  t.is(c.actor_rollout_ref.actor.clip_ratio, 0.2);
  t.is(c.actor_rollout_ref.actor.clip_ratio_c, 3);
  t.is(c.actor_rollout_ref.actor.loss_agg_mode, "token-mean");
  t.is(c.algorithm.norm_adv_by_std_in_grpo, true);
  t.is(c.trainer.resume_mode, "auto");
  // ToRL
  t.is(c.data.template_type, "tir_base_0309");
  t.is(c.data.execution_error_penalty, false);
  t.is(c.actor_rollout_ref.rollout.num_llm_calls_available, 1);
  t.is(c.actor_rollout_ref.rollout.tool.stop, "```output");
  t.is(c.actor_rollout_ref.actor.mask_tool_output, true);
  const keys = trainerConfigSchema().keys();
  for (const k of [
    "data.train_batch_size",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_type",
    "actor_rollout_ref.actor.entropy_coeff",
    "algorithm.adv_estimator",
    "algorithm.kl_ctrl.kl_coef",
    "trainer.total_epochs",
    "trainer.total_training_steps",
    "trainer.test_freq",
    "trainer.save_freq",
    "trainer.n_gpus_per_node",
    "trainer.nnodes",
    "trainer.project_name",
    "trainer.experiment_name",
    "critic.cliprange_value",
    "reward_model.enable",
  ]) {
    t.true(keys.includes(k), k);
  }
});

test("a user YAML merges over the defaults and k=v overrides win over both; references follow", (t) => {
  const p = file(
    "torl.yaml",
    [
      "data:",
      "  max_prompt_length: 400",
      "  max_response_length: 3072",
      "  train_batch_size: 128",
      "actor_rollout_ref:",
      "  actor:",
      "    optim: {lr: 1e-6}",
      "  rollout: {n: 16}",
      "algorithm: {adv_estimator: grpo}",
      "trainer: {total_epochs: 300, test_freq: 4, save_freq: 20, project_name: torl}",
    ].join("\n"),
  );
  const c = loadTrainerConfig({
    files: [p],
    overrides: [
      "actor_rollout_ref.rollout.n=8",
      "trainer.experiment_name=run1",
      "trainer.logger=[console,jsonl]",
    ],
  });
  t.is(c.data.max_prompt_length, 400);
  t.is(c.actor_rollout_ref.rollout.n, 8);
  t.is(c.actor_rollout_ref.actor.optim.lr, 1e-6);
  t.is(c.actor_rollout_ref.actor.optim.weight_decay, 0.01, "siblings of a merged key keep their defaults");
  t.is(c.algorithm.adv_estimator, "grpo");
  t.deepEqual(c.trainer.logger, ["console", "jsonl"]);
  t.is(
    c.actor_rollout_ref.rollout.response_length,
    3072,
    "the reference to data.max_response_length followed the YAML",
  );
  t.is(c.trainer.default_local_dir, "checkpoints/torl/run1");
  t.is(configValue(c, "critic.ppo_mini_batch_size"), 256);
});

test("an unknown key is an error naming it with a did-you-mean suggestion", (t) => {
  const e = t.throws(() => loadTrainerConfig({ overrides: ["data.max_prompt_lenght=300"] }), {
    instanceOf: TrainerConfigError,
  });
  t.regex(e!.message, /unknown key "data\.max_prompt_lenght" \(did you mean "data\.max_prompt_length"\?\)/);
  t.deepEqual(e!.issues[0]!.key, "data.max_prompt_lenght");
  const e2 = t.throws(() => loadTrainerConfig({ overrides: ["rollout.n=4"] }));
  t.regex(e2!.message, /unknown key "rollout\.n" \(did you mean "actor_rollout_ref\.rollout\.n"\?\)/);
  const p = file("typo.yaml", "trainer:\n  total_epoch: 3\n");
  t.throws(() => loadTrainerConfig({ files: [p] }), { message: /did you mean "trainer\.total_epochs"/ });
});

test("a wrong type is an error naming the key and what it accepts; all problems are listed together", (t) => {
  const e = t.throws(
    () =>
      loadTrainerConfig({
        overrides: [
          "data.train_batch_size=abc",
          "actor_rollout_ref.actor.loss_agg_mode=token-sum",
          "trainer.total_training_steps=2.5",
          "actor_rollout_ref.actor.use_kl_loss=maybe",
          "critic=3",
        ],
      }),
    { instanceOf: TrainerConfigError },
  );
  t.is(e!.issues.length, 5);
  t.regex(e!.message, /data\.train_batch_size expects int, got string "abc"/);
  t.regex(
    e!.message,
    /loss_agg_mode expects one of "token-mean", "seq-mean-token-sum", .*got string "token-sum"/,
  );
  t.regex(e!.message, /trainer\.total_training_steps expects int \| null, got number 2\.5/);
  t.regex(e!.message, /use_kl_loss expects bool, got string "maybe"/);
  t.regex(e!.message, /critic is a section \(keys: rollout_n, strategy, optim/);
});

test("override values are read as YAML scalars; a float key takes an int, a string key takes a number", (t) => {
  t.deepEqual(parseConfigOverrides(["a.b=1e-6", "c=true", "d=[1,2]", "e=null", "f=hello world", "+g.h=3"]), [
    { key: "a.b", value: 1e-6, add: false },
    { key: "c", value: true, add: false },
    { key: "d", value: [1, 2], add: false },
    { key: "e", value: null, add: false },
    { key: "f", value: "hello world", add: false },
    { key: "g.h", value: 3, add: true },
  ]);
  const c = loadTrainerConfig({
    overrides: ["actor_rollout_ref.rollout.temperature=1", "trainer.experiment_name=42"],
  });
  t.is(c.actor_rollout_ref.rollout.temperature, 1);
  t.is(c.trainer.experiment_name, "42");
  t.throws(() => parseConfigOverrides(["data.seed"]), { message: /cannot read override "data\.seed"/ });
});

test("+key=value adds a key the schema does not know; it may not shadow a known one", (t) => {
  const c = loadTrainerConfig({ overrides: ["+trainer.my_flag=7"] });
  t.is(configValue(c, "trainer.my_flag"), 7);
  t.throws(() => loadTrainerConfig({ overrides: ["+trainer.seed=7"] }), { message: /already exists/ });
});

test("a YAML syntax error names the file and line; a missing file names the file", (t) => {
  const p = file("broken.yaml", "data:\n  max_prompt_length: 3\n   bad: [1, 2\n");
  const e = t.throws(() => loadTrainerConfig({ files: [p] }), { instanceOf: TrainerConfigError });
  t.regex(e!.message, /broken\.yaml:\d+: YAML syntax error/);
  t.throws(() => loadTrainerConfig({ files: [join(dir, "nope.yaml")] }), {
    message: /cannot read config file .*nope\.yaml/,
  });
});

test("the schema extends with a recipe's defaults YAML: types inferred, comments as types and docs", (t) => {
  const schema = trainerConfigSchema().extend(
    [
      "torl:",
      "  # fraction of the batch logged",
      "  log_fraction: 0.5",
      "  max_rounds: 2",
      "  mode: fast # type: enum(fast, slow)",
      "  extra_stop: null # type: string | null",
      "data:",
      "  train_batch_size: 16",
    ].join("\n"),
    "recipe.yaml",
  );
  t.is(schema.get("torl.log_fraction")!.doc, "fraction of the batch logged");
  const c = loadTrainerConfig({ schema, overrides: ["torl.log_fraction=1", "torl.extra_stop=END"] });
  t.is(configValue(c, "torl.log_fraction"), 1, "a float key accepts an int");
  t.is(c.data.train_batch_size, 16, "the extension's default replaces the built-in one");
  t.throws(() => loadTrainerConfig({ schema, overrides: ["torl.max_rounds=1.5"] }), {
    message: /torl\.max_rounds expects int, got number 1\.5/,
  });
  t.throws(() => loadTrainerConfig({ schema, overrides: ["torl.mode=medium"] }), {
    message: /torl\.mode expects one of "fast", "slow"/,
  });
  t.throws(() => loadTrainerConfig({ overrides: ["torl.max_rounds=1"] }), {
    message: /unknown key "torl\.max_rounds"/,
  });
});

test("free-form maps take any keys below them", (t) => {
  const c = loadTrainerConfig({ overrides: ["actor_rollout_ref.model.override_config.num_layers=2"] });
  t.deepEqual(c.actor_rollout_ref.model.override_config, { num_layers: 2 });
});

test("CLI arguments split into YAML files and overrides", (t) => {
  t.deepEqual(splitConfigArgs(["a.yaml", "x=1", "b.yml", "data.train_files=t.yaml"]), {
    files: ["a.yaml", "b.yml"],
    overrides: ["x=1", "data.train_files=t.yaml"],
  });
});

test("semantic checks stop a bad config before any work: unknown estimator or template, ranges, n for GRPO", (t) => {
  const ok = loadTrainerConfig({
    overrides: ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=6"],
  });
  t.deepEqual(checkTrainerConfig(ok, { worldSize: 4 }), []);
  const bad = loadTrainerConfig({
    overrides: [
      "algorithm.adv_estimator=gpro",
      "data.template_type=tir_base",
      "actor_rollout_ref.actor.clip_ratio_c=0.5",
      "trainer.test_freq=0",
      "data.train_batch_size=3",
    ],
  });
  const e = t.throws(() => assertTrainerConfig(bad, { worldSize: 2 }), { instanceOf: TrainerConfigError });
  t.regex(
    e!.message,
    /algorithm\.adv_estimator "gpro" is not a registered estimator \(known: .*\) \(did you mean "grpo"\?\)/,
  );
  t.regex(
    e!.message,
    /data\.template_type "tir_base" is not a registered template .*did you mean "tir_base_0309"/,
  );
  t.regex(e!.message, /clip_ratio_c must be > 1/);
  t.regex(e!.message, /trainer\.test_freq must be > 0 or -1/);
  t.regex(e!.message, /3 rows must divide evenly over 2 workers/);
  const grpo1 = loadTrainerConfig({ overrides: ["algorithm.adv_estimator=grpo"] });
  t.regex(checkTrainerConfig(grpo1)[0]!.message, /needs n >= 2/);
});

test("a key marked unsupported (or under a marked section) keeps its default or is refused, saying what to do", (t) => {
  const schema = ConfigSchema.fromYaml(
    [
      "a:",
      "  # plain doc",
      "  works: 1",
      "  # the knob",
      "  # unsupported: there is no knob here; use a.works",
      "  knob: 2",
      "  # unsupported: follows a.works only",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: YAML's interpolation syntax
      "  alias: ${a.works}",
      "# unsupported: no such engine; remove the section",
      "engine:",
      "  size: 3",
      "  inner:",
      "    deep: x",
    ].join("\n"),
  );
  t.is(schema.get("a.works")!.unsupported, undefined);
  t.is(schema.get("a.works")!.doc, "plain doc");
  t.is(schema.get("a.knob")!.doc, "the knob");
  t.is(schema.get("a.knob")!.unsupported, "there is no knob here; use a.works");
  t.is(schema.get("engine.inner.deep")!.unsupported, "no such engine; remove the section");
  const cfg = (over: string[]) => loadTrainerConfig({ schema, overrides: over });
  t.deepEqual(checkUnsupportedKeys(cfg([]), schema), []);
  t.deepEqual(checkUnsupportedKeys(cfg(["a.works=5"]), schema), [], "an alias follows the key it names");
  const issues = checkUnsupportedKeys(cfg(["a.knob=3", "a.alias=9", "engine.inner.deep=y"]), schema);
  t.deepEqual(
    issues.map((i) => i.message),
    [
      "a.knob=3 is not supported here (only its default 2 is): there is no knob here; use a.works",
      "a.alias=9 is not supported here (only its default 1 is): follows a.works only",
      'engine.inner.deep="y" is not supported here (only its default "x" is): no such engine; remove the section',
    ],
  );
});

test("veRL keys this trainer does not have are refused by the checker, each naming the key and the way out", (t) => {
  const c = loadTrainerConfig({
    overrides: [
      "actor_rollout_ref.rollout.dtype=bfloat16",
      "actor_rollout_ref.model.use_remove_padding=true",
      "actor_rollout_ref.rollout.name=vllm",
      "actor_rollout_ref.actor.fsdp_config.param_offload=true",
      "reward_model.enable=true",
      "actor_rollout_ref.model.override_config.num_layers=2",
      "trainer.max_critic_ckpt_to_keep=2",
      "actor_rollout_ref.actor.shuffle=true",
    ],
  });
  const messages = checkTrainerConfig(c).map((i) => i.message);
  // critic.shuffle follows actor.shuffle, so only the key that was set is named
  t.is(messages.length, 8, messages.join("\n"));
  for (const m of messages)
    t.regex(m, /^[a-z_.]+=.* is not supported here \(only its default .* is\): .{20,}/);
  t.true(messages.some((m) => m.startsWith('actor_rollout_ref.rollout.name="vllm" is not supported here')));
  t.true(messages.some((m) => /reward_model\.enable=true .*custom_reward_function\.path/.test(m)));
  // every default passes, and the shipped schema marks the keys the issue lists
  t.deepEqual(checkTrainerConfig(loadTrainerConfig()), []);
  const schema = trainerConfigSchema();
  for (const key of [
    "actor_rollout_ref.rollout.dtype",
    "actor_rollout_ref.model.override_config",
    "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.actor.checkpoint.contents",
    "actor_rollout_ref.actor.shuffle",
    "trainer.max_critic_ckpt_to_keep",
    "reward_model.reward_manager",
  ])
    t.truthy(schema.get(key)!.unsupported, key);
});

test("did-you-mean names only a close name (a typo); otherwise the choices alone are listed", (t) => {
  const far = checkTrainerConfig(loadTrainerConfig({ overrides: ["algorithm.adv_estimator=nope"] }))
    .map((i) => i.message)
    .join("\n");
  t.regex(far, /algorithm\.adv_estimator "nope" is not a registered estimator \(known: [^)]*\bgrpo\b[^)]*\)/);
  t.notRegex(far, /did you mean/);
  t.notRegex(checkLoggerNames(["xyz"])[0]!.message, /did you mean/);
  t.regex(checkLoggerNames(["xyz"])[0]!.message, /known: console, /);
  // one edit per three letters, at least one; a swap is one edit; a prefix of three letters or more
  const names = ["grpo", "opo", "gae", "tir_base_0309", "tensorboard"];
  t.is(closestName("gpro", names), "grpo");
  t.is(closestName("nope", names), undefined);
  t.is(closestName("zz", names), undefined);
  t.is(closestName("tir_base", names), "tir_base_0309");
  t.is(closestName("tensrboad", names), "tensorboard");
  t.is(closestName("tnsrbrd", names), undefined);
  // config keys: a typo of the leaf or the key elsewhere, not any key a few edits away
  const schema = trainerConfigSchema();
  t.is(schema.suggest("data.max_prompt_lenght"), "data.max_prompt_length");
  t.is(schema.suggest("rollout.n"), "actor_rollout_ref.rollout.n");
  t.is(schema.suggest("trainer.zzz"), undefined);
});

test("what an estimator or a loss needs is declared at its registration, and the checker and the trainer ask for it", (t) => {
  const cfg = (over: string[]) => loadTrainerConfig({ overrides: over });
  // the built-ins: a critic for gae, a greedy baseline pass for remax, n >= 2 for the group estimators
  t.deepEqual(runRequirements(cfg(["algorithm.adv_estimator=gae"])), {
    minGroupSize: 1,
    critic: true,
    greedyBaseline: false,
  });
  t.true(runRequirements(cfg(["algorithm.adv_estimator=remax"])).greedyBaseline);
  for (const name of ["grpo", "rloo", "grpo_passk"])
    t.regex(
      checkTrainerConfig(cfg([`algorithm.adv_estimator=${name}`]))[0]!.message,
      new RegExp(`^actor_rollout_ref\\.rollout\\.n is 1: ${name} compares .* needs n >= 2$`),
    );
  // an estimator of one's own: its declared needs are checked and provided, with no name tested anywhere
  registerAdvantageEstimator("test_trios", computeGrpoOutcomeAdvantage, { minGroupSize: 3, critic: true });
  const trios = cfg(["algorithm.adv_estimator=test_trios", "actor_rollout_ref.rollout.n=2"]);
  t.deepEqual(
    checkTrainerConfig(trios).map((i) => i.message),
    ["actor_rollout_ref.rollout.n is 2: test_trios compares responses to the same prompt and needs n >= 3"],
  );
  t.true(runRequirements(trios).critic);
  // and a policy loss of one's own: the setup check refuses n below its group size
  registerPolicyLoss("test_pairs_loss", vanillaPolicyLossTf, ["pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"], {
    minGroupSize: 2,
    greedyBaseline: true,
  });
  const pairs = cfg(["actor_rollout_ref.actor.policy_loss.loss_mode=test_pairs_loss"]);
  t.true(runRequirements(pairs).greedyBaseline);
  t.true(
    checkTrainerSetup(pairs, { trainRows: [] })
      .map((i) => i.message)
      .includes(
        'actor_rollout_ref.rollout.n is 1: the policy loss "test_pairs_loss" compares responses to the same prompt and needs n >= 2',
      ),
  );
});

test("one global mini-batch holds ppo_mini_batch_size prompts x their responses, for the checker and the workers alike", (t) => {
  const c = loadTrainerConfig({
    overrides: [
      "actor_rollout_ref.rollout.n=4",
      "actor_rollout_ref.actor.ppo_mini_batch_size=3",
      "critic.ppo_mini_batch_size=5",
    ],
  });
  t.is(miniBatchRows(c, "actor"), 12);
  t.is(miniBatchRows(c, "critic"), 20, "critic.rollout_n follows rollout.n");
});

test("loadTrainerConfig refuses files / overrides that are not lists of strings, and values that are not a map", (t) => {
  const p = file("single.yaml", "trainer: {total_epochs: 3}\n");
  const one = (opts: object) => {
    const e = t.throws(() => loadTrainerConfig(opts as never), { instanceOf: TrainerConfigError });
    t.is(e!.issues.length, 1, e!.message);
    return e!.message;
  };
  t.regex(one({ files: p }), /files must be an array of strings, got string ".*single\.yaml"/);
  t.regex(one({ overrides: "a=1" }), /overrides must be an array of strings, got string "a=1"/);
  t.regex(one({ files: [p, 3] }), /files must be an array of strings, got a list \[.*,3\]/);
  t.regex(one({ values: "data.seed=1" }), /values must be a map, got string "data\.seed=1"/);
  t.regex(one({ schema: {} }), /schema must be a ConfigSchema/);
  t.regex(
    one({ overrides: ["a=1"], files: [], values: undefined, file: p }),
    /unknown option "file" of loadTrainerConfig \(did you mean "files"\?\)/,
  );
  t.regex(
    one({ overides: ["a=1"] }),
    /unknown option "overides" of loadTrainerConfig \(did you mean "overrides"\?\)/,
  );
  t.is(loadTrainerConfig({ files: [p], overrides: undefined }).trainer.total_epochs, 3);
});

test("loadSftConfig refuses the options loadTrainerConfig refuses, and a schema (it has its own)", (t) => {
  t.throws(() => loadSftConfig({ file: ["x.yaml"] } as never), {
    instanceOf: TrainerConfigError,
    message: /unknown option "file" of loadSftConfig \(did you mean "files"\?\)/,
  });
  t.throws(() => loadSftConfig({ schema: trainerConfigSchema() } as never), {
    message: /unknown option "schema" of loadSftConfig/,
  });
  t.throws(() => loadSftConfig({ overrides: "a=1" } as never), {
    message: /overrides must be an array of strings, got string "a=1"/,
  });
});

test("a NaN or infinite number is refused saying so, naming the key", (t) => {
  const p = file("nan.yaml", "actor_rollout_ref:\n  actor:\n    optim:\n      lr: .nan\n");
  t.throws(() => loadTrainerConfig({ files: [p] }), {
    instanceOf: TrainerConfigError,
    message: /actor_rollout_ref\.actor\.optim\.lr expects float, got NaN \(not a finite number\)/,
  });
  t.throws(() => loadTrainerConfig({ overrides: ["actor_rollout_ref.rollout.temperature=-.inf"] }), {
    message: /actor_rollout_ref\.rollout\.temperature expects float, got -Infinity \(not a finite number\)/,
  });
  t.throws(() => loadTrainerConfig({ overrides: ["actor_rollout_ref.actor.optim.betas=[0.9,.nan]"] }), {
    message: /betas expects list\[float\], got a list \[0\.9,NaN\]/,
  });
});

/** "${body}", the config's interpolation syntax (a template, so that it reads as intended here). */
const ref = (body: string) => `\${${body}}`;

test("oc.env reads the environment, with a default after a comma; an unset variable without default or another resolver is refused", (t) => {
  process.env.TORL_CFG_TEST_PROJECT = "envproj";
  delete process.env.TORL_CFG_TEST_UNSET;
  const p = file(
    "env.yaml",
    [
      "trainer:",
      `  project_name: ${ref("oc.env:TORL_CFG_TEST_PROJECT")}`,
      `  experiment_name: run-${ref("oc.env:TORL_CFG_TEST_UNSET,dflt")}`,
      `  total_training_steps: ${ref("oc.env:TORL_CFG_TEST_UNSET,null")}`,
      `  total_epochs: ${ref("oc.env:TORL_CFG_TEST_UNSET, 7")}`,
      "actor_rollout_ref:",
      "  model:",
      `    path: "${ref("oc.env:TORL_CFG_TEST_UNSET,'/models/a,b'")}"`,
    ].join("\n"),
  );
  const c = loadTrainerConfig({ files: [p] });
  t.is(c.trainer.project_name, "envproj");
  t.is(c.trainer.experiment_name, "run-dflt");
  t.is(c.trainer.total_training_steps, null);
  t.is(c.trainer.total_epochs, 7);
  t.is(c.actor_rollout_ref.model.path, "/models/a,b");
  t.is(c.trainer.default_local_dir, "checkpoints/envproj/run-dflt", "a reference to a resolved key");
  const refused = (value: string) => {
    const e = t.throws(() => loadTrainerConfig({ overrides: [`trainer.project_name=${value}`] }), {
      instanceOf: TrainerConfigError,
    });
    t.is(e!.issues.length, 1);
    t.is(e!.issues[0]!.key, "trainer.project_name");
    return e!.message;
  };
  t.regex(
    refused(ref("oc.env:TORL_CFG_TEST_UNSET")),
    /trainer\.project_name reads \$\{oc\.env:TORL_CFG_TEST_UNSET\}, but the environment variable TORL_CFG_TEST_UNSET is not set/,
  );
  t.regex(
    refused(ref("oc.decode:3")),
    /trainer\.project_name uses the resolver "oc\.decode" \(in \$\{oc\.decode:3\}\), which this loader does not have \(it has: oc\.env\)/,
  );
  t.regex(refused(ref("constructor:x")), /uses the resolver "constructor"/);
  t.regex(
    refused(`a${ref("not a key")}`),
    /trainer\.project_name: cannot read the interpolation in "a\$\{not a key\}"/,
  );
  t.regex(
    refused(ref(`oc.env:X,${ref("trainer.seed")}`)),
    /trainer\.project_name: cannot read the interpolation/,
  );
  // an environment value is a string, as in OmegaConf: a number key refuses it by name
  process.env.TORL_CFG_TEST_NUM = "8";
  t.throws(
    () => loadTrainerConfig({ overrides: [`trainer.n_gpus_per_node=${ref("oc.env:TORL_CFG_TEST_NUM")}`] }),
    {
      message: /trainer\.n_gpus_per_node expects int, got string "8"/,
    },
  );
});
