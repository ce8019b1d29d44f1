/** Shared setup for the worker and trainer tests: a tiny random model directory and configs. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildByteBpeTokenizer, createRandomPretrained } from "../../src/models/index.js";
import { TINY_TEST_ARCH } from "../models/tiny-config.js";

export const WORKER_MODULE = new URL("../../src/workers/actor-rollout-ref.ts", import.meta.url).href;

/** A byte-level tokenizer (259 tokens) and a random 2-layer Qwen2 model with hidden size 32, saved. */
export function tinyModelDir(seed = 7): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-tiny-model-"));
  const tok = buildByteBpeTokenizer();
  createRandomPretrained(dir, tok, TINY_TEST_ARCH, { seed, std: 0.1 });
  return dir;
}
