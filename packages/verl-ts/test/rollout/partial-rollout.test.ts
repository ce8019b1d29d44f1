/**
 * The TIR engine under weights that change while it runs (partial rollouts): a swap at a token boundary
 * keeps every sequence's tokens and continues it under the new weights, the samples carry the versions
 * that sampled them, finished samples stream out before the rollout ends, and an abort stops it.
 * Also the rollout worker's WeightSwapGate on its own.
 */
import test from "ava";
import { buildByteBpeTokenizer, generate, Qwen2Model, selectBackend } from "../../src/models/index.js";
import { type PolicyVersionSource, type TirSample, tirRollout } from "../../src/rollout/index.js";
import { WeightSwapGate } from "../../src/workers/weight-swap.js";
import { tinyTestConfig } from "../models/tiny-config.js";
import { LengthTool } from "./helpers.js";

const tok = buildByteBpeTokenizer();
let model: Qwen2Model;
let original: Map<string, Float32Array>;
let perturbed: Map<string, Float32Array>;
const prompts = [tok.encode("hi"), tok.encode("a longer prompt, 1+2=3"), tok.encode("x"), tok.encode("q?")];
const LEN = 20;

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  model = Qwen2Model.random(tinyTestConfig(tok.vocabSize), { seed: 11, std: 0.6 });
  original = new Map([...(await model.getParameters())].map(([k, v]) => [k, Float32Array.from(v)]));
  perturbed = new Map([...original].map(([k, v]) => [k, v.map((x, i) => x * (1 + 0.5 * Math.sin(i)))]));
});

/** A policy whose weights become `next` at token boundary `at` (version 0 -> 1). */
function swapAt(at: number, next: () => Map<string, Float32Array>): PolicyVersionSource {
  let boundaries = 0;
  let version = 0;
  return {
    version: () => version,
    boundary: async () => {
      if (++boundaries !== at) return false;
      model.setParameters(next());
      version = 1;
      return true;
    },
  };
}

const ids = (r: { samples: TirSample[] }) => r.samples.map((s) => s.responseIds);

test.serial(
  "a swap to the same weights mid-rollout changes nothing: the sequences continue where they stopped",
  async (t) => {
    const tool = () => new LengthTool("e", (k) => (k % 2 ? 3 : 0));
    const opts = { maxResponseLength: LEN, temperature: 0.8, seed: 5, numLlmCallsAvailable: 2 } as const;
    model.setParameters(original);
    const plain = await tirRollout(model, tok, prompts, { ...opts, tool: tool() });
    for (const at of [2, 5, 9]) {
      model.setParameters(original);
      const swapped = await tirRollout(model, tok, prompts, {
        ...opts,
        tool: tool(),
        policy: swapAt(at, () => original),
      });
      t.deepEqual(ids(swapped), ids(plain), `swap at boundary ${at}`);
      t.deepEqual(
        swapped.samples.map((s) => s.text),
        plain.samples.map((s) => s.text),
      );
      // every sequence was still running at the swap: its tokens span versions 0 and 1
      t.true(swapped.samples.some((s) => s.policyVersions![0] === 0 && s.policyVersions![1] === 1));
    }
  },
);

test.serial(
  "after a swap to new weights a sequence continues under them: its tokens are the old policy's, then the new one's",
  async (t) => {
    const at = 4; // tokens 1..3 are sampled before boundary 4 (the prefill's and two decode steps')
    model.setParameters(original);
    const old = await tirRollout(model, tok, prompts, {
      maxResponseLength: LEN,
      temperature: 0,
      ignoreEos: true,
    });
    model.setParameters(original);
    const mixed = await tirRollout(model, tok, prompts, {
      maxResponseLength: LEN,
      temperature: 0,
      ignoreEos: true,
      policy: swapAt(at, () => perturbed),
    });
    model.setParameters(perturbed);
    const prefixes = old.samples.map((s) => s.responseIds.slice(0, at - 1));
    const continued = await generate(
      model,
      tok,
      prompts.map((p, i) => [...p, ...prefixes[i]!]),
      { maxNewTokens: LEN - (at - 1), temperature: 0, ignoreEos: true },
    );
    mixed.samples.forEach((s, i) => {
      t.deepEqual(s.responseIds, [...prefixes[i]!, ...continued[i]!.tokenIds], `row ${i}`);
      t.deepEqual(s.policyVersions, [0, 1]);
    });
    t.notDeepEqual(ids(mixed), ids(old), "the new weights write other tokens");
    model.setParameters(original);
  },
);

test.serial(
  "finished samples stream out before the rollout resolves; rows that never saw a swap keep one version",
  async (t) => {
    model.setParameters(original);
    const seen: number[] = [];
    let resolved = false;
    const out = tirRollout(model, tok, prompts, {
      maxResponseLength: 6,
      temperature: 0,
      ignoreEos: true,
      maxBatchSize: 1,
      logprobs: true,
      policy: { version: () => 7, boundary: async () => false },
      onSample: (s) => {
        if (!resolved) seen.push(s.index);
      },
    }).then((r) => {
      resolved = true;
      return r;
    });
    const r = await out;
    t.deepEqual(seen, [0, 1, 2, 3]);
    for (const s of r.samples) {
      t.deepEqual(s.policyVersions, [7, 7]);
      t.is(s.logprobs!.length, s.responseIds.length);
      t.true(s.logprobs!.every((l) => Number.isFinite(l) && l <= 0));
    }
  },
);

test.serial(
  "an abort stops the rollout at the next token boundary and releases the tool's instances",
  async (t) => {
    model.setParameters(original);
    const ctl = new AbortController();
    const tool = new LengthTool("e");
    let boundaries = 0;
    const err = await t.throwsAsync(
      tirRollout(model, tok, prompts, {
        tool,
        maxResponseLength: 200,
        temperature: 0.8,
        seed: 3,
        policy: {
          version: () => 0,
          boundary: async () => {
            if (++boundaries === 6) ctl.abort(new Error("stop here"));
            return false;
          },
        },
        signal: ctl.signal,
      }),
    );
    t.is(err?.message, "stop here");
    t.is(boundaries, 6);
    t.is(tool.released, tool.created);
  },
);

test.serial("a weight update reaches a rollout whose sequences all wait for a tool", async (t) => {
  model.setParameters(original);
  const e = tok.encode("e")[0]!;
  let release!: () => void;
  let calledTool!: () => void;
  const toolCalled = new Promise<void>((r) => {
    calledTool = r;
  });
  const tool = new LengthTool("e");
  tool.executeBatch = async (items) => {
    calledTool();
    await new Promise<void>((r) => {
      release = r;
    });
    return items.map(() => ({ observation: "0", text: "[[0]]", success: true }));
  };
  const gate = new WeightSwapGate(true, "");
  const rollout = gate.exclusive((policy) =>
    tirRollout(model, tok, [prompts[0]!], {
      tool,
      maxResponseLength: 12,
      temperature: 0,
      ignoreEos: true,
      policy,
      // the second token is the tool's trigger: the only sequence stops for a call at once
      logitsProcessor: (_i, response, logits) => {
        if (response.length === 1) logits[e] = 1e9;
      },
    }),
  );
  await toolCalled;
  // let the engine finish its step and park in its wait for the tool
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  let applied = false;
  await gate.swap(() => {
    applied = true;
  }, 1);
  t.true(applied, "the update went in while the call was still running");
  release();
  const { samples } = await rollout;
  t.is(samples[0]!.numToolCalls, 1);
  // the tokens before the call were sampled by version 0, those after it by version 1
  t.deepEqual(samples[0]!.policyVersions, [0, 1]);
});

test("WeightSwapGate: at once when idle; at a token boundary with partial rollouts; after the generation without", async (t) => {
  const log: string[] = [];
  const partial = new WeightSwapGate(true, "");
  await partial.swap(() => log.push("a"), 1);
  t.is(partial.version, 1);
  await partial.exclusive(async (src) => {
    const landed = partial.swap(() => log.push("b"), 2);
    t.is(src.version(), 1);
    t.true(await src.boundary());
    t.is(src.version(), 2);
    await landed;
    t.false(await src.boundary());
  });
  t.deepEqual(log, ["a", "b"]);

  const whole = new WeightSwapGate(false, "");
  let landed: Promise<void> | undefined;
  await whole.exclusive(async (src) => {
    landed = whole.swap(() => log.push("c"), 1);
    t.false(await src.boundary());
    t.is(src.version(), 0, "the generation finishes under the old weights");
  });
  await landed;
  t.is(whole.version, 1);
  t.deepEqual(log, ["a", "b", "c"]);
});

test("WeightSwapGate's test hold waits at its boundary for the weights, or for an abort", async (t) => {
  const gate = new WeightSwapGate(true, "1:2");
  const ctl = new AbortController();
  let reached = false;
  const gen = gate.exclusive(async (src) => {
    await src.boundary();
    reached = true;
    return src.boundary();
  }, ctl.signal);
  await new Promise((r) => setImmediate(r));
  t.true(reached);
  await gate.swap(() => {}, 4);
  t.true(await gen);
  t.is(gate.version, 4);
  // the second generation is not held; a held one ends when aborted
  const held = new WeightSwapGate(true, "1:1");
  const stopped = held.exclusive((src) => src.boundary(), ctl.signal);
  ctl.abort();
  t.false(await stopped);
  t.throws(() => new WeightSwapGate(true, "soon"), { message: /TORL_TEST_HOLD_FOR_WEIGHTS/ });
});
