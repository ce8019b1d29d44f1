/**
 * FSDP per layer with bf16 weights read from their bits: the LM head's gradient kept as its factors and
 * each rank's piece computed from every rank's factors (workers/outer-gradient.ts) trains as the
 * whole-model tape does on one rank.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { buildByteBpeTokenizer, createRandomPretrained } from "../../src/models/index.js";
import { layoutForMiniBatches } from "../../src/workers/index.js";
import { TINY_TEST_ARCH } from "../models/tiny-config.js";
import { actorGroup, releaseLeftGroups, responseBatch } from "./helpers.js";

const B = 8;
const P = 5;
const R = 6;
// wide enough that a mini-batch's head factors (positions x (vocab + hidden)) are smaller than the matrix
const HIDDEN = 512;

const modelDir = mkdtempSync(join(tmpdir(), "torl-head-factors-"));
createRandomPretrained(
  modelDir,
  buildByteBpeTokenizer(),
  { ...TINY_TEST_ARCH, hiddenSize: HIDDEN, intermediateSize: 128 },
  { seed: 3, std: 0.05 },
);

function config(extra: string[]) {
  return loadTrainerConfig({
    overrides: ["actor_rollout_ref.model.dtype=bfloat16", ...extra],
    values: {
      data: { train_batch_size: 4, max_prompt_length: P, max_response_length: R },
      actor_rollout_ref: {
        model: { path: modelDir },
        actor: {
          ppo_mini_batch_size: 2, // x n = 4 rows: two optimizer steps per update
          ppo_micro_batch_size_per_gpu: 1,
          grad_clip: 1.0,
          optim: { lr: 1e-2 },
        },
        rollout: { n: 2 },
      },
      trainer: { n_gpus_per_node: 1 },
    },
  });
}

const batch = () =>
  responseBatch({
    B,
    P,
    R,
    promptLen: (b) => 2 + (b % 3),
    responseLen: (b) => 1 + ((b * 5) % R),
    token: (b, t) => 97 + ((b * 11 + t * 5) % 26),
    valueKey: "advantages",
    rowValue: (b) => (b % 2 === 0 ? 1 : -0.5),
  });

test.before(async () => {
  await init({ numCpus: 3 });
});
// a failed test's groups go, so the next tests get their CPUs
test.afterEach.always(releaseLeftGroups);
test.after.always(async () => {
  await shutdown();
  rmSync(modelDir, { recursive: true, force: true });
});

test("the head's gradient as factors over 2 ranks trains as one rank's whole-model tape", async (t) => {
  const groups = await Promise.all([
    actorGroup("factors-tape", 1, config([])),
    actorGroup(
      "factors-per-layer",
      2,
      config(["actor_rollout_ref.model.enable_gradient_checkpointing=true"]),
    ),
  ]);
  const results = [];
  for (const g of groups) {
    await g.initModel();
    const norms: number[] = [];
    for (let step = 0; step < 2; step++) {
      const data = batch();
      data.union(await g.computeLogProb(data));
      const out = (await g.updateActor(layoutForMiniBatches(data, g.worldSize, 4))) as Record<
        string,
        number
      >[];
      norms.push(out[0]!["actor/grad_norm"]!);
    }
    results.push({ norms, params: ((await g.gatheredParameters()) as Float32Array[])[0]! });
  }
  const [tape, layerwise] = results;
  for (const [k, n] of tape!.norms.entries())
    t.true(
      Math.abs(layerwise!.norms[k]! - n) <= 1e-4 * n,
      `step ${k}: gradient norm ${layerwise!.norms[k]} per layer, ${n} with the tape`,
    );
  // the weights come back in bf16: a sum in another order may round a value to the neighbouring bf16 value
  let apart = 0;
  let beyondUlp = 0;
  for (let i = 0; i < tape!.params.length; i++) {
    const d = Math.abs(layerwise!.params[i]! - tape!.params[i]!);
    if (d > 0) apart++;
    // Adam steps parameters whose gradients are near zero by up to lr either way: a sum in another
    // order (the tape's against the layers') moves those by a fraction of lr
    if (d > Math.abs(tape!.params[i]!) * 2 ** -7 + 1e-4) beyondUlp++;
  }
  t.log(`${beyondUlp} parameters more than one bf16 step (and 1% of lr) from the tape's`);
  t.true(
    beyondUlp < tape!.params.length / 10_000,
    "all but a few in 10,000 within one bf16 step (or 1% of lr)",
  );
  t.true(
    apart < tape!.params.length / 20,
    `${apart} of ${tape!.params.length} parameters one bf16 step apart`,
  );
  for (const g of groups) await g.release();
});
