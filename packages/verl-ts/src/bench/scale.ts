/**
 * `pnpm torl bench scale [--json]`: the real-size probe. A model with Qwen2.5-0.5B's exact shapes and
 * random weights (written as bf16 safetensors into a temp dir by scale-fixture.ts: no downloads) loads
 * on the default CPU backend in each of 2 FSDP ranks, generates 16 tokens per row with the KV cache, and
 * runs one GRPO step (or `steps`): old log-probs, reference log-probs, advantages, the actor update.
 * Reported: each phase's seconds, each rank's peak resident set and bytes in tensors after every phase,
 * and the largest tensor. A benchmark (minutes, GBs), not a test; its pieces are tested on a tiny config.
 *
 * Settings: weights stored in bfloat16 (actor_rollout_ref.model.dtype), the reference offloaded
 * (ref.fsdp_config.param_offload), one row per micro-batch, the actor sharded at rest
 * (rollout.free_cache_engine, the default: each phase gathers the weights), and gradient checkpointing,
 * which makes the update FSDP per decoder layer: one tape over the whole model would hold every float32
 * weight and gradient at once (4 GB at this size), past the wasm backend's 4 GB heap.
 *
 * `--lora-rank N` runs the probe a second time in the same invocation with LoRA (lora_rank N, lora_alpha
 * 2N, all-linear; the reference is then the base with the adapters off, so it is not offloaded): full
 * fine-tuning and LoRA side by side, each with its own worker processes.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, isInitialized, shutdown } from "@torl-ts/actors";
import { defineBench } from "@torl-ts/core/cli";
import { computeAdvantage } from "../algorithms/advantage.js";
import { loadTrainerConfig } from "../config/load.js";
import type { Qwen2Config } from "../models/config.js";
import { bytesPerValue } from "../models/half-precision.js";
import { bundledQwenTokenizerDir } from "../models/pretrained.js";
import { parameterSpecs } from "../models/qwen2.js";
import { SCALE_SHAPES, scaleTokenizer, withLayers, writeRandomModelDir } from "../models/scale-fixture.js";
import { padBatch } from "../models/token-batch.js";
import { loadTokenizer, type Tokenizer } from "../models/tokenizer.js";
import { DataProto } from "../protocol/data-proto.js";
import { ResourcePool } from "../single-controller/resource-pool.js";
import { type BoundGroup, WorkerGroup, workerRole } from "../single-controller/worker-group.js";
import {
  ActorRolloutRefWorker,
  layoutForMiniBatches,
  type WorkerMemory,
} from "../workers/actor-rollout-ref.js";

/** The largest parameter of a config: its name, HF shape and bytes in float32 and in bf16. */
export function largestTensor(config: Qwen2Config): {
  name: string;
  shape: number[];
  fp32Bytes: number;
  bf16Bytes: number;
} {
  let best = parameterSpecs(config)[0]!;
  const size = (s: number[]) => s.reduce((a, b) => a * b, 1);
  for (const s of parameterSpecs(config)) if (size(s.shape) > size(best.shape)) best = s;
  const n = size(best.hfShape);
  return {
    name: best.name,
    shape: best.hfShape,
    fp32Bytes: n * bytesPerValue("float32"),
    bf16Bytes: n * bytesPerValue("bfloat16"),
  };
}

/** The prompts the probe generates from (a handful of ToRL-style questions). */
const PROMPTS = ["What is 17 * 23? Put the answer in \\boxed{}.", "Solve x^2 - 5x + 6 = 0.", "Sum 1..100?"];

export interface ScaleProbeOptions {
  config: Qwen2Config;
  tokenizer: Tokenizer;
  /** FSDP ranks (worker processes). Default 2. */
  ranks?: number;
  /** Prompts per step; each is sampled `n` times. Default 2 x n 2 = 4 rows (2 per rank). */
  prompts?: number;
  n?: number;
  /** Tokens generated per row (ignore_eos, so exactly this many). Default 16. */
  newTokens?: number;
  /** LoRA rank (actor_rollout_ref.model.lora_rank; alpha 2 x rank, all-linear); 0 or absent: full fine-tuning. */
  loraRank?: number;
  /**
   * Keep the reference's gathered weights between its passes (ref.fsdp_config.reshard_after_forward=false):
   * it is gathered once, and the actor's gathered arrays outlive its pass. Full fine-tuning only.
   */
  keepRef?: boolean;
  /**
   * The update reads the decoder layers generation gathered instead of gathering its own
   * (actor.fsdp_config.reshard_after_forward=false): faster, and a rank holds those layers beside the
   * gradient shard.
   */
  keepActorLayers?: boolean;
  /** Round the products' activations to bfloat16 (actor_rollout_ref.model.compute_dtype=bfloat16). */
  bf16Compute?: boolean;
  /**
   * GRPO steps on the same workers (default 1); the figures are the last step's. A later step rewrites
   * memory the first one wrote fresh (the optimizer's moments, the heap's growth, kept buffers): the
   * steady state of a training run.
   */
  steps?: number;
  log?: (line: string) => void;
}

/** What one phase cost a worker process. */
export interface PhaseUsage {
  /** CPU seconds, user and system. */
  cpuSeconds: number;
  /** Minor page faults: pages of fresh memory first written. */
  minorPageFaults: number;
}

export interface ScaleProbeResult {
  parameters: number;
  /** The LoRA rank the probe trained with; 0: full fine-tuning. */
  lora_rank: number;
  /** Whether the reference's gathered weights were kept between its passes (--keep-ref). */
  keep_ref: boolean;
  /** Whether the update read generation's gathered layers (--keep-actor-layers). */
  keep_actor_layers: boolean;
  /** The products' activations: float32, or bfloat16 with --bf16-compute. */
  compute_dtype: "float32" | "bfloat16";
  ranks: number;
  /** Decoder layers of the probed model (the architecture's own, or --layers). */
  layers: number;
  /** Rows generated and trained (all ranks), and each row's prompt and response lengths in tokens. */
  rows?: number;
  prompt_length?: number;
  response_length?: number;
  weight_file_bytes: number;
  largest_tensor: ReturnType<typeof largestTensor>;
  /** GRPO steps run (generate, both log-prob passes, update each). */
  steps: number;
  /** Seconds per phase that ran, in order (the last step's for the step's phases). */
  seconds: Record<string, number>;
  /** Each step's seconds of generate, old_log_prob, ref_log_prob and update_actor, in step order. */
  step_seconds: Record<string, number>[];
  /**
   * Per rank, after each phase that ran (the last step's for the step's phases): peak resident set, bytes
   * in tensors, weight bytes held.
   */
  memory: Record<string, WorkerMemory[]>;
  /** Per rank, what each phase after the spawn cost its worker process (the last step's for the step's phases). */
  usage: Record<string, PhaseUsage[]>;
  peak_rss_bytes_per_rank: number[];
  /**
   * Per rank, the bytes of its frozen shards (the reference's) published in /dev/shm: memory the rank
   * holds outside its resident set (counted there only while mapped), so a rank's whole footprint is its
   * peak plus these.
   */
  shm_bytes_per_rank: number[];
  /** The (last step's) update's metrics (actor/pg_loss, actor/grad_norm, ...), when it ran. */
  update_metrics?: Record<string, number>;
  /** Each step's `actor/grad_norm`, in step order (the first step's compares across code versions). */
  step_grad_norms: number[];
  /** The phase that failed and its error, when one did (the figures before it stand). */
  failed?: { phase: string; error: string };
}

type ActorGroup = BoundGroup<typeof ActorRolloutRefWorker>;

const WORKER_MODULE = new URL(
  `../workers/actor-rollout-ref${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`,
  import.meta.url,
).href;

/** Runs the probe (see the file comment); the model directory lives in a temp dir removed at the end. */
export async function runScaleProbe(opts: ScaleProbeOptions): Promise<ScaleProbeResult> {
  const log = opts.log ?? (() => {});
  const ranks = opts.ranks ?? 2;
  const n = opts.n ?? 2;
  const prompts = opts.prompts ?? 2;
  const newTokens = opts.newTokens ?? 16;
  const dir = mkdtempSync(join(tmpdir(), "torl-scale-"));
  const seconds: Record<string, number> = {};
  const memory: Record<string, WorkerMemory[]> = {};
  const usage: Record<string, PhaseUsage[]> = {};
  const loraRank = opts.loraRank ?? 0;
  const steps = opts.steps ?? 1;
  if (!Number.isInteger(steps) || steps < 1)
    throw new RangeError(`bench scale: steps must be a whole number of at least 1, got ${steps}`);
  const stepSeconds: Record<string, number>[] = [];
  const result: ScaleProbeResult = {
    parameters: 0,
    lora_rank: loraRank,
    keep_ref: opts.keepRef === true,
    keep_actor_layers: opts.keepActorLayers === true,
    compute_dtype: opts.bf16Compute ? "bfloat16" : "float32",
    ranks,
    layers: opts.config.numHiddenLayers,
    weight_file_bytes: 0,
    largest_tensor: largestTensor(opts.config),
    steps,
    seconds,
    step_seconds: stepSeconds,
    step_grad_norms: [],
    memory,
    usage,
    peak_rss_bytes_per_rank: [],
    shm_bytes_per_rank: [],
  };
  const startedRuntime = !isInitialized();
  let wg: ActorGroup | undefined;
  let phase = "fixture";
  let stepLabel = "";
  let lastMemory: WorkerMemory[] | undefined;
  const timed = async <T>(name: string, f: () => Promise<T>): Promise<T> => {
    phase = name;
    const t0 = performance.now();
    const out = await f();
    seconds[name] = (performance.now() - t0) / 1000;
    if (wg) {
      const after = (await wg.memoryInfo()) as WorkerMemory[];
      memory[name] = after;
      // what each worker spent over the phase: its counts now less after the phase that ran before it
      const before = lastMemory;
      if (before)
        usage[name] = after.map((m, r) => ({
          cpuSeconds: m.cpuSeconds - before[r]!.cpuSeconds,
          minorPageFaults: m.minorPageFaults - before[r]!.minorPageFaults,
        }));
      lastMemory = after;
    }
    log(`${stepLabel}${name}: ${seconds[name]!.toFixed(1)} s`);
    return out;
  };
  /** One GRPO step of the probe: generate, both log-prob passes, advantages, the actor's update. */
  const grpoStep = async (group: ActorGroup, tb: ReturnType<typeof padBatch>, step: number) => {
    const batch = await timed("generate", () =>
      group.generateSequences(
        DataProto.fromDict(
          {
            input_ids: { data: tb.ids, shape: [tb.batch, tb.length] },
            attention_mask: { data: tb.mask, shape: [tb.batch, tb.length] },
          },
          {},
          { seed: step },
        ),
      ),
    );
    result.rows = batch.length;
    result.response_length = batch.tensor("responses").shape[1]!;
    result.prompt_length = batch.tensor("input_ids").shape[1]! - result.response_length;
    batch.union(await timed("old_log_prob", () => group.computeLogProb(batch)));
    batch.union(await timed("ref_log_prob", () => group.computeRefLogProb(batch)));
    // a seeded score per row (the weights are random: there is nothing to grade), GRPO over each prompt's n
    const mask = batch.tensor("response_mask");
    const R = mask.shape[1]!;
    const rewards = new Float32Array(batch.length * R);
    for (let b = 0; b < batch.length; b++) rewards[b * R + R - 1] = (b * 7919) % 3 === 0 ? 1 : -1;
    const { advantages } = computeAdvantage("grpo", {
      tokenLevelRewards: { data: rewards, shape: [batch.length, R] },
      responseMask: mask,
      index: Array.from({ length: batch.length }, (_, i) => Math.floor(i / n)),
    });
    batch.union(DataProto.fromDict({ advantages }));
    const metrics = await timed("update_actor", () =>
      group.updateActor(layoutForMiniBatches(batch, ranks, prompts * n)),
    );
    result.update_metrics = (metrics as Record<string, number>[])[0];
    const gradNorm = result.update_metrics?.["actor/grad_norm"];
    result.step_grad_norms.push(gradNorm ?? Number.NaN);
    if (!Number.isFinite(gradNorm))
      throw new Error(`the update's gradient norm is ${gradNorm}: the step did not train`);
  };
  try {
    const written = await timed("fixture", async () =>
      writeRandomModelDir(dir, opts.config, opts.tokenizer, { seed: 1 }),
    );
    result.parameters = written.parameters;
    result.weight_file_bytes = written.weightBytes;
    const cfg = loadTrainerConfig({
      overrides: [
        `actor_rollout_ref.model.path=${dir}`,
        "actor_rollout_ref.model.dtype=bfloat16",
        ...(opts.bf16Compute ? ["actor_rollout_ref.model.compute_dtype=bfloat16"] : []),
        // with LoRA the reference is the actor's base (nothing of its own to offload)
        ...(loraRank > 0
          ? [
              `actor_rollout_ref.model.lora_rank=${loraRank}`,
              `actor_rollout_ref.model.lora_alpha=${2 * loraRank}`,
              "actor_rollout_ref.model.target_modules=all-linear",
            ]
          : [
              "actor_rollout_ref.ref.fsdp_config.param_offload=true",
              ...(opts.keepRef ? ["actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false"] : []),
            ]),
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        ...(opts.keepActorLayers ? ["actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false"] : []),
        `actor_rollout_ref.rollout.n=${n}`,
        "actor_rollout_ref.rollout.ignore_eos=true",
        `actor_rollout_ref.actor.ppo_mini_batch_size=${prompts}`,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=true",
        `data.train_batch_size=${prompts}`,
        "data.max_prompt_length=32",
        `data.max_response_length=${newTokens}`,
        `trainer.n_gpus_per_node=${ranks}`,
      ],
    });
    if (startedRuntime) await init({ numCpus: ranks });
    wg = await timed("spawn", async () => {
      const pool = new ResourcePool({ processOnNodes: [ranks], useGpu: false, namePrefix: "scale" });
      return (await WorkerGroup.create(
        pool,
        workerRole(ActorRolloutRefWorker, { module: WORKER_MODULE }, { config: cfg }),
        { name: `scale-${Date.now().toString(36)}`, collective: true },
      )) as ActorGroup;
    });
    const group = wg;
    await timed("load", () => group.initModel());
    const rows = Array.from({ length: prompts * n }, (_, i) =>
      opts.tokenizer.encode(PROMPTS[Math.floor(i / n) % PROMPTS.length]!),
    );
    const tb = padBatch(rows, "left", opts.tokenizer.padTokenId);
    for (let step = 1; step <= steps; step++) {
      stepLabel = steps > 1 ? `step ${step}/${steps} ` : "";
      await grpoStep(group, tb, step);
      stepSeconds.push(Object.fromEntries(SCALE_PHASES.map((p) => [p, seconds[p]!])));
    }
  } catch (error) {
    result.failed = { phase, error: (error as Error).message ?? String(error) };
    log(`${phase} failed: ${result.failed.error}`);
  } finally {
    const last = Object.values(memory).at(-1);
    result.peak_rss_bytes_per_rank = last?.map((m) => m.peakRssBytes) ?? [];
    result.shm_bytes_per_rank = last?.map((m) => m.publishedShardBytes) ?? [];
    for (const m of last ?? []) log(memoryLine(m));
    await wg?.shutdown().catch(() => {});
    if (startedRuntime) await shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}

/** Bytes as decimal gigabytes with two decimals, as the probe's lines print them. */
export function gigabytes(bytes: number): string {
  return (bytes / 1e9).toFixed(2);
}

/** Where a rank's memory goes: what it holds by kind, in GB, against its peak resident set. */
export function memoryLine(m: WorkerMemory): string {
  const gb = gigabytes;
  return (
    `rank ${m.rank}: peak ${gb(m.peakRssBytes)} GB; shard and AdamW moments ${gb(m.actorShardBytes)}, ` +
    `gathered weights kept ${gb(m.gatherBufferBytes)} (${gb(m.gatherInGradientBytes)} of it in the gradient shard's memory), ` +
    `the update's gradient buffers ${gb(m.updateBufferBytes)} (and ${gb(m.updateGatherInGradientBytes)} of gathered weights in its gradient shard's memory), ` +
    `wasm heap ${gb(m.backendHeapBytes)} (reserved), reference shard ${gb(m.refShardBytes)} ` +
    `(${gb(m.publishedShardBytes)} of it in /dev/shm, read there by ${gb(m.mappedShardBytes)} of mappings)`
  );
}

const USAGE = `usage: pnpm torl bench scale [--json] [--ranks N] [--layers N] [--arch ${Object.keys(SCALE_SHAPES).join("|")}] [--lora-rank R] [--steps N] [--keep-ref] [--keep-actor-layers] [--bf16-compute]

The real-size probe (about 5 minutes on 2 idle cores; about 5 GB of memory per rank at its peak with
2 ranks, and up to about 12 GB for the PyTorch side after it, so give it an otherwise idle 24 GB machine): the shapes of --arch (default
qwen2.5-0.5b; qwen3-0.6b and llama-3.2-1b are larger) with random bf16 weights (written to a
temp dir, no downloads) load in N FSDP ranks (default 2) on the default CPU backend, generate 16 tokens
per row with the KV cache and run one GRPO step (--steps N: N). Prints seconds per phase, peak resident
set per rank, the largest tensor and the update's metrics; --json prints them as one JSON object last.
A line per rank at the end says where its memory goes: the shard and its AdamW moments, the gathered
weights kept between phases, the update's gradient buffers (and the gathered weights it read from its
gradient shard's memory), the wasm heap and the reference's shard.
--layers N keeps every shape but the number of decoder layers (default the architecture's own): the
vocabulary and each layer cost what they cost at full size, in a fraction of the memory (2 layers of
qwen2.5-0.5b: about 1.5 GB per rank).
--lora-rank R runs the probe again with LoRA (rank R, alpha 2R, all-linear) after full fine-tuning, in
the same invocation: its figures are under "lora" (twice the time; the LoRA run needs less memory).
--keep-ref keeps the reference's gathered weights between its passes
(actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false): it is gathered in the first step only,
and the actor's gathered arrays outlive the reference's pass, so the update takes them back; each rank
then holds the whole reference in bf16 too (about 1 GB more at this size). Full fine-tuning only
(keep_ref in the JSON).
--keep-actor-layers has the update read the decoder layers generation gathered instead of gathering each
layer for its forward and again for its backward (actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false):
the update is faster, and each rank holds those layers beside the gradient shard (about 0.8 GB more at
the peak at this size; keep_actor_layers in the JSON). Full fine-tuning only (with LoRA the update reads
the layers it holds either way).
--bf16-compute rounds the activations of every product with the weights to bfloat16
(actor_rollout_ref.model.compute_dtype=bfloat16), as PyTorch's bfloat16 side computes (compute_dtype in
the JSON).
--steps N runs N GRPO steps on the same workers (default 1) and reports the last one's figures, each
step's seconds under step_seconds: the first step also pays for memory written for the first time (the
optimizer's moments, buffers kept from then on), a later one is the steady state of training.
--json adds scale_<phase>_seconds_torl for the phases generate, old_log_prob, ref_log_prob and
update_actor (the full fine-tuning run's: scale_fine_tuning "full"; the last step's: scale_steps),
scale_<phase>_cpu_seconds_rank<r> (the CPU seconds of rank r's worker over the phase),
scale_<phase>_fresh_mib_rank<r> (the fresh memory it first wrote in the phase, from its minor page
faults times scale_page_bytes, the kernel's page size from getconf), scale_memory_bytes_torl (the
largest rank's footprint: its peak resident set plus its reference shard in /dev/shm, shm_bytes_per_rank),
and torch: the PyTorch side's version, or why it did not run (the installed command has none; the
torl-ts repository's has).`;

/** `bench scale`'s flags, for a recipe's command that extends it (the ToRL recipe's PyTorch peer). */
export const SCALE_FLAGS = {
  ranks: { type: "integer", min: 1 },
  arch: { type: "string", choices: Object.keys(SCALE_SHAPES) as (keyof typeof SCALE_SHAPES)[] },
  layers: { type: "integer", min: 1 },
  "lora-rank": { type: "integer", min: 1 },
  steps: { type: "integer", min: 1 },
  "keep-ref": { type: "boolean" },
  "keep-actor-layers": { type: "boolean" },
  "bf16-compute": { type: "boolean" },
} as const;

/** The probe's model config for `bench scale`'s flags (--arch, --layers). */
export function scaleConfig(flags: { arch?: keyof typeof SCALE_SHAPES; layers?: number }): Qwen2Config {
  return withLayers(SCALE_SHAPES[flags.arch ?? "qwen2.5-0.5b"], flags.layers);
}

/**
 * Runs the probe for `bench scale`'s flags, logging each phase to stdout; with --lora-rank, again with
 * LoRA after full fine-tuning (its figures under `lora`).
 */
export async function runScaleProbeFor(flags: {
  arch?: keyof typeof SCALE_SHAPES;
  layers?: number;
  ranks?: number;
  "lora-rank"?: number;
  steps?: number;
  "keep-ref"?: boolean;
  "keep-actor-layers"?: boolean;
  "bf16-compute"?: boolean;
}): Promise<ScaleProbeResult & { lora?: ScaleProbeResult }> {
  const config = scaleConfig(flags);
  const probe = (loraRank?: number) =>
    runScaleProbe({
      config,
      tokenizer: scaleTokenizer(config, loadTokenizer(bundledQwenTokenizerDir())),
      ranks: flags.ranks ?? 2,
      loraRank,
      keepRef: !loraRank && flags["keep-ref"] === true,
      keepActorLayers: !loraRank && flags["keep-actor-layers"] === true,
      bf16Compute: flags["bf16-compute"] === true,
      steps: flags.steps,
      log: (l) => console.log(loraRank ? `[lora ${loraRank}] ${l}` : l),
    });
  const full = await probe();
  const rank = flags["lora-rank"];
  return rank ? { ...full, lora: await probe(rank) } : full;
}

export const SCALE_USAGE = USAGE;

/** The phases `bench scale` reports side by side (scale_<phase>_seconds_*), in the probe's names. */
export const SCALE_PHASES = ["generate", "old_log_prob", "ref_log_prob", "update_actor"] as const;
/** What the scale_* figures measure: the full fine-tuning run (a LoRA run's figures are under `lora`). */
export const SCALE_FINE_TUNING = "full";

let pageBytesFound: number | string | undefined;

/**
 * The kernel's page size, the unit minor page faults count in (4 KiB on x86-64; 16 or 64 KiB on some
 * aarch64 kernels), from `getconf PAGESIZE`; a string saying why where it cannot be read.
 */
export function systemPageBytes(): number | string {
  if (pageBytesFound === undefined) {
    try {
      const n = Number(execFileSync("getconf", ["PAGESIZE"], { encoding: "utf8", timeout: 10_000 }).trim());
      pageBytesFound = Number.isInteger(n) && n > 0 ? n : `getconf PAGESIZE printed ${JSON.stringify(n)}`;
    } catch (e) {
      pageBytesFound = `getconf PAGESIZE failed: ${(e as Error).message.split("\n")[0]}`;
    }
  }
  return pageBytesFound;
}

/** A figure to 4 significant digits. */
export function scaleRound(x: number): number {
  return Number(x.toPrecision(4));
}

/**
 * The probe's figures under the names `bench scale --json` carries: `scale_<phase>_seconds_torl` for each
 * phase it reached, `scale_<phase>_cpu_seconds_rank<r>` (the CPU seconds of rank r's worker process over
 * the phase: on a loaded machine a steadier figure than the wall clock), `scale_steps` (the figures are
 * the last of that many steps'), `scale_<phase>_fresh_mib_rank<r>`
 * (the fresh memory rank r first wrote in the phase: its minor page faults times `pageBytes`, given as
 * `scale_page_bytes`; none where the page size is unknown), `scale_memory_bytes_torl` (the largest of the
 * ranks' footprints: peak resident set plus the rank's shards in /dev/shm) and `scale_fine_tuning` (what
 * they measure).
 */
export function scaleTorlFigures(
  probe: ScaleProbeResult,
  pageBytes: number | string = systemPageBytes(),
): Record<string, number | string> {
  const out: Record<string, number | string> = {
    scale_fine_tuning: SCALE_FINE_TUNING,
    scale_steps: probe.steps,
    // a page size that cannot be read says why, and no fresh-memory figure is given in a guessed unit
    scale_page_bytes: typeof pageBytes === "number" ? pageBytes : `unknown (${pageBytes})`,
  };
  // a rank's footprint: its peak resident set and its share of /dev/shm (the published reference shard)
  const footprints = probe.peak_rss_bytes_per_rank.map((peak, r) => peak + probe.shm_bytes_per_rank[r]!);
  if (footprints.length > 0) out.scale_memory_bytes_torl = Math.max(...footprints);
  for (const phase of SCALE_PHASES) {
    const mine = probe.seconds[phase];
    if (mine !== undefined) out[`scale_${phase}_seconds_torl`] = scaleRound(mine);
    for (const [r, u] of (probe.usage[phase] ?? []).entries()) {
      out[`scale_${phase}_cpu_seconds_rank${r}`] = scaleRound(u.cpuSeconds);
      if (typeof pageBytes === "number")
        out[`scale_${phase}_fresh_mib_rank${r}`] = scaleRound((u.minorPageFaults * pageBytes) / 2 ** 20);
    }
  }
  return out;
}

/** `torch` of the installed command, which has no PyTorch side. */
export const SCALE_NO_TORCH =
  "not run: this bench scale has no PyTorch side; the torl-ts repository's has (examples/torl/scripts/bench_scale_peer.py)";

/** `bench scale --json` of the package: the probe with its scale_* figures, and why no torch figures. */
export function scaleJson(result: ScaleProbeResult & { lora?: ScaleProbeResult }): Record<string, unknown> {
  return { ...result, ...scaleTorlFigures(result), torch: SCALE_NO_TORCH };
}

type ScaleJson = ScaleProbeResult & { lora?: ScaleProbeResult } & Record<string, unknown>;

export const benchScaleCommand = defineBench({
  summary:
    "real-size probe: Qwen2.5-0.5B (or Qwen3-0.6B, Llama-3.2-1B) shapes, bf16, 2 FSDP ranks, one GRPO step",
  usage: USAGE,
  flags: SCALE_FLAGS,
  measure: async (flags) => scaleJson(await runScaleProbeFor(flags)) as ScaleJson,
  show(result, flags) {
    if (!flags.json) console.log(JSON.stringify(result, null, 2));
  },
  exitCode: (result) => (result.failed || result.lora?.failed ? 1 : 0),
});
