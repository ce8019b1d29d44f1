/** The tiny random architecture the model, rollout and worker tests share (hidden 32, 2 layers, GQA 4/2). */
import { makeQwen2Config, type Qwen2Config } from "../../src/models/index.js";

export const TINY_TEST_ARCH = {
  hiddenSize: 32,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 64,
};

export function tinyTestConfig(vocabSize: number, extra: Partial<Qwen2Config> = {}): Qwen2Config {
  return makeQwen2Config({ vocabSize, ...TINY_TEST_ARCH, ...extra });
}

/** The narrower three-layer architecture the gradient tests share (hidden 16, GQA 4/2, vocab 40). */
export function threeLayerTestConfig(extra: Partial<Qwen2Config> = {}): Qwen2Config {
  return makeQwen2Config({
    vocabSize: 40,
    hiddenSize: 16,
    numHiddenLayers: 3,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    intermediateSize: 32,
    ...extra,
  });
}
