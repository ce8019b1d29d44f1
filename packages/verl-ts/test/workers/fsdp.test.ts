import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import type { DataProto } from "../../src/protocol/index.js";
import { layoutForMiniBatches, type ShardInfo } from "../../src/workers/index.js";
import { type ActorGroup, actorGroup, releaseLeftGroups, responseBatch, tinyModelDir } from "./helpers.js";

// FSDP equivalence: the same global batch gives the same parameters on 1, 2 and 4 ranks, with
// token-budget micro-batches (use_dynamic_bsz) instead of fixed ones, and with gradient checkpointing
// (which trains layer by layer: each layer's parameters gathered, its gradient reduce-scattered).

const B = 16; // rows = train_batch_size 8 x n 2
const P = 5;
const R = 6;

function config(modelPath: string, extra: string[] = []) {
  return loadTrainerConfig({
    overrides: extra,
    values: {
      data: { train_batch_size: 8, max_prompt_length: P, max_response_length: R },
      actor_rollout_ref: {
        model: { path: modelPath },
        actor: {
          ppo_mini_batch_size: 4, // x n = 8 rows: two mini-batches per step
          ppo_micro_batch_size_per_gpu: 1,
          grad_clip: 0.5,
          entropy_coeff: 0.01,
          use_kl_loss: true,
          kl_loss_coef: 0.1,
          optim: { lr: 3e-3, weight_decay: 0.1, lr_warmup_steps: 1, warmup_style: "constant" },
        },
        rollout: { n: 2, temperature: 1.0 },
      },
      algorithm: { adv_estimator: "grpo" },
      trainer: { n_gpus_per_node: 1 },
    },
  });
}

/** Prompts left-padded, responses right-padded with very different lengths per row (so per-rank
 * token counts differ and a per-rank mean would not equal the global token mean). */
function batch(): DataProto {
  let s = 12345;
  const rnd = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  const advantage = Array.from({ length: B }, () => rnd() * 2 - 1);
  return responseBatch({
    B,
    P,
    R,
    promptLen: (b) => 2 + (b % 4),
    responseLen: (b) => (b % 3 === 0 ? R : 1 + (b % R)),
    token: () => 97 + Math.floor(rnd() * 26),
    valueKey: "advantages",
    rowValue: (b) => advantage[b]!,
  });
}

type Group = ActorGroup;

const group = (n: number, cfg: ReturnType<typeof config>, name = `fsdp${n}`) => actorGroup(name, n, cfg);

test.before(async () => {
  await init({ numCpus: 11 }); // one per worker: groups of 1, 2, 4, 2 and 2 ranks
});
// a failed test's groups go, so the next tests get their CPUs
test.afterEach.always(releaseLeftGroups);
test.after.always(async () => {
  await shutdown();
});

/** Two PPO steps (old log-probs from the current actor, ref log-probs, update) on the same batch. */
async function train(wg: Group, cfg: ReturnType<typeof config>) {
  const metrics: Record<string, number>[] = [];
  for (let step = 0; step < 2; step++) {
    const data = batch();
    data.union(await wg.computeLogProb(data));
    data.union(await wg.computeRefLogProb(data));
    const rows = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n;
    const out = (await wg.updateActor(layoutForMiniBatches(data, wg.worldSize, rows))) as Record<
      string,
      number
    >[];
    metrics.push(out[0]!);
    // every rank reports the same (all-reduced) metrics
    for (const m of out) if (JSON.stringify(m) !== JSON.stringify(out[0])) throw new Error("ranks disagree");
  }
  return { params: (await wg.gatheredParameters())[0]!, metrics };
}

test("N=2 and N=4 ranks give the same parameters and metrics as N=1; optimizer state per rank is 1/N", async (t) => {
  const dir = tinyModelDir();
  const cfg = config(dir);
  const t0 = Date.now();
  // dynamic: rows sorted by length and packed into <= 20 tokens; the two ranks then get 3 and 2
  // micro-batches in the first mini-batch, so rank 1 runs an empty round of the per-layer collectives
  // (with checkpointing: FSDP per decoder layer; the other groups tape the whole model)
  const dynamicCfg = config(dir, [
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=24",
  ]);
  const checkpointedCfg = config(dir, ["actor_rollout_ref.model.enable_gradient_checkpointing=true"]);
  const groups = await Promise.all([
    ...[1, 2, 4].map((n) => group(n, cfg)),
    group(2, dynamicCfg, "fsdp2-dynamic"),
    group(2, checkpointedCfg, "fsdp2-checkpointed"),
  ]);
  const t1 = Date.now();
  const infos = (await Promise.all(groups.map((g) => g.initModel()))) as ShardInfo[][];
  const t2 = Date.now();
  const before = (await groups[0]!.gatheredParameters())[0]!;
  const results = [];
  const cfgs = [cfg, cfg, cfg, dynamicCfg, checkpointedCfg];
  for (const [i, g] of groups.entries()) results.push(await train(g, cfgs[i]!));
  const [one, two, four, dynamic, checkpointed] = results;
  t.log(`spawn ${t1 - t0} ms, initModel ${t2 - t1} ms, train ${Date.now() - t2} ms`);
  let moved = 0;
  for (let i = 0; i < before.length; i++) moved = Math.max(moved, Math.abs(one!.params[i]! - before[i]!));
  t.true(moved > 1e-3, `training moved the parameters (max |delta| ${moved})`);
  for (const [name, r] of [
    ["N=2", two],
    ["N=4", four],
    ["N=2, dynamic micro-batches, per-layer FSDP (checkpointing)", dynamic],
    ["N=2, per-layer FSDP (checkpointing)", checkpointed],
  ] as const) {
    let maxDiff = 0;
    for (let i = 0; i < before.length; i++)
      maxDiff = Math.max(maxDiff, Math.abs(r!.params[i]! - one!.params[i]!));
    t.log(
      `${name}: max |param - param(N=1)| = ${maxDiff.toExponential(2)} (max update ${moved.toExponential(2)})`,
    );
    t.true(maxDiff < 2e-5, `${name} parameters match N=1 (max diff ${maxDiff})`);
    for (const [k, v] of Object.entries(one!.metrics[1]!)) {
      t.true(
        Math.abs(r!.metrics[1]![k]! - v) <= 1e-4 * Math.max(1, Math.abs(v)),
        `${name} ${k}: ${r!.metrics[1]![k]} vs ${v}`,
      );
    }
  }
  // step 0 had lr 0 (one warmup step), step 1 the full lr
  t.is(one!.metrics[0]!["actor/lr"], 0);
  t.is(one!.metrics[1]!["actor/lr"], 3e-3);
  t.true(one!.metrics[1]!["actor/grad_norm"]! > 0);
  t.true("actor/kl_loss" in one!.metrics[1]! && "actor/pg_clipfrac" in one!.metrics[1]!);

  const total = infos[0]![0]!.numParameters;
  for (const per of infos) {
    const n = per.length;
    t.is(
      per.reduce((a, i) => a + i.shardElements, 0),
      total,
      "shards cover every parameter once",
    );
    for (const i of per) {
      t.true(
        // sharded per unit (each decoder layer, and the parameters around the 2 layers: 4 units), a rank's
        // share of each unit is within one element of 1/N
        Math.abs(i.optimizerBytes - (8 * total) / n) <= 8 * 4,
        `rank ${i.rank}/${n}: ${i.optimizerBytes} bytes`,
      );
    }
    t.log(
      `N=${n}: parameters ${total}, optimizer state per rank ${per.map((i) => i.optimizerBytes).join("/")} bytes, param shard ${per[0]!.paramShardBytes} bytes`,
    );
  }
  for (const g of groups) await g.shutdown();
});
