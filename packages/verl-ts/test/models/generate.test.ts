import { spawnSync } from "node:child_process";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  buildByteBpeTokenizer,
  generate,
  KVCache,
  padBatch,
  Qwen2Model,
  RaggedKVCache,
  selectBackend,
} from "../../src/index.js";
import { sample } from "../../src/models/generate.js";
import { mulberry32 } from "../../src/random.js";
import { TINY_TEST_ARCH, tinyTestConfig } from "./tiny-config.js";

const tok = buildByteBpeTokenizer();
let model: Qwen2Model;

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  const cfg = tinyTestConfig(tok.vocabSize);
  model = Qwen2Model.random(cfg, { seed: 11, std: 0.6 });
});

function greedyByFullForward(prompt: number[], n: number): number[] {
  const seq = [...prompt];
  for (let i = 0; i < n; i++) {
    const l = tf.tidy(() => tf.argMax(model.forward(padBatch([seq]), { lastOnly: true }), -1));
    seq.push(l.dataSync()[0]!);
    l.dispose();
  }
  return seq.slice(prompt.length);
}

test("batched KV-cache greedy decoding equals step-by-step full forwards, with left padding and cache growth", async (t) => {
  const prompts = [tok.encode("hi"), tok.encode("a much longer prompt here, 1+2=3"), tok.encode("x")];
  const outs = await generate(model, tok, prompts, { maxNewTokens: 70, temperature: 0, ignoreEos: true });
  for (let i = 0; i < prompts.length; i++) {
    t.deepEqual(outs[i]!.tokenIds, greedyByFullForward(prompts[i]!, 70));
    t.is(outs[i]!.finishReason, "length");
    t.is(outs[i]!.stopReason, null);
  }
});

test("seeded sampling is reproducible; different seeds differ; top_k=1 is greedy", async (t) => {
  const prompts = [tok.encode("abc"), tok.encode("def")];
  const p = { maxNewTokens: 20, temperature: 1, topP: 0.95, topK: 40, seed: 5, ignoreEos: true };
  const a = await generate(model, tok, prompts, p);
  const b = await generate(model, tok, prompts, p);
  const c = await generate(model, tok, prompts, { ...p, seed: 6 });
  t.deepEqual(a, b);
  t.notDeepEqual(
    a.map((o) => o.tokenIds),
    c.map((o) => o.tokenIds),
  );
  const k1 = await generate(model, tok, prompts, { ...p, topK: 1 });
  const g = await generate(model, tok, prompts, { maxNewTokens: 20, temperature: 0, ignoreEos: true });
  t.deepEqual(
    k1.map((o) => o.tokenIds),
    g.map((o) => o.tokenIds),
  );
});

test("stop strings match across token boundaries, are cut from the text and reported like vLLM", async (t) => {
  const prompt = tok.encode("q");
  const [free] = await generate(model, tok, [prompt], { maxNewTokens: 30, temperature: 0, ignoreEos: true });
  const text = free!.text;
  // a stop string spanning two generated tokens (the byte tokenizer has one token per byte)
  const stop = text.slice(5, 8);
  const [o] = await generate(model, tok, [prompt], {
    maxNewTokens: 30,
    temperature: 0,
    ignoreEos: true,
    stop: [stop],
  });
  t.is(o!.finishReason, "stop");
  t.is(o!.stopReason, stop);
  t.is(o!.text, text.slice(0, text.indexOf(stop)));
  // token ids run up to and including the token that completed the stop string
  t.deepEqual(o!.tokenIds, free!.tokenIds.slice(0, o!.tokenIds.length));
  t.true(tok.decode(o!.tokenIds).includes(stop));
  t.false(tok.decode(o!.tokenIds.slice(0, -1)).includes(stop));
  const [inc] = await generate(model, tok, [prompt], {
    maxNewTokens: 30,
    temperature: 0,
    ignoreEos: true,
    stop: [stop],
    includeStopStrInOutput: true,
  });
  t.true(inc!.text.endsWith(stop));
});

test("EOS stops with stop_reason = its id; continuing from prompt + partial response matches one long generation", async (t) => {
  const prompt = tok.encode("z");
  const [free] = await generate(model, tok, [prompt], { maxNewTokens: 12, temperature: 0, ignoreEos: true });
  const eos = free!.tokenIds[4]!;
  const [o] = await generate(model, tok, [prompt], { maxNewTokens: 12, temperature: 0, eosTokenId: eos });
  t.is(o!.finishReason, "stop");
  t.is(o!.stopReason, eos);
  t.deepEqual(o!.tokenIds, free!.tokenIds.slice(0, free!.tokenIds.indexOf(eos) + 1));
  const head = free!.tokenIds.slice(0, 5);
  const [rest] = await generate(model, tok, [[...prompt, ...head]], {
    maxNewTokens: 7,
    temperature: 0,
    ignoreEos: true,
  });
  t.deepEqual([...head, ...rest!.tokenIds], free!.tokenIds);
});

test.serial(
  "rows finishing early are dropped from the batch without changing the others; no tensors leak",
  async (t) => {
    const prompts = [tok.encode("a"), tok.encode("bb"), tok.encode("ccc"), tok.encode("dddd")];
    const before = tf.memory().numTensors;
    const full = await generate(model, tok, prompts, { maxNewTokens: 16, temperature: 0, ignoreEos: true });
    const mixed = await generate(model, tok, prompts, {
      maxNewTokens: 16,
      temperature: 0,
      stopTokenIds: [full[0]!.tokenIds[1]!, full[1]!.tokenIds[2]!],
    });
    for (let i = 0; i < 4; i++) {
      const n = mixed[i]!.tokenIds.length;
      t.deepEqual(mixed[i]!.tokenIds, full[i]!.tokenIds.slice(0, n));
    }
    t.true(mixed[0]!.tokenIds.length <= 2);
    t.is(tf.memory().numTensors, before);
  },
);

test("the host-mirror KV cache (backends without in-place writes) gives the same logits as the in-place one", async (t) => {
  const batch = padBatch([tok.encode("mirror"), tok.encode("in place!")], "left");
  const run = async (mode: "auto" | "mirror") => {
    const cache = new KVCache(model.config, 2, 8, mode);
    const head = model.lmHead();
    const outs: Float32Array[] = [(await model.prefill(batch, cache)).dataSync() as Float32Array];
    for (let i = 0; i < 12; i++) {
      const l = await model.decodeStep(Int32Array.from([i + 3, i + 5]), cache, head);
      outs.push(l.dataSync() as Float32Array);
      l.dispose();
    }
    t.is(cache.inPlace, mode === "auto");
    cache.dispose();
    head.weight.dispose();
    return outs;
  };
  const a = await run("auto");
  const b = await run("mirror");
  // With the OpenBLAS addon the in-place cache's step runs the native attention kernel and the mirror's
  // the op-by-op one: equal up to float summation order (as decode against full forwards).
  for (let i = 0; i < a.length; i++)
    for (let j = 0; j < a[i]!.length; j++) t.true(Math.abs(a[i]![j]! - b[i]![j]!) < 1e-4);
});

test("the rollout's ragged cache stores as the batch cache does: rows of one length decode to the same logits, bit for bit, through growth and compaction", async (t) => {
  const batch = padBatch([tok.encode("same"), tok.encode("size"), tok.encode("rows")], "left");
  const run = async (cache: KVCache) => {
    const head = model.lmHead();
    const outs: number[] = [...(await model.prefill(batch, cache)).dataSync()];
    for (let i = 0; i < 10; i++) {
      if (i === 6) cache.keepRows([2, 0]);
      const l = await model.decodeStep(
        Int32Array.from([i + 3, i + 5, i + 7].slice(0, cache.batch)),
        cache,
        head,
      );
      outs.push(...l.dataSync());
      l.dispose();
    }
    t.true(cache.capacity > 4, "grown past its first chunk");
    cache.dispose();
    head.weight.dispose();
    return outs;
  };
  t.deepEqual(await run(new RaggedKVCache(model.config, 3, 4)), await run(new KVCache(model.config, 3, 4)));
});

test("the cpu backend's in-place cache generates what wasm generates", async (t) => {
  const prompts = [tok.encode("cpu"), tok.encode("backend test")];
  const code = `import { buildByteBpeTokenizer, generate, makeQwen2Config, Qwen2Model, selectBackend } from "./src/index.ts";
    await selectBackend({ log: null });
    const tok = buildByteBpeTokenizer();
    const cfg = makeQwen2Config({ vocabSize: tok.vocabSize, ...${JSON.stringify(TINY_TEST_ARCH)} });
    const model = Qwen2Model.random(cfg, { seed: 11, std: 0.6 });
    const out = await generate(model, tok, ${JSON.stringify(prompts)}, { maxNewTokens: 70, temperature: 0, ignoreEos: true });
    console.log(JSON.stringify(out.map((o) => o.tokenIds)));`;
  const r = spawnSync(process.execPath, ["--import=tsx", "--input-type=module", "-e", code], {
    cwd: join(import.meta.dirname, "..", ".."),
    env: { ...process.env, TORL_BACKEND: "cpu" },
    encoding: "utf8",
  });
  t.is(r.status, 0, r.stderr);
  const cpu = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  const wasm = (
    await generate(model, tok, prompts, { maxNewTokens: 70, temperature: 0, ignoreEos: true })
  ).map((o) => o.tokenIds);
  t.deepEqual(cpu, wasm);
});

test("decode-step logits equal full-forward logits within 1e-4 at every step", async (t) => {
  const rows = [tok.encode("abc"), tok.encode("longer row")];
  const batch = padBatch(rows, "left");
  const cache = new KVCache(model.config, 2, 4);
  const head = model.lmHead();
  const seqs = rows.map((r) => [...r]);
  let logits = await model.prefill(batch, cache);
  for (let step = 0; step < 6; step++) {
    const got = logits.dataSync();
    logits.dispose();
    const want = tf.tidy(() => model.forward(padBatch(seqs, "left"), { lastOnly: true })).dataSync();
    let maxErr = 0;
    for (let i = 0; i < want.length; i++) maxErr = Math.max(maxErr, Math.abs(got[i]! - want[i]!));
    t.true(maxErr < 1e-4, `step ${step}: ${maxErr}`);
    const next = Int32Array.from([7 + step, 40 + step]);
    for (const [i, s] of seqs.entries()) s.push(next[i]!);
    logits = await model.decodeStep(next, cache, head);
  }
  logits.dispose();
  cache.dispose();
  head.weight.dispose();
});

test("generation leaves an untied model's lm_head usable (the head weight handed out is the caller's)", async (t) => {
  const cfg = tinyTestConfig(tok.vocabSize, { numHiddenLayers: 1, tieWordEmbeddings: false });
  const untied = Qwen2Model.random(cfg, { seed: 3, std: 0.6 });
  const params = { maxNewTokens: 5, temperature: 0, ignoreEos: true };
  const first = await generate(untied, tok, [tok.encode("ab")], params);
  const second = await generate(untied, tok, [tok.encode("ab")], params);
  t.deepEqual(second, first);
  const logits = tf.tidy(() => untied.forward(padBatch([tok.encode("ab")]), { lastOnly: true }));
  t.is(logits.shape[1], tok.vocabSize);
  logits.dispose();
});

test("sampling from every token (no top-k, no top-p) draws what the index-array path drew, draw for draw", (t) => {
  // the path before the typed-array draw: probabilities over an index array, summed and walked in order
  const reference = (logits: Float32Array, T: number, rng: () => number): number => {
    let max = Number.NEGATIVE_INFINITY;
    for (const x of logits) if (x > max) max = x;
    const idx = Array.from({ length: logits.length }, (_, i) => i);
    const probs = idx.map((i) => Math.exp((logits[i]! - max) / T));
    const total = probs.reduce((a, b) => a + b, 0);
    let u = rng() * total;
    for (let k = 0; k < probs.length; k++) {
      u -= probs[k]!;
      if (u <= 0) return idx[k]!;
    }
    return idx[probs.length - 1]!;
  };
  const noise = mulberry32(11);
  for (const [V, T] of [
    [7, 1],
    [1000, 0.7],
    [5003, 1.3],
  ] as const) {
    const logits = Float32Array.from({ length: V }, () => 8 * noise() - 4);
    const [mine, theirs] = [mulberry32(V), mulberry32(V)];
    const draws = Array.from({ length: 500 }, () =>
      sample(logits, { maxNewTokens: 1, temperature: T }, mine),
    );
    t.deepEqual(
      draws,
      Array.from({ length: 500 }, () => reference(logits, T, theirs)),
      `V ${V}, temperature ${T}`,
    );
    t.true(new Set(draws).size > 1, "the draws vary");
  }
});
