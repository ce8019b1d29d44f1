import { fileURLToPath } from "node:url";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import type { DataProto } from "../../src/protocol/index.js";
import { layoutForMiniBatches } from "../../src/workers/index.js";
import { type ActorGroup, actorGroup, releaseLeftGroups, responseBatch, tinyModelDir } from "./helpers.js";

// A policy loss chosen by actor.policy_loss.loss_mode runs in the worker processes, and the metrics the
// worker reports are the ones the loss returns. The user's loss lives in a module outside the package
// (fixtures/custom-loss.ts) that this test process never imports: only external_lib brings it in.

const B = 8;
const P = 4;
const R = 5;
const LIB = fileURLToPath(new URL("./fixtures/custom-loss.ts", import.meta.url));
const advantage = [0.8, -0.5, 1.2, -1, 0.3, -0.2, 0.6, -0.9];
const responseLen = (b: number) => 1 + (b % R);

function config(modelPath: string, lossMode: string, externalLib: string | null) {
  return loadTrainerConfig({
    values: {
      data: { train_batch_size: 4, max_prompt_length: P, max_response_length: R },
      actor_rollout_ref: {
        model: { path: modelPath, external_lib: externalLib },
        actor: {
          ppo_mini_batch_size: 4,
          ppo_micro_batch_size_per_gpu: 2,
          policy_loss: { loss_mode: lossMode },
          optim: { lr: 1e-3 },
        },
        rollout: { n: 2 },
      },
      algorithm: { adv_estimator: "grpo" },
      trainer: { n_gpus_per_node: 1 },
    },
  });
}

function batch(): DataProto {
  return responseBatch({
    B,
    P,
    R,
    promptLen: (b) => 1 + (b % P),
    responseLen,
    token: (b, t) => 97 + ((b * 7 + t * 3) % 26),
    valueKey: "advantages",
    rowValue: (b) => advantage[b]!,
  });
}

type Group = ActorGroup;

const group = (n: number, cfg: ReturnType<typeof config>, name: string) => actorGroup(name, n, cfg);

async function update(wg: Group): Promise<Record<string, number>> {
  const data = batch();
  data.union(await wg.computeLogProb(data));
  const out = (await wg.updateActor(layoutForMiniBatches(data, wg.worldSize, 8))) as Record<string, number>[];
  return out[0]!;
}

test.before(async () => {
  await init({ numCpus: 4 });
});
// a failed test's groups go, so the next tests get their CPUs
test.afterEach.always(releaseLeftGroups);
test.after.always(async () => {
  await shutdown();
});

test("a loss registered in the external_lib module runs on every rank and its own metric is reported", async (t) => {
  const dir = tinyModelDir();
  const [custom, gspo, typo] = await Promise.all([
    group(2, config(dir, "reinforce_fixture", LIB), "ext-loss"),
    group(1, config(dir, "gspo", null), "gspo-loss"),
    group(1, config(dir, "reinforce_fixtur", LIB), "typo-loss"),
  ]);
  try {
    await custom.initModel();
    const m = await update(custom);
    let positive = 0;
    let tokens = 0;
    for (let b = 0; b < B; b++) {
      tokens += responseLen(b);
      if (advantage[b]! > 0) positive += responseLen(b);
    }
    t.true(Math.abs(m["actor/positive_adv_frac"]! - positive / tokens) < 1e-6, JSON.stringify(m));
    t.false("actor/pg_clipfrac" in m, "no PPO metric recomputed on the side");
    t.true(Number.isFinite(m["actor/pg_loss"]) && m["actor/grad_norm"]! > 0);

    await gspo.initModel();
    const g = await update(gspo);
    t.deepEqual(
      Object.keys(g)
        .filter((k) => /clipfrac|ppo_kl/.test(k))
        .sort(),
      ["actor/pg_clipfrac", "actor/ppo_kl"],
    );

    // the module was imported in the worker (its loss is listed), and a wrong name fails at initModel
    await t.throwsAsync(typo.initModel(), {
      message: /unknown policy loss "reinforce_fixtur".*reinforce_fixture/,
    });
  } finally {
    await Promise.all([custom, gspo, typo].map((g) => g.shutdown()));
  }
});
