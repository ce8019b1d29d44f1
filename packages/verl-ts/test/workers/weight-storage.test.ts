/**
 * The worker's weight storage: actor_rollout_ref.model.dtype (bf16 / fp16 weights held as 16-bit
 * patterns) and ref.fsdp_config.param_offload (the reference's weights on the host between its passes).
 * One in-process worker (rank 0 of 1) at a time, so tf.memory() is this worker's alone.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  checkTrainerConfig,
  DataProto,
  exportCheckpoint,
  HalfArray,
  loadModel,
  loadTrainerConfig,
  selectBackend,
} from "../../src/index.js";
import { nativeBlas } from "../../src/models/native-blas.js";
import { FlatLayout } from "../../src/workers/flat-params.js";
import { ActorRolloutRefWorker, CheckpointError, readAllShards } from "../../src/workers/index.js";
import { responseBatch, tinyModelDir } from "./helpers.js";

const modelDir = tinyModelDir(11);
test.after.always(() => rmSync(modelDir, { recursive: true, force: true }));
test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

const data = responseBatch({
  B: 4,
  P: 5,
  R: 6,
  promptLen: (b) => 2 + b,
  responseLen: (b) => 6 - b,
  token: (b, t) => 97 + ((b * 7 + t * 3) % 26),
  valueKey: "advantages",
  rowValue: (b) => b - 1.5,
});

function worker(extra: string[]) {
  const config = loadTrainerConfig({
    overrides: extra,
    values: { actor_rollout_ref: { model: { path: modelDir }, rollout: { n: 1 } } },
  });
  return new ActorRolloutRefWorker({ config });
}

/** Runs the reference pass on a fresh worker; tensor bytes before and after it, and its log-probs. */
async function refPass(extra: string[]) {
  const before = tf.memory().numBytes;
  const w = worker(extra);
  await w.initModel();
  const atRest = w.memoryInfo();
  const out = await w.computeRefLogProb(data);
  const after = w.memoryInfo();
  const logProbs = out.tensor("ref_log_prob").data as Float32Array;
  const held = atRest.tensorBytes - before;
  (w as unknown as { model: { dispose(): void }; ref: { dispose(): void } }).model.dispose();
  (w as unknown as { ref: { dispose(): void } }).ref.dispose();
  return { atRest, after, held, logProbs };
}

test.serial(
  "ref param_offload: between passes no tensor holds the reference weights; its log-probs are unchanged",
  async (t) => {
    const resident = await refPass([]);
    const offloaded = await refPass(["actor_rollout_ref.ref.fsdp_config.param_offload=true"]);
    const refBytes = resident.atRest.refWeightBytes;
    t.true(refBytes > 0);
    t.is(resident.atRest.refWeightTensorBytes, refBytes, "by default the reference sits in tensors");
    t.is(offloaded.atRest.refWeightTensorBytes, 0);
    t.is(offloaded.after.refWeightTensorBytes, 0, "released after its pass");
    t.is(offloaded.atRest.refWeightBytes, refBytes, "float32 on the host: the same bytes, elsewhere");
    // the process's tensors shrink by exactly the reference's weights, before and after the pass
    t.is(resident.held - offloaded.held, refBytes);
    t.is(offloaded.after.tensorBytes, offloaded.atRest.tensorBytes);
    t.deepEqual(offloaded.logProbs, resident.logProbs);
  },
);

test.serial(
  "model.dtype=bfloat16: actor and reference weights take half the bytes and no tensor between passes",
  async (t) => {
    // the actor keeps its gathered weights between passes (sharded at rest it holds none: sharded-at-rest.test.ts)
    const kept = "actor_rollout_ref.rollout.free_cache_engine=false";
    const fp32 = await refPass([kept]);
    const bf16 = await refPass([kept, "actor_rollout_ref.model.dtype=bfloat16"]);
    t.true(fp32.atRest.actorWeightBytes > 0);
    t.is(bf16.atRest.actorWeightBytes * 2, fp32.atRest.actorWeightBytes);
    t.is(bf16.atRest.refWeightBytes * 2, fp32.atRest.refWeightBytes);
    t.is(bf16.atRest.actorWeightTensorBytes + bf16.atRest.refWeightTensorBytes, 0);
    t.is(bf16.after.tensorBytes, bf16.atRest.tensorBytes);
    // log-probs within bf16 precision of the float32 ones
    let maxDiff = 0;
    for (let i = 0; i < fp32.logProbs.length; i++)
      maxDiff = Math.max(maxDiff, Math.abs(fp32.logProbs[i]! - bf16.logProbs[i]!));
    t.true(maxDiff > 0 && maxDiff < 0.05, `max |log-prob diff| ${maxDiff}`);
  },
);

test.serial(
  "a bf16 actor trains: float32 master weights move, the stored weights are their bf16 rounding",
  async (t) => {
    const w = worker([
      "actor_rollout_ref.model.dtype=bfloat16",
      "actor_rollout_ref.actor.ppo_mini_batch_size=4",
      "actor_rollout_ref.actor.optim.lr=0.01",
    ]);
    await w.initModel();
    const initial = (await w.gatheredParameters()).slice();
    const batch = data.slice(0, 4);
    batch.union(await w.computeLogProb(batch));
    const metrics = await w.updateActor(batch);
    t.true(Number.isFinite(metrics["actor/grad_norm"]) && metrics["actor/grad_norm"]! > 0);
    // one rank: its master shard is every parameter (float32, the optimizer's copy)
    const master = (w as unknown as { sharded: { params: Float32Array } }).sharded.params;
    t.notDeepEqual(master, initial);
    const stored = await w.gatheredParameters(); // what the model holds, in our flat layout
    t.deepEqual(stored, HalfArray.fromFloat32(master, "bfloat16").toFloat32());
    t.is(w.memoryInfo().actorWeightTensorBytes, 0, "back at rest after the update");
  },
);

test.serial(
  "a checkpoint of a bf16 run records it: it exports as bf16 by default, reloads as bf16, and resumes only as bf16",
  async (t) => {
    const bf16 = ["actor_rollout_ref.model.dtype=bfloat16", "actor_rollout_ref.actor.ppo_mini_batch_size=4"];
    const w = worker(bf16);
    await w.initModel();
    const batch = data.slice(0, 4);
    batch.union(await w.computeLogProb(batch));
    await w.updateActor(batch);
    const ckpt = mkdtempSync(join(tmpdir(), "torl-bf16-ckpt-"));
    const out = join(ckpt, "export");
    try {
      w.saveCheckpoint(join(ckpt, "actor"));
      t.is(readAllShards(join(ckpt, "actor")).dtype, "bfloat16");
      const result = exportCheckpoint(join(ckpt, "actor"), { out, model: modelDir });
      t.is(result.dtype, "bf16");
      const exported = loadModel(out, { dtype: "auto" });
      t.is(exported.dtype, "bfloat16");
      t.deepEqual(
        FlatLayout.of(await exported.getParameters()).flatten(await exported.getParameters()),
        await w.gatheredParameters(),
        "the export holds exactly the weights the run computed with",
      );
      exported.dispose();
      const fp32 = worker(["actor_rollout_ref.actor.ppo_mini_batch_size=4"]);
      await fp32.initModel();
      await t.throwsAsync(fp32.loadCheckpoint(join(ckpt, "actor")), {
        instanceOf: CheckpointError,
        message: /stores them in float32; set actor_rollout_ref\.model\.dtype=bfloat16 to resume it/,
      });
      const again = worker(bf16);
      await again.initModel();
      await again.loadCheckpoint(join(ckpt, "actor"));
      t.deepEqual(await again.gatheredParameters(), await w.gatheredParameters());
    } finally {
      rmSync(ckpt, { recursive: true, force: true });
    }
  },
);

test.serial(
  "a bf16 actor's update computes with the bf16 weights its old log-probs came from: the first ratio is exactly 1",
  async (t) => {
    // the whole-model tape, and FSDP per layer (with checkpointing: each layer gathered from the shards)
    for (const checkpointing of [false, true]) {
      const w = worker([
        "actor_rollout_ref.model.dtype=bfloat16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        `actor_rollout_ref.model.enable_gradient_checkpointing=${checkpointing}`,
      ]);
      await w.initModel();
      const batch = data.slice(0, 4);
      batch.union(await w.computeLogProb(batch));
      const metrics = await w.updateActor(batch);
      // one mini-batch, on-policy: the update's log-probs equal the old ones (float32 master weights would not)
      t.is(metrics["actor/ppo_kl"], 0, `checkpointing ${checkpointing}`);
      t.is(metrics["actor/pg_clipfrac"], 0);
    }
  },
);

test.serial(
  "model.compute_dtype=bfloat16 rounds the products' activations: other log-probs, near the float32 ones, and the first ratio still exactly 1",
  async (t) => {
    const blas = nativeBlas();
    if (!blas) {
      if (process.env.CI) t.fail("CI must build the OpenBLAS addon");
      t.log("not checked: no OpenBLAS addon (products read no bits)");
      t.pass();
      return;
    }
    const batch = data.slice(0, 4);
    const oldLogProbs = async (extra: string[]) => {
      const w = worker(["actor_rollout_ref.model.dtype=bfloat16", ...extra]);
      await w.initModel();
      return { w, lp: (await w.computeLogProb(batch)).tensor("old_log_probs").data as Float32Array };
    };
    const whole = await oldLogProbs([]);
    t.is(blas.activationDtype(), "float32");
    for (const checkpointing of [false, true]) {
      const rounded = await oldLogProbs([
        "actor_rollout_ref.model.compute_dtype=bfloat16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        `actor_rollout_ref.model.enable_gradient_checkpointing=${checkpointing}`,
      ]);
      t.is(blas.activationDtype(), "bfloat16");
      t.notDeepEqual(rounded.lp, whole.lp, "bfloat16 activations give other log-probs");
      let worst = 0;
      for (let i = 0; i < whole.lp.length; i++)
        worst = Math.max(worst, Math.abs(rounded.lp[i]! - whole.lp[i]!));
      t.true(worst < 0.05, `within 0.05 of float32 compute: ${worst}`);
      const b = batch.slice(0, 4);
      b.union(DataProto.fromDict({ old_log_probs: { data: rounded.lp, shape: [4, rounded.lp.length / 4] } }));
      const metrics = await rounded.w.updateActor(b);
      // the update's products round the same activations: on-policy, the ratio is exactly 1
      t.is(metrics["actor/ppo_kl"], 0, `checkpointing ${checkpointing}`);
      t.is(metrics["actor/pg_clipfrac"], 0);
    }
    // a worker without the key computes whole again
    await oldLogProbs([]);
    t.is(blas.activationDtype(), "float32");
    // with float32 weights there are no bits to read: refused, naming the key
    const issues = checkTrainerConfig(
      loadTrainerConfig({ overrides: ["actor_rollout_ref.model.compute_dtype=bfloat16"] }),
    ).map((i) => i.message);
    t.true(
      issues.some((m) =>
        /^actor_rollout_ref\.model\.compute_dtype is bfloat16 but model\.dtype is float32/.test(m),
      ),
      issues.join("; "),
    );
  },
);
