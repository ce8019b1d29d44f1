/**
 * The shapes `bench scale --arch` offers: each parameter count is the published one, each config.json
 * round-trips, and a probe of Llama-3.2-1B's vocabulary (128256, smaller than the Qwen tokenizer's) reads
 * only ids of its own; the probe itself (2 FSDP ranks: load, generate, one GRPO step updated layer by
 * layer) runs on each architecture at a tiny width. The real-size runs are benchmarks, not tests.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "@torl-ts/core";
import test from "ava";
import { benchScaleCommand, memoryLine, runScaleProbe, scaleConfig } from "../../src/bench/scale.js";
import {
  bundledQwenTokenizerDir,
  countParameters,
  generate,
  LLAMA_3_2_1B_SHAPES,
  loadModel,
  loadTokenizer,
  makeQwen2Config,
  parseHfConfig,
  SCALE_SHAPES,
  scaleTokenizer,
  selectBackend,
  toHfConfig,
  writeRandomModelDir,
} from "../../src/index.js";

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("Qwen2.5-0.5B, Qwen3-0.6B and Llama-3.2-1B shapes: the published parameter counts; config.json round-trips", (t) => {
  t.is(countParameters(SCALE_SHAPES["qwen2.5-0.5b"]), 494_032_768);
  t.is(countParameters(SCALE_SHAPES["qwen3-0.6b"]), 596_049_920);
  t.is(countParameters(SCALE_SHAPES["llama-3.2-1b"]), 1_235_814_400);
  for (const c of Object.values(SCALE_SHAPES)) t.deepEqual(parseHfConfig(toHfConfig(c)), c);
});

test("a Llama-3.2-1B-vocabulary probe pads and generates with ids inside the model's vocabulary", async (t) => {
  const qwen = loadTokenizer(bundledQwenTokenizerDir());
  t.true(qwen.padTokenId >= LLAMA_3_2_1B_SHAPES.vocabSize, "Qwen's pad id lies past Llama's vocabulary");
  t.is(scaleTokenizer(SCALE_SHAPES["qwen3-0.6b"], qwen), qwen);
  const tokenizer = scaleTokenizer(LLAMA_3_2_1B_SHAPES, qwen);
  t.is(tokenizer.padTokenId, 0);
  // Llama-3.2-1B's vocabulary and rotary scaling on a tiny width and depth
  const config = makeQwen2Config({
    ...LLAMA_3_2_1B_SHAPES,
    hiddenSize: 16,
    numHiddenLayers: 1,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    headDim: 4,
    intermediateSize: 32,
  });
  const dir = mkdtempSync(join(tmpdir(), "torl-scale-llama-"));
  try {
    writeRandomModelDir(dir, config, tokenizer);
    const model = loadModel(dir, { dtype: "auto" });
    const reloaded = loadTokenizer(dir);
    t.is(reloaded.padTokenId, 0, "the saved tokenizer_config.json keeps the padding");
    const prompts = ["Sum 1..100?", "Solve x^2 - 5x + 6 = 0."].map((s) => reloaded.encode(s));
    t.true(prompts.flat().every((id) => id < config.vocabSize));
    const out = await generate(model, reloaded, prompts, {
      maxNewTokens: 4,
      temperature: 0,
      ignoreEos: true,
    });
    t.true(out.every((o) => o.tokenIds.length === 4 && o.tokenIds.every((id) => id < config.vocabSize)));
    model.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("bench scale --arch names the shapes it offers", async (t) => {
  await t.throwsAsync(() => Promise.resolve(benchScaleCommand.run(["--arch", "gpt2"])), {
    instanceOf: UsageError,
    message: /--arch must be one of qwen2\.5-0\.5b, qwen3-0\.6b, llama-3\.2-1b; got 'gpt2'/,
  });
});

test("bench scale --layers keeps every shape but the layer count, and refuses a count below 1", async (t) => {
  const two = scaleConfig({ layers: 2 });
  t.deepEqual(two, { ...SCALE_SHAPES["qwen2.5-0.5b"], numHiddenLayers: 2 });
  t.is(scaleConfig({}), SCALE_SHAPES["qwen2.5-0.5b"]);
  t.is(scaleConfig({ arch: "qwen3-0.6b", layers: 3 }).vocabSize, 151936);
  await t.throwsAsync(() => Promise.resolve(benchScaleCommand.run(["--layers", "0"])), {
    instanceOf: UsageError,
    message: /--layers must be an integer >= 1, got '0'/,
  });
});

test.serial(
  "the probe runs Qwen3 and Llama 3 (tiny widths of their shapes) on 2 FSDP ranks: generation and a GRPO step that trains",
  async (t) => {
    t.timeout(600_000);
    const qwen = loadTokenizer(bundledQwenTokenizerDir());
    for (const name of ["qwen3-0.6b", "llama-3.2-1b"] as const) {
      const config = makeQwen2Config({
        ...SCALE_SHAPES[name],
        hiddenSize: 16,
        numHiddenLayers: 2,
        numAttentionHeads: 4,
        numKeyValueHeads: 2,
        headDim: 8,
        intermediateSize: 32,
      });
      const result = await runScaleProbe({ config, tokenizer: scaleTokenizer(config, qwen), ranks: 2 });
      t.is(result.failed, undefined, `${name}: ${JSON.stringify(result.failed)}`);
      // what the PyTorch side of `pnpm torl bench scale` is sized from
      t.like(result, { layers: 2, rows: 4, response_length: 16 });
      t.true(result.prompt_length! > 0);
      t.true(
        result.update_metrics!["actor/grad_norm"]! > 0,
        `${name}: ${JSON.stringify(result.update_metrics)}`,
      );
      // where a rank's memory goes: the update's float32 gradient shard and the embedding's whole gradient
      // (FSDP per layer: the probe checkpoints its layers)
      const embedding = config.vocabSize * config.hiddenSize * 4;
      for (const m of result.memory.update_actor!) {
        t.true(
          m.updateBufferBytes >= (result.parameters / 2) * 4 * 0.99 + embedding,
          `${name} rank ${m.rank}: update buffers ${m.updateBufferBytes}`,
        );
        t.true(m.updateBufferBytes < result.parameters * 4 + embedding * 2);
        t.regex(memoryLine(m), /the update's gradient buffers \d+\.\d\d/);
      }
    }
  },
);
