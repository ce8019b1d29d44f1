// docs/writing-an-algorithm.md's PPO-clip listings, TypeScript and plain JavaScript, run as printed on a
// rollout of the tiny base model; and the guide's answers about the loss pieces, checked.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  aggLossTf,
  type DataProto,
  forwardBackward,
  loadPretrained,
  ppoTokenLossTf,
  type Qwen2Model,
  renderPrompt,
  rolloutTrainingBatch,
  selectBackend,
  tf,
  tirRollout,
} from "@torl-ts/verl";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";
import test from "ava";

const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
const GUIDE = readFileSync(new URL("../../../../docs/writing-an-algorithm.md", import.meta.url), "utf8");

function listing(name: string, lang: string): string {
  const text = new RegExp(`<!-- listing: ${name} -->\\n\`\`\`${lang}\\n([\\s\\S]*?)\`\`\`\\n`).exec(
    GUIDE,
  )?.[1];
  if (!text) throw new Error(`docs/writing-an-algorithm.md has no listing ${name}`);
  return text;
}

type PpoUpdate = (
  model: Qwen2Model,
  reference: Qwen2Model,
  optimizer: tf.Optimizer,
  batch: DataProto,
  advantages: number[],
) => Promise<number[]>;

/** A listing as a module of this package (so `@torl-ts/verl` resolves to it), imported. */
async function load(name: string, lang: string, file: string): Promise<PpoUpdate> {
  const dir = mkdtempSync(join(PACKAGE, ".listing-"));
  try {
    writeFileSync(join(dir, file), listing(name, lang));
    return ((await import(pathToFileURL(join(dir, file)).href)) as { ppoUpdate: PpoUpdate }).ppoUpdate;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test.before(async () => {
  await selectBackend({ log: null });
});

const sum = async (m: Qwen2Model) => {
  let s = 0;
  for (const v of (await m.getParameters()).values()) for (const x of v) s += x;
  return s;
};

test("the guide's PPO-clip listings (TypeScript and JavaScript) train the tiny base the same way", async (t) => {
  const fromTs = await load("ppo-update.ts", "ts", "ppo.ts");
  const fromJs = await load("ppo-update.js", "js", "ppo.js");
  const reference = loadPretrained(TINY_BASE_DIR).model;
  const { model: sampler, tokenizer } = loadPretrained(TINY_BASE_DIR);
  const ids = tokenizer.encode(renderPrompt("tir_base_0309", [{ role: "user", content: "What is 12 * 7?" }]));
  const { samples } = await tirRollout(sampler, tokenizer, [ids, ids, ids, ids], {
    numLlmCallsAvailable: 0,
    maxResponseLength: 16,
    temperature: 1,
    seed: 3,
  });
  const batch = rolloutTrainingBatch(samples, { padTokenId: tokenizer.padTokenId });
  const results = [];
  for (const ppoUpdate of [fromTs, fromJs]) {
    const model = loadPretrained(TINY_BASE_DIR, { trainable: true }).model;
    const before = await sum(model);
    const losses = await ppoUpdate(model, reference, tf.train.adam(1e-3), batch, [1, -1, 0.5, -0.5]);
    t.is(losses.length, 2);
    t.true(losses.every(Number.isFinite));
    t.not(await sum(model), before, "the update changed the weights");
    results.push(losses);
  }
  t.deepEqual(results[0], results[1], "the two listings compute the same losses");
});

test("ppoTokenLossTf's losses are unmasked, aggLossTf masks them, and [B, 1] advantages broadcast like [B, R]", (t) => {
  const old = { data: new Float32Array([-1, -1, -1, -2, -2, -2]), shape: [2, 3] };
  const mask = { data: new Float32Array([1, 1, 0, 1, 0, 0]), shape: [2, 3] };
  const logProb = tf.tensor2d([-0.5, -1, -3, -2, -1, -2], [2, 3]);
  const column = ppoTokenLossTf(old, logProb, tf.tensor2d([1, -1], [2, 1]), mask);
  const full = ppoTokenLossTf(old, logProb, tf.tensor2d([1, 1, 1, -1, -1, -1], [2, 3]), mask);
  const losses = column.losses.arraySync() as number[][];
  t.deepEqual(losses, full.losses.arraySync());
  t.not(losses[1]![2], 0, "a position outside the mask keeps its loss");
  const kept = [losses[0]![0]!, losses[0]![1]!, losses[1]![0]!];
  t.true(
    Math.abs(
      aggLossTf(column.losses, mask, "token-mean").dataSync()[0]! - (kept[0]! + kept[1]! + kept[2]!) / 3,
    ) < 1e-6,
  );
});

test("a synchronous host read inside forwardBackward's loss callback is a constant: no gradient flows through it", async (t) => {
  const { model, tokenizer } = loadPretrained(TINY_BASE_DIR, { trainable: true });
  const ids = Int32Array.from(tokenizer.encode("1 + 1 = 2"));
  const batch = { ids, mask: new Uint8Array(ids.length).fill(1), batch: 1, length: ids.length };
  const plain = await forwardBackward(
    model,
    batch,
    ({ scores }) => tf.mul(tf.sum(scores.logProbs), 2) as tf.Scalar,
  );
  const read = await forwardBackward(model, batch, ({ scores }) => {
    const host = scores.logProbs.dataSync(); // allowed on the CPU backends; stalls a GPU's queue
    return tf.mul(tf.sum(scores.logProbs), 2 + 0 * host[0]!) as tf.Scalar;
  });
  t.is(read.loss, plain.loss);
  for (const [name, g] of plain.grads) t.deepEqual(read.grads.get(name)!.dataSync(), g.dataSync(), name);
});
