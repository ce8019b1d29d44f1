/**
 * Timing helpers the model benchmarks share: `pnpm torl bench model` here and a recipe's own (the ToRL
 * recipe's `bench peer`). Reached through `@torl-ts/verl/timing`, not the package's root: they measure,
 * they are not part of training.
 */
import { KVCache } from "./kv-cache.js";
import type { Qwen2Model } from "./qwen2.js";
import type { TokenBatch } from "./token-batch.js";

/** A seeded batch of token ids (a linear congruential sequence mod the vocabulary), all unmasked. */
export function randomBatch(B: number, L: number, V: number, seed: number): TokenBatch {
  const ids = new Int32Array(B * L);
  let s = seed;
  for (let i = 0; i < ids.length; i++) {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    ids[i] = s % V;
  }
  return { ids, mask: new Uint8Array(B * L).fill(1), batch: B, length: L };
}

/** Milliseconds of process CPU time (all threads) since the process started. */
export function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/**
 * Decode step time divided by the batch, after a prefill of `ctx` tokens and one warm-up step: wall
 * clock and process CPU time (the latter is steadier on a machine shared with other jobs).
 */
export async function decodeTiming(
  model: Qwen2Model,
  B: number,
  ctx: number,
  steps: number,
): Promise<{ wallMs: number; cpuMs: number }> {
  const prompt = randomBatch(B, ctx, model.config.vocabSize, 7);
  const cache = new KVCache(model.config, B);
  const lmHead = model.lmHead(true);
  try {
    (await model.prefill(prompt, cache)).dispose();
    const tok = new Int32Array(B).fill(1);
    (await model.decodeStep(tok, cache, lmHead)).dispose();
    const t0 = performance.now();
    const c0 = cpuMs();
    for (let i = 0; i < steps; i++) {
      const logits = await model.decodeStep(tok, cache, lmHead);
      await logits.data();
      logits.dispose();
    }
    return { wallMs: (performance.now() - t0) / steps / B, cpuMs: (cpuMs() - c0) / steps / B };
  } finally {
    cache.dispose();
    lmHead.weight.dispose();
  }
}

/** Decode step time divided by the batch, after a prefill of `ctx` tokens. */
export async function decodeMsPerToken(
  model: Qwen2Model,
  B: number,
  ctx: number,
  steps: number,
): Promise<number> {
  return (await decodeTiming(model, B, ctx, steps)).wallMs;
}
