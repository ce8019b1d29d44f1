import * as tf from "@tensorflow/tfjs";
import { SandboxExecutor } from "@torl-ts/sandbox";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { buildByteBpeTokenizer, generate, Qwen2Model, selectBackend } from "../../src/models/index.js";
import { DataProto } from "../../src/protocol/index.js";
import {
  generateSequences,
  PythonCodeInterpreter,
  padRolloutBatch,
  promptsFromDataProto,
  RolloutInputError,
  rolloutDataProto,
  rolloutMetrics,
  type TirSample,
  ToolExecutionError,
  tirRollout,
} from "../../src/rollout/index.js";
import { rolloutSampling } from "../../src/workers/index.js";
import { tinyTestConfig } from "../models/tiny-config.js";
import { greedyTargets, LengthTool, scriptedProcessor } from "./helpers.js";

// One token per byte: a stop string always ends on a token boundary, so every unmasked response token
// was sampled by the model and can be checked against a full forward.
const tok = buildByteBpeTokenizer();
const EOS = tok.eosTokenId!;
let model: Qwen2Model;
let executor: SandboxExecutor;
let python: PythonCodeInterpreter;
const prompts = [
  tok.encode("hi"),
  tok.encode("a much longer prompt here, 1+2=3"),
  tok.encode("x"),
  tok.encode("q?"),
];

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  const cfg = tinyTestConfig(tok.vocabSize);
  model = Qwen2Model.random(cfg, { seed: 11, std: 0.6 });
  executor = await new SandboxExecutor({ workers: 2, log: () => {} }).start();
  python = new PythonCodeInterpreter(executor, { runTimeout: 10 });
});

test.after.always(async () => {
  await executor?.close();
});

/** The character the model writes most often in plain greedy generation, not first in any row. */
async function commonChar(): Promise<string> {
  const outs = await generate(model, tok, prompts, { maxNewTokens: 48, temperature: 0, ignoreEos: true });
  const counts = new Map<string, number>();
  for (const o of outs)
    for (const ch of o.text.slice(1, 30))
      if (ch.charCodeAt(0) < 128) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]![0];
}

function maskedText(s: TirSample): string {
  return tok.decode(
    s.responseIds.filter((_, i) => s.toolOutputMask[i] === 0),
    true,
  );
}

test("with C = 0 (or no tool) the rollout is plain generation: greedy tokens equal (await generate())", async (t) => {
  const plain = await generate(model, tok, prompts, { maxNewTokens: 40, temperature: 0, ignoreEos: true });
  const none = await tirRollout(model, tok, prompts, {
    maxResponseLength: 40,
    temperature: 0,
    ignoreEos: true,
  });
  const c0 = await tirRollout(model, tok, prompts, {
    tool: new LengthTool(await commonChar()),
    numLlmCallsAvailable: 0,
    maxResponseLength: 40,
    temperature: 0,
    ignoreEos: true,
  });
  for (const r of [none, c0]) {
    t.deepEqual(
      r.samples.map((s) => s.responseIds),
      plain.map((o) => o.tokenIds),
    );
    for (const s of r.samples) {
      t.is(s.numToolCalls, 0);
      t.is(s.executionPasses, 1);
      t.is(s.finishReason, "length");
      t.true(s.toolOutputMask.every((m) => m === 1));
    }
  }
  t.is(c0.stats.toolCalls, 0);
});

test("a new tool with its own trigger: C calls per row, every observation masked, context equals the final tokens", async (t) => {
  const trigger = await commonChar();
  for (const C of [1, 2, 3]) {
    const tool = new LengthTool(trigger);
    const r = await tirRollout(model, tok, prompts, {
      tool,
      numLlmCallsAvailable: C,
      maxResponseLength: 120,
      temperature: 0,
      ignoreEos: true,
    });
    t.true(
      r.samples.some((s) => s.numToolCalls === C),
      `C=${C}: some row uses the whole budget`,
    );
    for (const s of r.samples) {
      t.true(s.numToolCalls <= C);
      t.true(s.responseIds.length <= 120);
      // every call's appended text is masked, and nothing else is
      t.is(
        maskedText(s),
        s.calls
          .map((c) => `[[${c.observation}]]`)
          .join("")
          .slice(0, maskedText(s).length),
      );
      for (const c of s.calls) t.is(s.text.slice(c.textRange[0], c.textRange[1]), `[[${c.observation}]]`);
      // the stop string itself is cut: the text before each call ends where the round's text ended
      for (const c of s.calls) t.is(Number(c.call.arguments.n) >= 0, true);
      t.is(s.executionPasses, s.calls.every((c) => c.success) ? 1 : 0);
      t.is(s.numToolPasses, s.calls.filter((c) => c.success).length);
      t.is(s.numRounds, 1 + s.calls.length);
      // the KV cache saw exactly the final tokens: each sampled token is the greedy choice of a full
      // forward over prompt + response before it (after cuts at stop strings and appended tokens)
      const targets = greedyTargets(model, s.promptIds, s.responseIds);
      s.responseIds.forEach((id, i) => {
        if (s.toolOutputMask[i]) t.is(id, targets[i]!, `C=${C} row ${s.index} token ${i}`);
      });
    }
    t.is(tool.created, tool.released, "every tool instance is released");
    t.is(
      tool.batches.reduce((a, b) => a + b, 0),
      r.stats.toolCalls,
    );
  }
});

test("seeded sampling is reproducible whatever the tool latency (rows wait for tools at different times)", async (t) => {
  const trigger = await commonChar();
  const opts = { numLlmCallsAvailable: 2, maxResponseLength: 90, temperature: 1, seed: 7, ignoreEos: true };
  const fast = await tirRollout(model, tok, prompts, { tool: new LengthTool(trigger), ...opts });
  const slow = await tirRollout(model, tok, prompts, {
    tool: new LengthTool(trigger, (k) => [30, 0, 7, 55, 2][k % 5]!),
    ...opts,
  });
  const other = await tirRollout(model, tok, prompts, { tool: new LengthTool(trigger), ...opts, seed: 8 });
  const strip = (s: TirSample) => ({ ...s, calls: s.calls.map((c) => ({ ...c, latencyMs: 0 })) });
  t.deepEqual(fast.samples.map(strip), slow.samples.map(strip));
  t.notDeepEqual(
    fast.samples.map((s) => s.responseIds),
    other.samples.map((s) => s.responseIds),
  );
  t.true(fast.stats.toolCalls > 0);
});

test("more prompts than maxBatchSize join as rows free up and give the same tokens", async (t) => {
  const trigger = await commonChar();
  const many = [...prompts, ...prompts.map((p) => [...p, ...p])];
  const opts = { numLlmCallsAvailable: 1, maxResponseLength: 50, temperature: 0, ignoreEos: true };
  const wide = await tirRollout(model, tok, many, { tool: new LengthTool(trigger), ...opts });
  const narrow = await tirRollout(model, tok, many, {
    tool: new LengthTool(trigger),
    ...opts,
    maxBatchSize: 3,
  });
  t.deepEqual(
    narrow.samples.map((s) => s.responseIds),
    wide.samples.map((s) => s.responseIds),
  );
});

test("the real code interpreter: code runs in the sandbox, ```output blocks are appended and masked, passes and failures", async (t) => {
  const scripts: Record<number, string[]> = {
    0: ["I compute.\n```python\nprint(6*7)\n```\n```output", "So \\boxed{42}."],
    1: ["```python\nprint(1/0)\n```\n```output", "Hmm \\boxed{0}."],
    2: ["No code: \\boxed{1}."],
    3: [
      "```python\nx = 2**10\nprint(x)\n```\n```output",
      "Check:\n```python\nprint(x + 1)\n```\n```output",
      "\\boxed{1024}",
    ],
  };
  const r = await tirRollout(model, tok, prompts, {
    tool: python,
    numLlmCallsAvailable: 2,
    maxResponseLength: 200,
    temperature: 1,
    seed: 1,
    logitsProcessor: (i, ids, logits) => scriptedProcessor(tok, scripts[i]!, EOS)(i, ids, logits),
  });
  const [a, b, c, d] = r.samples as [TirSample, TirSample, TirSample, TirSample];
  t.is(a.text, "I compute.\n```python\nprint(6*7)\n```\n```output\n42\n```\nSo \\boxed{42}.");
  t.is(maskedText(a), "```output\n42\n```\n");
  t.like(a, { numToolCalls: 1, numToolPasses: 1, executionPasses: 1, finishReason: "stop", stopReason: EOS });
  t.is(a.responseIds.at(-1), EOS);
  t.is(b.calls[0]!.observation, "ZeroDivisionError: division by zero");
  t.like(b, { numToolCalls: 1, executionPasses: 0, finishReason: "stop" });
  t.like(c, { numToolCalls: 0, executionPasses: 1, text: "No code: \\boxed{1}." });
  // C = 2: the second block runs without the first one's state (no state shared between runs)
  t.is(d.numToolCalls, 2);
  t.deepEqual(
    d.calls.map((x) => x.observation),
    ["1024", "NameError: name 'x' is not defined"],
  );
  t.is(maskedText(d), "```output\n1024\n```\n```output\nNameError: name 'x' is not defined\n```\n");
  t.is(d.executionPasses, 0);
  const m = rolloutMetrics(r.samples);
  t.is(m["tool/code_ratio"], 0.75);
  t.is(m["tool/pass_ratio"], 2 / 4);
});

test("a stop string with no call in its round ends the sequence; the budget is not spent", async (t) => {
  const r = await tirRollout(model, tok, [prompts[0]!], {
    tool: python,
    numLlmCallsAvailable: 1,
    maxResponseLength: 100,
    logitsProcessor: scriptedProcessor(tok, ["Just words.\n```output"], EOS),
    seed: 1,
  });
  const s = r.samples[0]!;
  t.like(s, {
    numToolCalls: 0,
    finishReason: "stop",
    stopReason: "```output",
    text: "Just words.\n```output",
  });
});

test("max response length holds across rounds: an observation that does not fit is cut and the row ends", async (t) => {
  const script = "```python\nprint('y' * 100)\n```\n```output";
  // the trigger's own tokens count while they are generated, then are cut: 9 tokens of "```output"
  for (const max of [script.length + 20, script.length + 3]) {
    const r = await tirRollout(model, tok, [prompts[0]!], {
      tool: python,
      numLlmCallsAvailable: 1,
      maxResponseLength: max,
      logitsProcessor: scriptedProcessor(tok, [script, "done"], EOS),
      seed: 1,
    });
    const s = r.samples[0]!;
    t.is(s.responseIds.length, max);
    t.like(s, { finishReason: "length", stopReason: null, numToolCalls: 1 });
    t.true(`\`\`\`output\n${"y".repeat(100)}\n\`\`\`\n`.startsWith(maskedText(s)));
    t.is(s.toolOutputMask.at(-1), 0);
  }
  // a limit reached inside the round that triggers the tool: no call is made
  const r = await tirRollout(model, tok, [prompts[0]!], {
    tool: python,
    numLlmCallsAvailable: 1,
    maxResponseLength: 12,
    logitsProcessor: scriptedProcessor(tok, [script], EOS),
    seed: 1,
  });
  t.like(r.samples[0], { finishReason: "length", numToolCalls: 0 });
  t.is(r.samples[0]!.responseIds.length, 12);
});

test("padRolloutBatch: left-padded prompts, right-padded responses, masks and veRL position ids", async (t) => {
  const r = await tirRollout(model, tok, prompts.slice(0, 2), {
    tool: python,
    numLlmCallsAvailable: 1,
    maxResponseLength: 60,
    logitsProcessor: (i, ids, l) =>
      scriptedProcessor(tok, i === 0 ? ["```python\nprint(5)\n```\n```output", "ok"] : ["short"], EOS)(
        i,
        ids,
        l,
      ),
    seed: 2,
  });
  const b = padRolloutBatch(r.samples, { padTokenId: tok.padTokenId, responseLength: 60 });
  const [s0, s1] = r.samples as [TirSample, TirSample];
  t.is(b.promptLength, Math.max(s0.promptIds.length, s1.promptIds.length));
  t.is(b.responses.length, 2 * 60);
  t.deepEqual(
    Array.from(b.responseMask.subarray(60, 120)),
    [...Array(60)].map((_, i) => (i < s1.responseIds.length ? 1 : 0)),
  );
  t.deepEqual(Array.from(b.toolOutputMask.subarray(0, s0.responseIds.length)), Array.from(s0.toolOutputMask));
  const W = b.promptLength + 60;
  const pad = b.promptLength - s0.promptIds.length;
  t.is(b.positionIds[pad], 0);
  t.is(b.positionIds[b.promptLength], s0.promptIds.length);
  t.is(b.positionIds[W - 1], W - 1 - pad);
  t.is(b.attentionMask[pad - 1] ?? 0, 0);
  t.deepEqual(Array.from(b.executionPasses), [1, 1]);
  t.deepEqual(Array.from(b.numToolCalls), [1, 0]);
  t.throws(() => padRolloutBatch(r.samples, { padTokenId: 0, responseLength: 3 }), {
    instanceOf: RangeError,
  });
  const dp = rolloutDataProto(r.samples, { padTokenId: tok.padTokenId, responseLength: 60 });
  t.is(dp.length, 2);
  t.deepEqual(dp.batch.tool_output_mask!.shape, [2, 60]);
  t.deepEqual(dp.batch.input_ids!.shape, [2, W]);
  t.deepEqual(Array.from(dp.batch.num_tool_calls!.data as Int32Array), [1, 0]);
  t.deepEqual(dp.nonTensorBatch.finish_reason, ["stop", "stop"]);
  t.is((dp.metaInfo.rollout_metrics as Record<string, number>)["tool/code_ratio"], 0.5);
});

test("bad input and a failing tool give typed errors", async (t) => {
  await t.throwsAsync(tirRollout(model, tok, [[]], { maxResponseLength: 5 }), {
    instanceOf: RolloutInputError,
    message: /prompt 0 is empty/,
  });
  await t.throwsAsync(
    tirRollout(model, tok, prompts, { tool: python, numLlmCallsAvailable: -1, maxResponseLength: 5 }),
    { instanceOf: RolloutInputError },
  );
  const broken = new LengthTool(await commonChar());
  broken.executeBatch = async () => {
    throw new Error("backend down");
  };
  const e = await t.throwsAsync(
    tirRollout(model, tok, prompts, { tool: broken, maxResponseLength: 60, temperature: 0, ignoreEos: true }),
    {
      instanceOf: ToolExecutionError,
    },
  );
  t.regex(e!.message, /tool length failed for sequences \[.*\]: backend down/);
});

test("a token that straddles the trigger is re-encoded with the appended text; masks follow character offsets", async (t) => {
  const block = "```python\nprint(42)\n``` ```output\n42\n```\n";
  const bpe = buildByteBpeTokenizer({ corpus: `${block} x ${block}`.repeat(20), vocabSize: 300 });
  const cfg = tinyTestConfig(bpe.vocabSize);
  const m = Qwen2Model.random(cfg, { seed: 3, std: 0.6 });
  const script = bpe.encode("```python\nprint(42)\n``` ```output");
  const pieces = script.map((id) => bpe.decode([id]));
  t.true(
    pieces.some((p) => p.startsWith(" `")),
    `a token holds the space before the trigger: ${JSON.stringify(pieces)}`,
  );
  const prompt = bpe.encode("Q: 6*7?\n");
  const r = await tirRollout(m, bpe, [prompt], {
    tool: python,
    numLlmCallsAvailable: 1,
    maxResponseLength: script.length + 40,
    temperature: 0,
    ignoreEos: true,
    logitsProcessor: (_i, ids, logits) => {
      if (ids.length < script.length && ids.every((id, j) => id === script[j])) {
        logits.fill(Number.NEGATIVE_INFINITY);
        logits[script[ids.length]!] = 0;
      }
    },
  });
  const s = r.samples[0]!;
  t.true(s.text.startsWith("```python\nprint(42)\n``` ```output\n42\n```\n"), JSON.stringify(s.text));
  t.is(s.numToolCalls, 1);
  // masked tokens cover exactly the tool's text, plus the straddling space re-encoded with it
  const masked = bpe.decode(
    s.responseIds.filter((_, i) => s.toolOutputMask[i] === 0),
    true,
  );
  t.true(masked === "```output\n42\n```\n" || masked === " ```output\n42\n```\n", JSON.stringify(masked));
  // after the observation the model decodes freely: greedy tokens equal a full forward over the final
  // sequence, so the cache dropped the straddling token and holds exactly the re-encoded text
  const targets = greedyTargets(m, s.promptIds, s.responseIds);
  const lastTool = s.toolOutputMask.lastIndexOf(0);
  t.true(s.responseIds.length - lastTool > 10);
  for (let i = lastTool + 1; i < s.responseIds.length; i++) t.is(s.responseIds[i], targets[i]);
});

test("overlap: while a batch of calls is pending, the other rows keep decoding and finish; the paused rows resume after", async (t) => {
  const trigger = await commonChar();
  const tool = new LengthTool(trigger);
  const called: number[] = [];
  const finished = new Set<number>();
  let gated: Set<number> | undefined;
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  let timedOut = false;
  const fallback = setTimeout(() => {
    timedOut = true;
    open();
  }, 60_000);
  const maybeOpen = () => {
    if (gated && [...Array(many.length).keys()].every((i) => gated!.has(i) || finished.has(i))) open();
  };
  const inner = tool.executeBatch.bind(tool);
  let first = true;
  tool.executeBatch = async (items) => {
    if (first) {
      first = false;
      gated = new Set(called);
      maybeOpen();
      await gate;
    }
    return inner(items);
  };
  const many = [...prompts, ...prompts.map((p) => [...p, ...p])];
  const r = await tirRollout(model, tok, many, {
    tool,
    numLlmCallsAvailable: 1,
    maxResponseLength: 60,
    temperature: 0,
    ignoreEos: true,
    onEvent: (e) => {
      if (e.type === "tool_call") called.push(e.index);
      if (e.type === "finish") {
        finished.add(e.index);
        t.false(
          gated?.has(e.index) && !timedOut && finished.size < many.length - gated!.size,
          "a gated row finished early",
        );
        maybeOpen();
      }
    },
  });
  clearTimeout(fallback);
  t.false(timedOut, "the rollout waited for the pending calls instead of decoding the other rows");
  t.true(gated!.size > 0 && gated!.size < many.length, `gated ${gated!.size} of ${many.length}`);
  for (const i of gated!) t.is(r.samples[i]!.numToolCalls, 1, `gated row ${i} got its result and continued`);
});

test("generateSequences: a left-padded veRL prompt batch in, a padded rollout batch out, rows in order", async (t) => {
  const P = 40;
  const ids = new Int32Array(prompts.length * P).fill(tok.padTokenId);
  const mask = new Int32Array(prompts.length * P);
  prompts.forEach((p, b) => {
    ids.set(p, b * P + P - p.length);
    mask.fill(1, b * P + P - p.length, (b + 1) * P);
  });
  const input = DataProto.fromDict({
    input_ids: { data: ids, shape: [prompts.length, P] },
    attention_mask: { data: mask, shape: [prompts.length, P] },
  });
  t.deepEqual(promptsFromDataProto(input), prompts);
  const out = await generateSequences(model, tok, input, {
    tool: new LengthTool(await commonChar()),
    maxResponseLength: 30,
    temperature: 0,
    ignoreEos: true,
  });
  t.deepEqual(out.batch.responses!.shape, [prompts.length, 30]);
  t.deepEqual(out.batch.prompts!.shape, [prompts.length, P]);
  t.deepEqual(Array.from(out.batch.prompts!.data as Int32Array), Array.from(ids));
  const direct = await tirRollout(model, tok, prompts, {
    tool: new LengthTool(await commonChar()),
    maxResponseLength: 30,
    temperature: 0,
    ignoreEos: true,
  });
  t.deepEqual(
    out.nonTensorBatch.response_text,
    direct.samples.map((s) => s.text),
  );
  t.true((out.metaInfo.rollout_stats as { decodeSteps: number }).decodeSteps > 0);
});

test.serial("no tensors leak; an untied model's LM head is left alone", async (t) => {
  const cfg = tinyTestConfig(tok.vocabSize, { tieWordEmbeddings: false });
  const untied = Qwen2Model.random(cfg, { seed: 2, std: 0.6 });
  const before = tf.memory().numTensors;
  const opts = {
    tool: new LengthTool(await commonChar()),
    numLlmCallsAvailable: 2,
    maxResponseLength: 40,
    temperature: 0,
    ignoreEos: true,
    maxBatchSize: 2,
  };
  const a = await tirRollout(untied, tok, prompts, opts);
  t.is(tf.memory().numTensors, before);
  t.false(untied.variable("lm_head.weight").isDisposed);
  const b = await tirRollout(untied, tok, prompts, opts);
  t.deepEqual(
    a.samples.map((s) => s.responseIds),
    b.samples.map((s) => s.responseIds),
  );
  untied.dispose();
});

test("rollout.ignore_eos reaches the rollout: with it, a response the model ends at EOS runs to response_length", async (t) => {
  const cfg = loadTrainerConfig({
    overrides: ["data.max_response_length=12", "actor_rollout_ref.rollout.do_sample=false"],
  });
  // the model is made to say "ab" and then EOS
  const logitsProcessor = scriptedProcessor(tok, ["ab"], EOS);
  const run = async (ignoreEos: boolean) => {
    cfg.actor_rollout_ref.rollout.ignore_eos = ignoreEos;
    const sampling = rolloutSampling(cfg.actor_rollout_ref.rollout, false);
    t.is(sampling.ignoreEos, ignoreEos);
    const { samples } = await tirRollout(model, tok, [prompts[0]!], {
      ...sampling,
      logitsProcessor,
      seed: 1,
    });
    return samples[0]!;
  };
  const stops = await run(false);
  t.is(stops.finishReason, "stop");
  t.is(stops.responseIds.length, 3, "a, b, EOS");
  const runs = await run(true);
  t.is(runs.finishReason, "length");
  t.is(runs.responseIds.length, 12);
});
