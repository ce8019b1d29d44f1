import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  buildByteBpeTokenizer,
  createRandomPretrained,
  loadTrainerConfig,
  readMetrics,
  tirRollout,
} from "@torl-ts/verl";
import test from "ava";
import { CalculatorError, CalculatorTool, evaluate } from "../src/calculator.js";
import { calculatorRows, DEFAULT_CONFIG, toolSpecFromConfig, trainWithCalculator } from "../src/train.js";
import { calculatorHabitModel } from "./calc-model.js";
import { undocumented } from "./metrics-doc.js";

const tokenizer = buildByteBpeTokenizer();

function tinyRandomModel() {
  const dir = mkdtempSync(join(tmpdir(), "calc-model-"));
  const model = createRandomPretrained(
    dir,
    tokenizer,
    { hiddenSize: 32, numHiddenLayers: 2, numAttentionHeads: 4, numKeyValueHeads: 2, intermediateSize: 64 },
    { seed: 9, std: 0.1 },
  );
  return { dir, model };
}

test("the calculator evaluates arithmetic with Python's precedence and refuses anything else", (t) => {
  t.is(evaluate("(123 + 4) * 56"), 7112);
  t.is(evaluate("-2 ** 2"), -4);
  t.is(evaluate("2 ** 3 ** 2"), 512);
  t.is(evaluate("7 // 2 + 7 % 3 - 1 / 4"), 3.75);
  t.is(evaluate("pow(3, 200, 13) + gcd(84, 36) + lcm(4, 6) + max(1, 9, 2) + sqrt(16)"), 9 + 12 + 12 + 9 + 4);
  for (const bad of ["", "1 +", "2 * (3", "process.exit(1)", "1 / 0", "10 ** 400", "constructor"])
    t.throws(() => evaluate(bad), { instanceOf: CalculatorError }, bad);
});

test("the tool finds its call after the last opening marker and wraps the result", async (t) => {
  const tool = new CalculatorTool();
  t.deepEqual(tool.stop, ["</calc>"]);
  t.is(tool.parse("no call here"), undefined);
  const call = tool.parse("first <calc>1+1</calc><output>2</output> then <calc>6 * 7");
  t.deepEqual(call, { name: "calculator", arguments: { expression: "6 * 7" } });
  const id = await tool.create();
  const ok = await tool.execute(id, call!);
  t.like(ok, { observation: "42", text: "</calc><output>42</output>", success: true });
  const bad = await tool.execute(id, { name: "calculator", arguments: { expression: "6 * x" } });
  t.false(bad.success);
  t.regex(bad.observation, /^Error: unknown name x/);
  await tool.release(id);
});

test("the stock TIR rollout calls the calculator through its stop string and masks the appended text", async (t) => {
  const { model } = tinyRandomModel();
  const target = "<calc>12*34</calc><output>408</output> so \\boxed{408}";
  const eos = tokenizer.eosTokenId!;
  const idOf = (ch: string) => tokenizer.encode(ch)[0]!;
  // Force the script character by character (the appended text comes from the tool, not from here).
  const logitsProcessor = (_i: number, responseIds: readonly number[], logits: Float32Array) => {
    const sofar = tokenizer.decode(responseIds, true);
    const next = target.startsWith(sofar) && sofar.length < target.length ? idOf(target[sofar.length]!) : eos;
    logits.fill(-1e9);
    logits[next] = 0;
  };
  const prompt = tokenizer.encode("What is 12 times 34?\n");
  const { samples } = await tirRollout(model, tokenizer, [prompt, prompt], {
    tool: new CalculatorTool(),
    numLlmCallsAvailable: 1,
    maxResponseLength: 80,
    logitsProcessor,
  });
  for (const s of samples) {
    t.is(s.text, target);
    t.is(s.numToolCalls, 1);
    t.is(s.executionPasses, 1);
    t.is(s.calls[0]!.observation, "408");
    const appended = "</calc><output>408</output>";
    const start = target.indexOf(appended);
    const masked = Array.from(s.toolOutputMask)
      .map((m, k) => (m ? "" : tokenizer.decode([s.responseIds[k]!], true)))
      .join("");
    t.is(masked, appended, "exactly the tool's text is masked out of the loss");
    t.is(s.calls[0]!.textRange[0], start);
  }
});

test("the config names the tool: module resolved against the config file, options passed to the constructor", (t) => {
  const cfg = loadTrainerConfig({ files: [DEFAULT_CONFIG], overrides: ["actor_rollout_ref.model.path=/x"] });
  const spec = toolSpecFromConfig(cfg, join(DEFAULT_CONFIG, ".."));
  t.regex(spec!.module, /^file:.*examples\/new-tool\/src\/calculator\.ts$/);
  t.is(spec!.exportName, "CalculatorTool");
  t.deepEqual(spec!.args, [{ maxExpressionChars: 200 }]);
  const off = loadTrainerConfig({
    files: [DEFAULT_CONFIG],
    overrides: ["actor_rollout_ref.rollout.num_llm_calls_available=0"],
  });
  t.is(toolSpecFromConfig(off, "/"), null);
  const [row] = calculatorRows(1);
  const [, a, b] = /What is (\d+) times (\d+)\?/.exec(row!.prompt[0]!.content)!;
  t.is(row!.reward_model.ground_truth, String(Number(a) * Number(b)));
});

test.serial(
  "the stock trainer trains two steps with the calculator named in the config, and calls it",
  async (t) => {
    // A tiny model taught one habit (answer with "<c>6*7</c>"), so the tool is really used while training;
    // the markers come from the config's tool options, overridden like any other key.
    const { dir, finalLoss } = await calculatorHabitModel();
    t.true(finalLoss < 0.05, `the habit was learned (loss ${finalLoss})`);
    const runsDir = mkdtempSync(join(tmpdir(), "calc-runs-"));
    const ckpt = mkdtempSync(join(tmpdir(), "calc-ckpt-"));
    const lines: string[] = [];
    const summary = await trainWithCalculator({
      overrides: [
        `actor_rollout_ref.model.path=${dir}`,
        `trainer.default_local_dir=${ckpt}`,
        "data.template_type=chat",
        "data.train_batch_size=2",
        "data.max_response_length=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.tool.config.options.open=<c>",
        "actor_rollout_ref.rollout.tool.config.options.close=</c>",
        // the trigger named in the config must be the tool's own (the rollout refuses a mismatch)
        "actor_rollout_ref.rollout.tool.stop=</c>",
      ],
      runsDir,
      workerEnv: { TORL_BACKEND: "cpu" },
      log: (l) => lines.push(l),
    });
    t.log(lines.slice(-4).join("\n"));
    t.is(summary.steps, 2);
    t.is(summary.num_llm_calls_available, 2);
    const metrics = readMetrics(join(summary.run_dir, "metrics.jsonl"));
    for (const m of metrics)
      for (const key of ["actor/pg_loss", "critic/score/mean", "tool/code_ratio", "response_length/mean"])
        t.true(Number.isFinite(m[key]), `step ${m.step}: ${key} = ${m[key]}`);
    t.true(
      metrics.some((m) => m["tool/code_ratio"]! > 0 && m["tool/pass_ratio"]! > 0),
      "the workers built the calculator from the config and its calls evaluated",
    );
    t.true(readFileSync(join(summary.run_dir, "summary.json"), "utf8").includes('"steps": 2'));
    const emitted = new Set(metrics.flatMap((m) => Object.keys(m)));
    t.deepEqual(undocumented(emitted), [], "every metric the trainer wrote is listed in docs/metrics.md");
  },
);
