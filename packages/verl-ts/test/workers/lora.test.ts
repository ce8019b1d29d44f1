/**
 * The actor with LoRA (actor_rollout_ref.model.lora_rank > 0): the adapters are the trained, sharded
 * parameters (gradients, AdamW state, FSDP shards); the base is frozen and sharded at rest in model.dtype;
 * the reference is the base with the adapters switched off; checkpoints hold the adapters and resume on
 * another rank count.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { adapterSpecs, loraConfigOf } from "../../src/models/lora.js";
import { loadModelValues } from "../../src/models/pretrained.js";
import { DataProto } from "../../src/protocol/index.js";
import { layoutForMiniBatches, type ShardInfo, type WorkerMemory } from "../../src/workers/index.js";
import { actorGroup, releaseLeftGroups, seededPrompts, tinyModelDir } from "./helpers.js";

const PROMPTS = 4;
const N = 2;
const P = 5;
const R = 6;
const LORA = [
  "actor_rollout_ref.model.lora_rank=4",
  "actor_rollout_ref.model.lora_alpha=8",
  "actor_rollout_ref.model.target_modules=[q_proj,v_proj,down_proj]",
];

function config(modelPath: string, ranks: number, extra: string[] = []) {
  return loadTrainerConfig({
    overrides: [...LORA, ...extra],
    values: {
      data: { train_batch_size: PROMPTS, max_prompt_length: P, max_response_length: R },
      actor_rollout_ref: {
        model: { path: modelPath },
        actor: {
          ppo_mini_batch_size: 2,
          ppo_micro_batch_size_per_gpu: 1,
          use_kl_loss: true,
          optim: { lr: 5e-2 },
        },
        rollout: { n: N, temperature: 1.0, ignore_eos: true },
      },
      trainer: { n_gpus_per_node: ranks },
    },
  });
}

const prompts = (step: number) => seededPrompts(PROMPTS, N, P, step);

const dirs: string[] = [];
test.before(async () => {
  await init({ numCpus: 8 });
});
// a failed test's groups go, so the next tests get their CPUs
test.afterEach.always(releaseLeftGroups);
test.after.always(async () => {
  await shutdown();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test.serial(
  "LoRA actor: only the adapters are trained and sharded; the reference is the base with the adapters off; checkpoints resume on another rank count",
  async (t) => {
    const dir = tinyModelDir(9);
    dirs.push(dir);
    const { config: mc, values } = loadModelValues(dir);
    const lora = loraConfigOf({
      lora_rank: 4,
      lora_alpha: 8,
      target_modules: ["q_proj", "v_proj", "down_proj"],
    })!;
    const adapterParams = adapterSpecs(mc, lora).reduce((a, s) => a + s.shape[0]! * s.shape[1]!, 0);
    const baseParams = [...values.values()].reduce((a, v) => a + v.length, 0);
    const results: { params: Float32Array; ref: Float32Array[] }[] = [];
    const ckpt = mkdtempSync(join(tmpdir(), "torl-lora-ckpt-"));
    dirs.push(ckpt);
    for (const variant of [[], ["actor_rollout_ref.model.enable_gradient_checkpointing=true"]]) {
      const wg = await actorGroup(`lora-${variant.length}`, 2, config(dir, 2, variant));
      const info = ((await wg.initModel()) as ShardInfo[])[0]!;
      t.is(info.numParameters, baseParams + adapterParams);
      const rest = (await wg.memoryInfo()) as WorkerMemory[];
      for (const m of rest) {
        t.true(m.refIsActorBase);
        t.is(
          m.refWeightBytes + m.refShardBytes + m.actorWeightBytes,
          0,
          "no reference copy, nothing gathered at rest",
        );
        t.is(m.adapterParameters, adapterParams);
      }
      // AdamW state (param + 2 moments, float32) of the adapters only; the base frozen in float32 once over the ranks
      t.is(rest[0]!.actorShardBytes + rest[1]!.actorShardBytes, 12 * adapterParams);
      t.is(rest[0]!.actorBaseShardBytes + rest[1]!.actorBaseShardBytes, 4 * baseParams);
      const ref: Float32Array[] = [];
      for (let step = 0; step < 2; step++) {
        const batch = await wg.generateSequences(prompts(step));
        const lp = await wg.computeLogProb(batch);
        batch.union(lp);
        batch.union(await wg.computeRefLogProb(batch));
        const old = lp.tensor("old_log_probs").data as Float32Array;
        const refLp = batch.tensor("ref_log_prob").data as Float32Array;
        ref.push(refLp);
        // B starts at zero: before any update the adapted model is the base, bit for bit
        if (step === 0) t.deepEqual(refLp, old, "the reference is the actor before any update");
        else t.notDeepEqual(refLp, old, "after an update the actor differs from its base");
        const B = batch.length;
        const adv = new Float32Array(B * R);
        for (let b = 0; b < B; b++) adv.fill(b % 2 === 0 ? 1 : -1, b * R, (b + 1) * R);
        batch.union(DataProto.fromDict({ advantages: { data: adv, shape: [B, R] } }));
        const metrics = (await wg.updateActor(layoutForMiniBatches(batch, 2, 2 * N))) as Record<
          string,
          number
        >[];
        t.true(metrics[0]!["actor/grad_norm"]! > 0);
      }
      const params = ((await wg.gatheredParameters()) as Float32Array[])[0]!;
      t.is(params.length, adapterParams, "the trained parameters are the adapters");
      results.push({ params, ref });
      if (variant.length === 0) await wg.saveCheckpoint(ckpt);
      await wg.release();
    }
    // whole-model tape and FSDP per layer train the same adapters
    const [whole, perLayer] = results as [(typeof results)[0], (typeof results)[0]];
    let maxDiff = 0;
    for (let i = 0; i < whole.params.length; i++)
      maxDiff = Math.max(maxDiff, Math.abs(whole.params[i]! - perLayer.params[i]!));
    t.true(maxDiff < 1e-5, `whole-model vs per-layer adapters differ by ${maxDiff}`);

    // resume the 2-rank checkpoint on 1 rank: the same adapters
    const one = await actorGroup("lora-resume", 1, config(dir, 1));
    await one.initModel();
    const loaded = (await one.loadCheckpoint(ckpt)) as { schedulerStep: number }[];
    t.is(loaded[0]!.schedulerStep, 2);
    t.deepEqual(((await one.gatheredParameters()) as Float32Array[])[0], whole.params);
    await one.release();
    // a full fine-tuning run refuses the adapters' checkpoint
    const full = await actorGroup(
      "full-resume",
      1,
      config(dir, 1, [
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
      ]),
    );
    await full.initModel();
    await t.throwsAsync(full.loadCheckpoint(ckpt), { message: /do not match the model/ });
    await full.release();
  },
);
