import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { computeValueLoss } from "../../src/algorithms/index.js";
import { checkTrainerConfig, loadTrainerConfig } from "../../src/config/index.js";
import { adapterSpecs } from "../../src/models/lora.js";
import { loadModelValues } from "../../src/models/pretrained.js";
import type { DataProto } from "../../src/protocol/index.js";
import type { BatchTensor } from "../../src/protocol/tensor.js";
import { type BoundGroup, ResourcePool, WorkerGroup, workerRole } from "../../src/single-controller/index.js";
import {
  type CriticMemory,
  CriticWorker,
  criticSettings,
  layoutForMiniBatches,
  type ShardInfo,
} from "../../src/workers/index.js";
import { responseBatch, tinyModelDir } from "./helpers.js";

// The critic: values at the right positions, the clipped value loss, FSDP equivalence and checkpoints.

const CRITIC_MODULE = new URL("../../src/workers/critic.ts", import.meta.url).href;
const B = 8; // train_batch_size 4 x n 2
const P = 4;
const R = 5;

function configValues(modelPath: string, miniBatch = 2, checkpointing = false) {
  return {
    data: { train_batch_size: 4, max_prompt_length: P, max_response_length: R },
    actor_rollout_ref: { model: { path: modelPath }, rollout: { n: 2 } },
    critic: {
      model: { enable_gradient_checkpointing: checkpointing },
      ppo_mini_batch_size: miniBatch,
      ppo_micro_batch_size_per_gpu: 1,
      cliprange_value: 0.5,
      grad_clip: 1.0,
      optim: { lr: 1e-2, weight_decay: 0.0 },
    },
    algorithm: { adv_estimator: "gae" },
    trainer: { n_gpus_per_node: 1 },
  };
}

function config(modelPath: string, miniBatch: number, checkpointing = false) {
  return loadTrainerConfig({ values: configValues(modelPath, miniBatch, checkpointing) });
}

/** Left-padded prompts, right-padded responses of different lengths, returns +1 or -1 by row. */
function batch(): DataProto {
  return responseBatch({
    B,
    P,
    R,
    promptLen: (b) => 1 + (b % P),
    responseLen: (b) => 1 + ((b * 3) % R),
    token: (b, t) => 97 + (t < P ? (b * 7 + t) % 26 : (b * 5 + (t - P) * 3) % 26),
    valueKey: "returns",
    rowValue: (b) => (b % 2 === 0 ? 1 : -1),
  });
}

type Group = BoundGroup<typeof CriticWorker>;

/** `n` critic ranks, their model loaded; `release` ends them and gives their CPUs back. */
async function group(
  n: number,
  cfg: ReturnType<typeof config>,
  name: string,
): Promise<Group & { release(): Promise<void> }> {
  const pool = new ResourcePool({ processOnNodes: [n], useGpu: false, namePrefix: name });
  const wg = (await WorkerGroup.create(
    pool,
    workerRole(CriticWorker, { module: CRITIC_MODULE }, { config: cfg }),
    {
      name,
      collective: true,
      env: { TORL_BACKEND: "cpu" },
    },
  )) as Group;
  await wg.initModel();
  return Object.assign(wg, {
    async release() {
      await wg.shutdown();
      await pool.release();
    },
  });
}

/** One critic step as the trainer runs it: values of the current critic, then the update. */
async function step(
  wg: Group,
  cfg: ReturnType<typeof config>,
): Promise<{ data: DataProto; metrics: Record<string, number> }> {
  const data = batch();
  data.union(await wg.computeValues(data));
  const rows = (cfg.critic.ppo_mini_batch_size as number) * 2;
  const out = (await wg.updateCritic(layoutForMiniBatches(data, wg.worldSize, rows))) as Record<
    string,
    number
  >[];
  for (const m of out) if (JSON.stringify(m) !== JSON.stringify(out[0])) throw new Error("ranks disagree");
  return { data, metrics: out[0]! };
}

test.before(async () => {
  await init({ numCpus: 8 });
});
test.after.always(async () => {
  await shutdown();
});

test("critic: the first loss is veRL's value loss of its own values; training fits the returns", async (t) => {
  const cfg = config(tinyModelDir(), 4); // one mini-batch holds every row: the loss is over the whole batch
  const wg = await group(1, cfg, "critic-fit");
  const first = await step(wg, cfg);
  const values = first.data.tensor("values");
  t.deepEqual(values.shape, [B, R]);
  // at the start vpreds are the values, so nothing is clipped and vf_loss = 0.5 token-mean((V - R)^2)
  const f32 = (x: BatchTensor) => ({ data: Float32Array.from(x.data as ArrayLike<number>), shape: x.shape });
  const mask = f32(first.data.tensor("response_mask"));
  const expected = computeValueLoss(f32(values), f32(first.data.tensor("returns")), f32(values), mask, 0.5);
  t.true(
    Math.abs(first.metrics["critic/vf_loss"]! - expected.vfLoss) < 1e-5,
    `${first.metrics["critic/vf_loss"]} vs ${expected.vfLoss}`,
  );
  t.is(first.metrics["critic/vf_clipfrac"], 0);
  t.true(first.metrics["critic/grad_norm"]! > 0);
  t.is(first.metrics["critic/lr"], 1e-2);
  let last = first.metrics;
  for (let i = 0; i < 15; i++) last = (await step(wg, cfg)).metrics;
  t.log(`vf_loss ${first.metrics["critic/vf_loss"]!.toFixed(4)} -> ${last["critic/vf_loss"]!.toFixed(4)}`);
  t.true(last["critic/vf_loss"]! < 0.5 * first.metrics["critic/vf_loss"]!, "the critic learns the returns");
  // the values now separate the rows whose return is +1 from those with -1
  const v = (await wg.computeValues(batch())).tensor("values");
  const m = mask.data;
  let pos = 0;
  let neg = 0;
  let np = 0;
  let nn = 0;
  for (let b = 0; b < B; b++)
    for (let j = 0; j < R; j++) {
      if (!m[b * R + j]) continue;
      if (b % 2 === 0) {
        pos += Number(v.data[b * R + j]);
        np++;
      } else {
        neg += Number(v.data[b * R + j]);
        nn++;
      }
    }
  t.true(pos / np > neg / nn + 0.5, `mean value of +1 rows ${pos / np}, of -1 rows ${neg / nn}`);
  await wg.shutdown();
});

test("critic: N=2 gives the same parameters and metrics as N=1; a checkpoint loads on another world size", async (t) => {
  const cfg = config(tinyModelDir(), 2); // two mini-batches per step
  const [one, two] = await Promise.all([group(1, cfg, "critic-n1"), group(2, cfg, "critic-n2")]);
  const infos = (await two.shardInfo()) as ShardInfo[];
  t.is(infos[0]!.shardElements + infos[1]!.shardElements, infos[0]!.numParameters);
  const before = (await one.gatheredParameters())[0]!;
  const a: Record<string, number>[] = [];
  const b: Record<string, number>[] = [];
  for (let i = 0; i < 2; i++) {
    a.push((await step(one, cfg)).metrics);
    b.push((await step(two, cfg)).metrics);
  }
  const p1 = (await one.gatheredParameters())[0]!;
  const p2 = (await two.gatheredParameters())[0]!;
  let moved = 0;
  let diff = 0;
  for (let i = 0; i < p1.length; i++) {
    moved = Math.max(moved, Math.abs(p1[i]! - before[i]!));
    diff = Math.max(diff, Math.abs(p1[i]! - p2[i]!));
  }
  t.log(`max update ${moved.toExponential(2)}, max |N=2 - N=1| ${diff.toExponential(2)}`);
  t.true(moved > 1e-3);
  t.true(diff < 2e-5);
  for (const [k, v] of Object.entries(a[1]!))
    t.true(Math.abs(b[1]![k]! - v) <= 1e-4 * Math.max(1, Math.abs(v)), k);
  // sharded at rest: between phases a rank holds its float32 shard and AdamW moments, no full weights
  const memory = (await two.memoryInfo()) as CriticMemory[];
  for (const [r, m] of memory.entries()) {
    t.is(m.weightBytes, 0, `rank ${r} holds no full weights between phases`);
    t.is(m.shardBytes, 12 * infos[r]!.shardElements);
  }

  const dir = join(mkdtempSync(join(tmpdir(), "torl-critic-ckpt-")), "critic");
  await two.saveCheckpoint(dir);
  const fresh = await group(1, cfg, "critic-load");
  const [loaded] = (await fresh.loadCheckpoint(dir)) as { schedulerStep: number }[];
  t.is(loaded!.schedulerStep, 2);
  t.deepEqual(Array.from((await fresh.gatheredParameters())[0]!), Array.from(p2));
  // and it continues exactly like the run that was not interrupted
  const next1 = (await step(fresh, cfg)).metrics;
  const next2 = (await step(two, cfg)).metrics;
  t.true(Math.abs(next1["critic/vf_loss"]! - next2["critic/vf_loss"]!) < 1e-5);
  for (const g of [one, two, fresh]) await g.shutdown();
});

test("critic: FSDP per layer (gradient checkpointing) at N=2 trains like the whole-model tape at N=1", async (t) => {
  const plain = config(tinyModelDir(), 2);
  const layered = config(tinyModelDir(), 2, true);
  const [one, two] = await Promise.all([
    group(1, plain, "critic-plain"),
    group(2, layered, "critic-layered"),
  ]);
  for (let i = 0; i < 2; i++) {
    const a = (await step(one, plain)).metrics;
    const b = (await step(two, layered)).metrics;
    t.true(Math.abs(a["critic/vf_loss"]! - b["critic/vf_loss"]!) < 1e-5, `step ${i} vf_loss`);
  }
  const p1 = (await one.gatheredParameters())[0]!;
  const p2 = (await two.gatheredParameters())[0]!;
  let diff = 0;
  for (let i = 0; i < p1.length; i++) diff = Math.max(diff, Math.abs(p1[i]! - p2[i]!));
  t.log(`max |layered N=2 - plain N=1| ${diff.toExponential(2)}`);
  t.true(diff < 2e-5);
  for (const m of (await two.memoryInfo()) as CriticMemory[]) t.is(m.weightBytes, 0);
  for (const g of [one, two]) await g.shutdown();
});

const CRITIC_LORA = ["critic.model.lora_rank=4", "critic.model.lora_alpha=8"];

function loraConfig(modelPath: string, extra: string[] = []) {
  return loadTrainerConfig({
    overrides: [...CRITIC_LORA, ...extra],
    values: configValues(modelPath),
  });
}

test.serial("critic LoRA: bad keys, and a LoRA critic without a critic, are refused by name", (t) => {
  const dir = tinyModelDir();
  const keys = (extra: string[], base: string[] = CRITIC_LORA) =>
    checkTrainerConfig(loadTrainerConfig({ overrides: [...base, ...extra], values: configValues(dir) })).map(
      (i) => i.key,
    );
  t.deepEqual(keys([]), []);
  t.deepEqual(keys(["critic.model.target_modules=[q_proj,lm_head]"]), ["critic.model.target_modules"]);
  t.deepEqual(keys(["critic.model.lora_rank=-1"]), ["critic.model.lora_rank"]);
  // alpha set without a rank would be accepted and ignored
  t.deepEqual(keys(["critic.model.lora_alpha=32"], []), ["critic.model.lora_alpha"]);
  t.deepEqual(keys(["algorithm.adv_estimator=grpo"]), ["critic.model.lora_rank"]);
  t.throws(() => criticSettings(loraConfig(dir, ["critic.model.target_modules=[nope]"]), 1), {
    message: /critic\.model\.target_modules names "nope"/,
  });
});

// serial (ava runs those first) and releasing its CPUs: the other tests keep theirs reserved
test.serial(
  "critic LoRA: zero B gives the base's values; adapters and head train (vf_loss falls), FSDP per layer at N=2 = N=1; checkpoints resume and a full critic refuses them",
  async (t) => {
    const dir = tinyModelDir();
    const cfg = loraConfig(dir);
    const full = config(dir, 2);
    const [plain, lora, layered] = await Promise.all([
      group(1, full, "critic-full-ref"),
      group(1, cfg, "critic-lora-n1"),
      group(2, loraConfig(dir, ["critic.model.enable_gradient_checkpointing=true"]), "critic-lora-n2"),
    ]);
    // B starts at zero: the adapted value model is the base one, bit for bit (same head seed)
    const v0 = (await plain.computeValues(batch())).tensor("values").data;
    t.deepEqual((await lora.computeValues(batch())).tensor("values").data, v0);
    const { config: mc, values } = loadModelValues(dir);
    const settings = criticSettings(cfg, 1).lora!;
    t.deepEqual(settings, {
      rank: 4,
      alpha: 8,
      targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    });
    const adapters = adapterSpecs(mc, settings).reduce((a, s) => a + s.shape[0]! * s.shape[1]!, 0);
    const backbone = [...values]
      .filter(([name]) => name !== "lm_head.weight")
      .reduce((a, [, v]) => a + v.length, 0);
    const trained = adapters + mc.hiddenSize + 1;
    const infos = (await layered.shardInfo()) as ShardInfo[];
    t.is(infos[0]!.numParameters, backbone + trained);
    t.is(
      infos[0]!.shardElements + infos[1]!.shardElements,
      trained,
      "only the adapters and the head are sharded",
    );
    const first = (await step(lora, cfg)).metrics;
    const firstLayered = (await step(layered, cfg)).metrics;
    t.true(Math.abs(first["critic/vf_loss"]! - firstLayered["critic/vf_loss"]!) < 1e-5);
    let last = first;
    for (let i = 0; i < 8; i++) {
      last = (await step(lora, cfg)).metrics;
      const b = (await step(layered, cfg)).metrics;
      t.true(Math.abs(last["critic/vf_loss"]! - b["critic/vf_loss"]!) < 1e-4, `step ${i} vf_loss`);
    }
    t.log(
      `LoRA critic vf_loss ${first["critic/vf_loss"]!.toFixed(4)} -> ${last["critic/vf_loss"]!.toFixed(4)}`,
    );
    t.true(last["critic/vf_loss"]! < 0.5 * first["critic/vf_loss"]!, "the LoRA critic learns the returns");
    const p1 = (await lora.gatheredParameters())[0]!;
    const p2 = (await layered.gatheredParameters())[0]!;
    t.is(p1.length, trained, "the trained parameters are the adapters and the value head");
    let diff = 0;
    for (let i = 0; i < p1.length; i++) diff = Math.max(diff, Math.abs(p1[i]! - p2[i]!));
    t.true(diff < 1e-4, `max |layered N=2 - N=1| ${diff}`);
    // at rest: no full weights; the frozen backbone once over the ranks in float32; AdamW of the trained only
    const memory = (await layered.memoryInfo()) as CriticMemory[];
    for (const m of memory) {
      t.is(m.weightBytes, 0);
      t.is(m.adapterParameters, adapters);
    }
    t.is(memory[0]!.baseShardBytes + memory[1]!.baseShardBytes, 4 * backbone);
    t.is(memory[0]!.shardBytes + memory[1]!.shardBytes, 12 * trained);
    // the 2-rank checkpoint resumes on 1 rank; a full fine-tuning critic refuses it
    const ckpt = join(mkdtempSync(join(tmpdir(), "torl-critic-lora-ckpt-")), "critic");
    await layered.saveCheckpoint(ckpt);
    const fresh = await group(1, cfg, "critic-lora-load");
    const [loaded] = (await fresh.loadCheckpoint(ckpt)) as { schedulerStep: number }[];
    t.is(loaded!.schedulerStep, 9);
    t.deepEqual(Array.from((await fresh.gatheredParameters())[0]!), Array.from(p2));
    await t.throwsAsync(plain.loadCheckpoint(ckpt), { message: /do not match the model/ });
    for (const g of [plain, lora, layered, fresh]) await g.release();
  },
);
