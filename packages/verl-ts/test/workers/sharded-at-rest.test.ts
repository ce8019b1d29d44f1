/**
 * The actor sharded at rest (rollout.free_cache_engine, default true): between phases a rank holds only
 * its FSDP shard, each phase gathering the full weights when it begins; generation, log-probs and
 * updates are bit-identical to an actor that keeps the gathered weights (free_cache_engine=false).
 * Float32 with the whole-model tape, and bfloat16 with FSDP per layer (gradient checkpointing: the
 * update gathers only the parameters around the layers).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import { loadNativeBlas } from "@torl-ts/blas";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { DataProto } from "../../src/protocol/index.js";
import { layoutForMiniBatches, type ShardInfo, type WorkerMemory } from "../../src/workers/index.js";
import { type ActorGroup, actorGroup, releaseLeftGroups, seededPrompts, tinyModelDir } from "./helpers.js";

const PROMPTS = 4;
const N = 2; // rollout.n: rows = 8
const P = 5;
const R = 6;
const RANKS = 2;

function config(modelPath: string, extra: string[]) {
  return loadTrainerConfig({
    overrides: extra,
    values: {
      data: { train_batch_size: PROMPTS, max_prompt_length: P, max_response_length: R },
      actor_rollout_ref: {
        model: { path: modelPath },
        actor: {
          ppo_mini_batch_size: 2, // x n = 4 rows: two optimizer steps per update
          ppo_micro_batch_size_per_gpu: 1,
          use_kl_loss: true,
          optim: { lr: 1e-2 },
        },
        // the reference on the host, so that tensors at rest hold no weights but the actor's
        ref: { fsdp_config: { param_offload: true } },
        rollout: { n: N, temperature: 1.0, ignore_eos: true },
      },
      trainer: { n_gpus_per_node: RANKS },
    },
  });
}

type Group = ActorGroup;

/** Parameters of the model in `dir` outside its decoder layers: the embedding (and an untied head), the final norm. */
function outerParameters(dir: string): number {
  const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  return c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + c.hidden_size;
}

const group = (name: string, cfg: ReturnType<typeof config>, sharedMemory?: boolean) =>
  actorGroup(name, RANKS, cfg, sharedMemory);

/** Left-padded prompts (each repeated n times), seeded for sampling. */
const prompts = (step: number) => seededPrompts(PROMPTS, N, P, step);

/** Fixed advantages (alternating rows +1 / -1) into `batch`, then the actor's update on it: its metrics per rank. */
async function update(wg: Group, batch: DataProto): Promise<Record<string, number>[]> {
  const B = batch.length;
  const adv = new Float32Array(B * R);
  for (let b = 0; b < B; b++) adv.fill(b % 2 === 0 ? 1 : -1, b * R, (b + 1) * R);
  batch.union(DataProto.fromDict({ advantages: { data: adv, shape: [B, R] } }));
  return (await wg.updateActor(layoutForMiniBatches(batch, RANKS, 2 * N))) as Record<string, number>[];
}

/** Two GRPO-style steps (generate, old and ref log-probs, update); what came out and memory between phases. */
async function run(wg: Group) {
  const out = {
    responses: [] as number[][],
    oldLogProbs: [] as Float32Array[],
    metrics: [] as Record<string, number>[],
    between: [] as WorkerMemory[][],
  };
  const rest = async () => out.between.push((await wg.memoryInfo()) as WorkerMemory[]);
  await rest();
  for (let step = 0; step < 2; step++) {
    const batch = await wg.generateSequences(prompts(step));
    await rest();
    const lp = await wg.computeLogProb(batch);
    await rest();
    batch.union(lp);
    batch.union(await wg.computeRefLogProb(batch));
    const metrics = await update(wg, batch);
    await rest();
    out.responses.push(Array.from(batch.tensor("responses").data));
    out.oldLogProbs.push(lp.tensor("old_log_probs").data as Float32Array);
    out.metrics.push(metrics[0]!);
  }
  return { ...out, params: (await wg.gatheredParameters()) as Float32Array[] };
}

test.before(async () => {
  await init({ numCpus: 4 * RANKS });
});
// a failed test's groups go, so the next tests get their CPUs
test.afterEach.always(releaseLeftGroups);
test.after.always(async () => {
  await shutdown();
});

test.serial(
  "sharded at rest: between phases a rank holds only its shard; tokens, log-probs and updates are bit-identical to keeping the weights",
  async (t) => {
    const dir = tinyModelDir(5);
    const variants = [
      { name: "fp32", extra: [] },
      {
        name: "bf16-per-layer",
        extra: [
          "actor_rollout_ref.model.dtype=bfloat16",
          "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        ],
      },
    ];
    for (const v of variants) {
      const [rest, kept] = await Promise.all([
        group(`rest-${v.name}`, config(dir, v.extra)),
        group(
          `kept-${v.name}`,
          config(dir, [...v.extra, "actor_rollout_ref.rollout.free_cache_engine=false"]),
        ),
      ]);
      const info = ((await rest.initModel()) as ShardInfo[])[0]!;
      await kept.initModel();
      const a = await run(rest);
      const b = await run(kept);
      t.deepEqual(a.responses, b.responses, `${v.name}: the same sampled tokens`);
      t.deepEqual(a.oldLogProbs, b.oldLogProbs, `${v.name}: the same old log-probs`);
      t.deepEqual(a.metrics, b.metrics, `${v.name}: the same update metrics`);
      t.deepEqual(a.params[0], b.params[0], `${v.name}: the same parameters after two steps`);
      t.deepEqual(a.params[1], a.params[0], "every rank gathers the same parameters");
      t.true(a.metrics[1]!["actor/grad_norm"]! > 0);

      const weightBytes = info.gatheredParamBytes;
      t.is(weightBytes, info.numParameters * (v.name === "fp32" ? 4 : 2));
      for (const [k, ranks] of a.between.entries()) {
        for (const m of ranks) {
          t.is(m.actorWeightBytes, 0, `${v.name} rest ${k} rank ${m.rank}: no full weights held`);
          t.is(m.actorWeightTensorBytes, 0);
          // float32 parameter shard + two AdamW moments: 12 bytes per parameter, over 2 ranks (per unit)
          t.true(Math.abs(m.actorShardBytes - (12 * info.numParameters) / RANKS) <= 12 * 4 * 4);
        }
        for (const [r, m] of b.between[k]!.entries()) {
          t.is(m.actorWeightBytes, weightBytes, `${v.name} kept ${k} rank ${r}: the full weights`);
          t.is(m.actorShardBytes, ranks[r]!.actorShardBytes);
          // the float32 actor keeps them in tensors: exactly that many more tensor bytes
          t.is(m.tensorBytes - ranks[r]!.tensorBytes, m.actorWeightTensorBytes);
        }
      }
      if (v.name === "fp32") t.true(b.between[0]![0]!.actorWeightTensorBytes === weightBytes);
      // gathers of half bits go into arrays kept between phases (none for float32): after the first
      // generation exactly one model's weights; from the end of the first update on, none more (the
      // update's optimizer steps add arrays for the units it gathers into a held model once)
      const pooled = (x: typeof a, k: number) => x.between[k]!.map((m) => m.gatherBufferBytes);
      t.deepEqual(pooled(a, 0), [0, 0], "nothing is kept before the first gather");
      if (v.name === "fp32") t.deepEqual(pooled(a, 6), [0, 0], "float32 gathers keep no arrays");
      else
        t.deepEqual(pooled(a, 1), [weightBytes, weightBytes], "one model's gathered bits after generation");
      // the old log-prob pass right after generation takes generation's gathered bits back (no optimizer
      // step between: the same values, as the bit-identical log-probs above show); every other phase gathers
      const reused = (x: typeof a, k: number) => x.between[k]!.map((m) => m.gatherReusedBytes);
      const once = v.name === "fp32" ? 0 : weightBytes;
      t.deepEqual(reused(a, 1), [0, 0], "generation gathers");
      t.deepEqual(reused(a, 2), [once, once], "the old log-prob pass gathers nothing");
      // bf16 per layer: generation's decoder layers lie in the gradient shard's memory, which the update
      // takes back; it gathers each layer itself. The reference's pass reads its units where the published
      // shards lie, mapped (half bits, the addon loaded), and leaves the units around the layers that
      // generation gathered: the update takes those back. Without the mapping the reference gathers into
      // those arrays, and the update gathers them again
      const refMapped = v.name !== "fp32" && existsSync("/dev/shm") && loadNativeBlas().ok;
      const outer = v.name === "fp32" || !refMapped ? 0 : outerParameters(dir) * 2;
      t.deepEqual(
        reused(a, 3),
        [once + outer, once + outer],
        "the update takes back the units around the layers",
      );
      t.deepEqual(reused(a, 4), reused(a, 3), "the next generation gathers (new weights)");
      const second = 2 * (once + outer);
      t.deepEqual(reused(a, 6), [second, second], "the second step takes back as much");
      t.deepEqual(reused(b, 6), [0, 0], "weights kept between phases: nothing is gathered to take back");
      // step 2 keeps what step 1 kept, phase for phase: nothing grows
      for (const x of [a, b]) {
        t.deepEqual(pooled(x, 5), pooled(x, 4), "the log-prob pass keeps what generation kept");
        t.deepEqual(pooled(x, 6), pooled(x, 3), "step 2's update keeps what step 1's kept");
      }
      // generation's gathers lie in the gradient shard's memory between updates, all of them (at 2 ranks
      // a unit's bits take as many bytes as the rank's float32 piece of it), and in it only
      const inGradient = (x: typeof a, k: number) => x.between[k]!.map((m) => m.gatherInGradientBytes);
      t.deepEqual(inGradient(a, 1), [once, once], "generation's gathers in the gradient's memory");
      t.deepEqual(inGradient(a, 4), [once, once], "and again in step 2");
      t.deepEqual(inGradient(a, 6), [0, 0], "taken back by the update");
      t.deepEqual(inGradient(b, 4), [0, 0], "weights kept: nothing gathered");
      // the update reads the units around the layers from their own pieces of its gradient's memory
      const inUpdate = (x: typeof a, k: number) => x.between[k]!.map((m) => m.updateGatherInGradientBytes);
      const outerBits = v.name === "fp32" ? 0 : outerParameters(dir) * 2;
      t.deepEqual(inUpdate(a, 3), [outerBits, outerBits], "the update's embedding in its gradient's memory");
      t.deepEqual(inUpdate(a, 6), [outerBits, outerBits]);
      t.deepEqual(inUpdate(b, 6), [0, 0], "weights kept: the update reads the model's");
      t.log(
        `${v.name}: ${info.numParameters} parameters; between phases a rank holds ${a.between[1]![0]!.actorShardBytes} bytes of FSDP state ` +
          `and ${a.between[1]![0]!.tensorBytes} tensor bytes sharded at rest, ${b.between[1]![0]!.actorWeightBytes} more bytes of weights (${b.between[1]![0]!.tensorBytes} tensor bytes) kept`,
      );
      await rest.release();
      await kept.release();
    }
  },
);

test.serial(
  "the reference sharded at rest: a rank holds its shard in model.dtype; each pass gathers the same weights the actor computes with",
  async (t) => {
    const dir = tinyModelDir(6);
    // bfloat16 also with the group kept off /dev/shm: the shards are then gathered by allGather
    for (const [dtype, sharedMemory] of [
      ["float32", true],
      ["bfloat16", true],
      ["bfloat16", false],
    ] as const) {
      const wg = await group(
        `ref-${dtype}-${sharedMemory}`,
        config(dir, [`actor_rollout_ref.model.dtype=${dtype}`]),
        sharedMemory,
      );
      const info = ((await wg.initModel()) as ShardInfo[])[0]!;
      const bytesPerValue = dtype === "float32" ? 4 : 2;
      const atRest = (await wg.memoryInfo()) as WorkerMemory[];
      for (const m of atRest) {
        t.is(m.refWeightBytes, 0, `${dtype} rank ${m.rank}: no full reference weights at rest`);
        t.is(m.refWeightTensorBytes, 0);
        t.is(m.publishedShardBytes, 0, "published by the first gather, not before");
      }
      t.is(
        atRest.reduce((n, m) => n + m.refShardBytes, 0),
        info.numParameters * bytesPerValue,
        `${dtype}: the ranks' shards add up to the reference once, in its dtype`,
      );
      t.true(Math.abs(atRest[0]!.refShardBytes - atRest[1]!.refShardBytes) <= 4 * bytesPerValue * 16);

      // before any update the reference equals the actor: the gathered weights give the actor's log-probs, bit for bit
      // (both passes make the same kernel calls, micro-batch for micro-batch, on the same values)
      const batch = await wg.generateSequences(prompts(0));
      const old = (await wg.computeLogProb(batch)).tensor("old_log_probs").data as Float32Array;
      const ref = (await wg.computeRefLogProb(batch)).tensor("ref_log_prob").data as Float32Array;
      t.deepEqual(ref, old, `${dtype}: reference log-probs are the actor's`);
      t.true(ref.some((v) => v < 0));
      // the ranks share a host: with shared memory the first gather published the shards into /dev/shm,
      // and later passes read them from there; without, every pass gathers them: the same log-probs
      const again = (await wg.computeRefLogProb(batch)).tensor("ref_log_prob").data as Float32Array;
      t.deepEqual(again, old, `${dtype} (shared memory ${sharedMemory}): the second pass`);
      // over 2 ranks the pass reads the reference's decoder layers one at a time: where the addon maps the
      // published shards (bf16), in place; else gathered into one array of its own (float32 gathers keep
      // no arrays), beside the actor's generation left
      const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
      const oneLayer = ((info.numParameters - outerParameters(dir)) / c.num_hidden_layers) * bytesPerValue;
      const published = sharedMemory && existsSync("/dev/shm");
      const mapped = published && dtype !== "float32" && loadNativeBlas().ok;
      for (const m of (await wg.memoryInfo()) as WorkerMemory[]) {
        t.is(
          m.mappedShardBytes,
          mapped ? info.numParameters * bytesPerValue : 0,
          "every rank's shard, mapped",
        );
        t.is(m.refWeightBytes, 0, `${dtype} rank ${m.rank}: the pass's gathered weights are freed`);
        t.is(m.refWeightTensorBytes, 0);
        t.is(m.refShardBytes, atRest[m.rank]!.refShardBytes);
        t.is(m.publishedShardBytes, published ? m.refShardBytes : 0, "the shard lives in /dev/shm");
        t.is(
          m.gatherBufferBytes,
          dtype === "float32" ? 0 : info.gatheredParamBytes + (mapped ? 0 : oneLayer),
        );
      }
      t.log(
        `${dtype}: ${info.numParameters} parameters; the reference takes ${atRest[0]!.refShardBytes} + ${atRest[1]!.refShardBytes} bytes at rest over 2 ranks (unsharded: ${info.numParameters * bytesPerValue} on each)`,
      );
      await wg.release();
    }
  },
);

test.serial(
  "the reference's tied LM head, read where the published shards lie, lets its mapped pages go as it reads them, and its layers' matrices are read in the tiles' layout: the same log-probs as the actor's",
  async (t) => {
    const blas = loadNativeBlas();
    if (!existsSync("/dev/shm") || !blas.ok || !blas.blas.amx().enabled) {
      t.log("not checked: needs /dev/shm and the addon's AMX tiles (the head is read whole elsewhere)");
      t.pass();
      return;
    }
    const dir = tinyModelDir(8);
    const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    // 10 response tokens a row: past 8 scored positions, the micro-batches share one head pass
    // the wasm backend: the head's products read the bits in place there
    const wg = await actorGroup(
      "ref-head-blocks",
      RANKS,
      config(dir, ["actor_rollout_ref.model.dtype=bfloat16", "data.max_response_length=10"]),
      true,
      "wasm",
    );
    try {
      await wg.initModel();
      const batch = await wg.generateSequences(prompts(0));
      t.is(batch.tensor("responses").shape[1], 10);
      const old = (await wg.computeLogProb(batch)).tensor("old_log_probs").data as Float32Array;
      const passes = [1, 2];
      for (const pass of passes) {
        const ref = (await wg.computeRefLogProb(batch)).tensor("ref_log_prob").data as Float32Array;
        t.deepEqual(ref, old, `pass ${pass}: the reference's log-probs are the actor's, bit for bit`);
      }
      const embeddingBytes = c.vocab_size * c.hidden_size * 2;
      // the decoder layers' matrices whose sizes are whole tiles went into the tiles' layout, and the
      // passes above read them so (a product reading them row-major would not give the actor's bits)
      const kv = (c.num_key_value_heads * c.hidden_size) / c.num_attention_heads;
      const whole = (k: number, n: number) => (k % 32 === 0 && n % 32 === 0 ? k * n : 0);
      const tiled =
        2 *
        c.num_hidden_layers *
        (2 * whole(c.hidden_size, c.hidden_size) +
          2 * whole(c.hidden_size, kv) +
          2 * whole(c.hidden_size, c.intermediate_size) +
          whole(c.intermediate_size, c.hidden_size));
      t.true(tiled > 0, "the tiny model has layers of whole tiles");
      for (const m of (await wg.memoryInfo()) as WorkerMemory[]) {
        t.is(
          m.refTileLayoutBytes,
          tiled,
          `rank ${m.rank}: the layers' whole-tile matrices in the tiles' layout`,
        );
        if (!c.tie_word_embeddings) t.is(m.refHeadReleasedBytes, 0, "an untied head is read whole");
        else {
          t.true(m.refHeadReleasedBytes > 0, `rank ${m.rank}: pages let go as the head read them`);
          t.true(m.refHeadReleasedBytes <= passes.length * embeddingBytes, "no more than the embedding's");
        }
      }
    } finally {
      await wg.release();
    }
  },
);

test.serial(
  "without a reference pass between them, the update takes generation's gathers back (all of them with actor.fsdp_config.reshard_after_forward=false): the same update as keeping the weights",
  async (t) => {
    const dir = tinyModelDir(7);
    for (const reshard of [true, false]) {
      const extra = [
        "actor_rollout_ref.model.dtype=bfloat16",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.actor.use_kl_loss=false",
        `actor_rollout_ref.actor.fsdp_config.reshard_after_forward=${reshard}`,
      ];
      const [rest, kept] = await Promise.all([
        group(`nokl-rest-${reshard}`, config(dir, extra)),
        group(
          `nokl-kept-${reshard}`,
          config(dir, [...extra, "actor_rollout_ref.rollout.free_cache_engine=false"]),
        ),
      ]);
      const info = ((await rest.initModel()) as ShardInfo[])[0]!;
      await kept.initModel();
      const steps = async (wg: Group) => {
        const out = {
          metrics: [] as Record<string, number>[],
          reused: [] as number[][],
          inGradient: [] as number[][],
          inUpdate: [] as number[][],
          releases: [] as number[][],
        };
        for (let step = 0; step < 2; step++) {
          const batch = await wg.generateSequences(prompts(step));
          batch.union(await wg.computeLogProb(batch));
          const before = (await wg.memoryInfo()) as WorkerMemory[];
          out.inGradient.push(before.map((m) => m.gatherInGradientBytes));
          out.metrics.push((await update(wg, batch))[0]!);
          const after = (await wg.memoryInfo()) as WorkerMemory[];
          out.reused.push(after.map((m) => m.gatherReusedBytes));
          out.inUpdate.push(after.map((m) => m.updateGatherInGradientBytes));
          out.releases.push(after.map((m, r) => m.transientReleases - before[r]!.transientReleases));
        }
        return { ...out, params: (await wg.gatheredParameters()) as Float32Array[] };
      };
      const a = await steps(rest);
      const b = await steps(kept);
      t.deepEqual(a.metrics, b.metrics, `reshard ${reshard}: the same update metrics`);
      t.deepEqual(a.params[0], b.params[0], `reshard ${reshard}: the same parameters after two steps`);
      // each step: the old log-prob pass takes all of generation's bits back. Resharding, the update then
      // takes the units around the layers back (its first mini-batch; the second one follows an optimizer
      // step and gathers) and gathers each layer itself: generation's layers lie in the gradient shard's
      // memory. Not resharding, it takes the layers back too
      // resharding, the update hands its transients back before each of its two optimizer steps and
      // when it ends; not resharding (or weights kept between phases), it keeps them
      t.deepEqual(
        a.releases,
        reshard
          ? [
              [3, 3],
              [3, 3],
            ]
          : [
              [0, 0],
              [0, 0],
            ],
        `reshard ${reshard}: releases`,
      );
      t.deepEqual(
        b.releases,
        [
          [0, 0],
          [0, 0],
        ],
        `reshard ${reshard}: weights kept, no releases`,
      );
      const weightBytes = info.gatheredParamBytes;
      const perStep = weightBytes + (reshard ? outerParameters(dir) * 2 : weightBytes);
      for (const [step, ranks] of a.reused.entries())
        t.deepEqual(
          ranks,
          [(step + 1) * perStep, (step + 1) * perStep],
          `reshard ${reshard}, step ${step + 1}`,
        );
      // resharding, generation's gathers lie in the gradient shard's memory, and the update reads the units
      // around the layers where generation left them, their own pieces of it
      const carved = reshard ? weightBytes : 0;
      for (const step of [0, 1])
        t.deepEqual(
          a.inGradient[step],
          [carved, carved],
          `reshard ${reshard}, step ${step + 1}: generation's gathers in the gradient's memory`,
        );
      const outerBits = reshard ? outerParameters(dir) * 2 : 0;
      t.deepEqual(a.inUpdate, [
        [outerBits, outerBits],
        [outerBits, outerBits],
      ]);
      t.deepEqual(b.reused[1], [0, 0]);
      await rest.release();
      await kept.release();
    }
  },
);

test.serial(
  "ref.fsdp_config.reshard_after_forward=false: the reference's gathered weights stay between its passes, the same log-probs",
  async (t) => {
    const dir = tinyModelDir(6);
    const dtype = "bfloat16";
    const [resharded, kept] = await Promise.all([
      group("ref-reshard", config(dir, [`actor_rollout_ref.model.dtype=${dtype}`])),
      group(
        "ref-kept",
        config(dir, [
          `actor_rollout_ref.model.dtype=${dtype}`,
          "actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false",
        ]),
      ),
    ]);
    const info = ((await kept.initModel()) as ShardInfo[])[0]!;
    await resharded.initModel();
    const refPasses = async (wg: Group) => {
      const batch = await wg.generateSequences(prompts(0));
      const out: Float32Array[] = [];
      const between: WorkerMemory[][] = [];
      for (let pass = 0; pass < 2; pass++) {
        out.push((await wg.computeRefLogProb(batch)).tensor("ref_log_prob").data as Float32Array);
        between.push((await wg.memoryInfo()) as WorkerMemory[]);
      }
      return { out, between };
    };
    const a = await refPasses(resharded);
    const b = await refPasses(kept);
    t.deepEqual(b.out, a.out, "the same reference log-probs, pass after pass");
    t.deepEqual(b.out[1], b.out[0]);
    for (const [pass, ranks] of b.between.entries())
      for (const m of ranks) {
        t.is(
          m.refWeightBytes,
          info.numParameters * 2,
          `kept, pass ${pass + 1}, rank ${m.rank}: the whole reference`,
        );
        t.is(a.between[pass]![m.rank]!.refWeightBytes, 0, "resharded: none");
      }
    // the second pass gathered nothing: the actor's generation and the kept reference each have their arrays
    t.deepEqual(
      b.between[1]!.map((m) => m.gatherBufferBytes),
      b.between[0]!.map((m) => m.gatherBufferBytes),
    );
    await resharded.release();
    await kept.release();
  },
);

test.serial(
  "the update's units around the layers in its gradient's memory, read as bits (wasm): gathered again after each optimizer step, taken or skipped for a non-finite gradient norm; the same updates as keeping the weights",
  async (t) => {
    const dir = tinyModelDir(7);
    const extra = [
      "actor_rollout_ref.model.dtype=bfloat16",
      "actor_rollout_ref.model.enable_gradient_checkpointing=true",
      "actor_rollout_ref.actor.use_kl_loss=false",
    ];
    // the wasm backend with the addon: the update's products and lookups read the weights' bits where the
    // model holds them (on cpu it reads float32 copies made when the update begins)
    const [rest, kept] = await Promise.all([
      actorGroup("skip-rest", RANKS, config(dir, extra), undefined, "wasm"),
      actorGroup(
        "skip-kept",
        RANKS,
        config(dir, [...extra, "actor_rollout_ref.rollout.free_cache_engine=false"]),
        undefined,
        "wasm",
      ),
    ]);
    await rest.initModel();
    await kept.initModel();
    const twice = async (wg: Group) => {
      const out = { metrics: [] as Record<string, number>[], memory: [] as WorkerMemory[][] };
      for (let step = 0; step < 2; step++) {
        const batch = await wg.generateSequences(prompts(step));
        batch.union(await wg.computeLogProb(batch));
        if (step === 0) {
          // the first global mini-batch's rows (2 x n) get NaN advantages: its gradient norm is NaN, its
          // optimizer step skipped; the second's rows train
          const B = batch.length;
          const adv = new Float32Array(B * R);
          for (let b = 0; b < B; b++)
            adv.fill(b < 2 * N ? Number.NaN : b % 2 === 0 ? 1 : -1, b * R, (b + 1) * R);
          batch.union(DataProto.fromDict({ advantages: { data: adv, shape: [B, R] } }));
          const m = await wg.updateActor(layoutForMiniBatches(batch, RANKS, 2 * N));
          out.metrics.push((m as Record<string, number>[])[0]!);
        } else out.metrics.push((await update(wg, batch))[0]!); // two steps taken
        out.memory.push((await wg.memoryInfo()) as WorkerMemory[]);
      }
      return { ...out, params: (await wg.gatheredParameters()) as Float32Array[] };
    };
    const a = await twice(rest);
    const b = await twice(kept);
    t.is(a.metrics[0]!["actor/skipped_updates"], 1, "the first mini-batch's step skipped");
    t.true(Number.isFinite(a.metrics[0]!["actor/grad_norm"]) && a.metrics[0]!["actor/grad_norm"]! > 0);
    t.is(a.metrics[1]!["actor/skipped_updates"], undefined, "the next update takes both steps");
    t.deepEqual(a.metrics, b.metrics, "the same update metrics");
    t.deepEqual(a.params[0], b.params[0], "the same parameters after them");
    const outerBits = outerParameters(dir) * 2;
    for (const memory of a.memory)
      t.deepEqual(
        memory.map((m) => m.updateGatherInGradientBytes),
        [outerBits, outerBits],
        "the update read the units around the layers from its gradient's memory",
      );
    await rest.release();
    await kept.release();
  },
);
