/**
 * `pnpm torl bench memory [--json]`: the bytes one rank holds to train a ~25M-parameter Qwen2 (8 layers)
 * with FSDP over N ranks (per decoder layer with gradient checkpointing, layer-sharding.ts), and the peak activation bytes of a micro-batch's forward + backward
 * with and without gradient checkpointing.
 *
 * How the bytes are measured:
 * - state (parameters + gradients + optimizer state per rank): the arrays rank r's ShardedParameters
 *   allocates for N ranks (its parameter shard, a gradient shard of the same size, AdamW's two moments),
 *   the largest rank's; the same class the workers train with, so this is accounting of what a rank
 *   holds, not an estimate. Transient during a step: one unit's full gradient (a decoder layer, or the
 *   parameters outside the layers) and one layer's gathered weights, reported apart.
 * - activations: the data buffers tfjs creates during one forward + backward of a micro-batch, each
 *   counted once from its creation until the backend frees it (models/peak-bytes.ts; buffers that
 *   existed before, the parameters, are not counted); the peak of their sum, once with every buffer
 *   (fwd_bwd_peak_bytes) and once without the parameters' gradients the pass returns (those are state).
 * - LoRA (rank --lora-rank, all-linear): the same accounting with the adapters as the sharded, trained
 *   parameters (ShardedParameters of the adapters) and the frozen base's shard (FrozenShards, float32 as
 *   model.dtype's default); the reference policy is the base with the adapters off, so it adds nothing,
 *   where full fine-tuning holds a reference shard of the whole model per rank.
 */
import { defineBench } from "@torl-ts/core/cli";
import { loadTrainerConfig } from "../config/index.js";
import { selectBackend } from "../models/backend.js";
import { countParameters, makeQwen2Config, type Qwen2Config } from "../models/config.js";
import { initialAdapterValues, LORA_TARGET_MODULES } from "../models/lora.js";
import { forwardBackwardPeak } from "../models/peak-bytes.js";
import { Qwen2Model } from "../models/qwen2.js";
import { randomBatch } from "../models/timing.js";
import { measureWeightBytes } from "../models/weight-bytes.js";
import { FrozenShards } from "../workers/frozen-shards.js";
import type { OptimSettings } from "../workers/optim.js";
import { ShardedParameters } from "../workers/sharded-parameters.js";

/** ~25M parameters in 8 decoder layers (hidden 512, GQA 8/2 heads, vocab 6144, tied embeddings). */
export const BENCH_MEMORY_CONFIG: Qwen2Config = makeQwen2Config({
  vocabSize: 6144,
  hiddenSize: 512,
  numHiddenLayers: 8,
  numAttentionHeads: 8,
  numKeyValueHeads: 2,
  intermediateSize: 1408,
  tieWordEmbeddings: true,
});

/** What one rank of N holds for training (bytes), by ShardedParameters' allocations. */
export interface RankState {
  ranks: number;
  param_shard_bytes: number;
  gradient_shard_bytes: number;
  optimizer_bytes: number;
  /** The three together, the largest rank's. */
  state_bytes: number;
  /** Held during a step for one unit at a time: its full gradient (the largest unit). */
  transient_unit_gradient_bytes: number;
}

export function rankState(values: Map<string, Float32Array>, ranks: number): RankState {
  const optim = loadTrainerConfig().actor_rollout_ref.actor.optim as OptimSettings;
  let worst: RankState | undefined;
  for (let rank = 0; rank < ranks; rank++) {
    // The constructor only lays the shard out; the group is named for its check, never called.
    const s = new ShardedParameters(values, { rank, worldSize: ranks, group: "bench-memory" }, optim);
    const grad = s.newGradient();
    const state: RankState = {
      ranks,
      param_shard_bytes: s.params.byteLength,
      gradient_shard_bytes: grad.byteLength,
      optimizer_bytes: s.optim.stateBytes,
      state_bytes: s.params.byteLength + grad.byteLength + s.optim.stateBytes,
      transient_unit_gradient_bytes: 4 * Math.max(...s.units.map((u) => u.end - u.start)),
    };
    if (!worst || state.state_bytes > worst.state_bytes) worst = state;
  }
  return worst!;
}

export interface MemoryBenchResult {
  config: { parameters: number; layers: number; hidden: number; vocab: number; rows: number; length: number };
  /** Per-rank state for each N measured. */
  ranks: RankState[];
  /**
   * The headline figures, with the weight-storage ones: weight_bytes_fp32 / weight_bytes_bf16 (what the
   * same model holds between passes in float32 tensors vs bf16 host arrays, models/weight-bytes.ts).
   */
  figures: Record<string, number>;
  method: string;
}

/**
 * What one rank of N holds with LoRA (rank `loraRank`, all-linear) beside full fine-tuning (bytes): the
 * adapters' state (parameters + gradients + AdamW, as rankState), the frozen base's shard, and the
 * reference: full fine-tuning's is a shard of the whole model, LoRA's is the base with the adapters off.
 */
export function loraRankFigures(
  config: Qwen2Config,
  values: Map<string, Float32Array>,
  loraRank: number,
  ranks: number,
): Record<string, number> {
  const lora = { rank: loraRank, alpha: 2 * loraRank, targetModules: [...LORA_TARGET_MODULES] };
  const adapters = rankState(initialAdapterValues(config, lora), ranks);
  let shard = 0;
  for (let rank = 0; rank < ranks; rank++) {
    const ctx = { rank, worldSize: ranks, group: "bench-memory" };
    // the frozen base (LoRA) and the reference (full fine-tuning) are the same kind of shard
    shard = Math.max(shard, new FrozenShards(values, ctx, "float32").bytes);
  }
  return {
    [`lora_state_bytes_per_rank_n${ranks}`]: adapters.state_bytes,
    [`lora_base_shard_bytes_per_rank_n${ranks}`]: shard,
    [`reference_bytes_per_rank_n${ranks}`]: shard,
    [`lora_reference_bytes_per_rank_n${ranks}`]: 0,
  };
}

export async function runMemoryBench(options: {
  config?: Qwen2Config;
  ranks?: number[];
  rows?: number;
  length?: number;
  /** LoRA rank of the LoRA figures (default 8). */
  loraRank?: number;
  log?: (line: string) => void;
}): Promise<MemoryBenchResult> {
  const config = options.config ?? BENCH_MEMORY_CONFIG;
  const rankCounts = options.ranks ?? [1, 2, 4];
  const rows = options.rows ?? 2;
  const length = options.length ?? 256;
  const log = options.log ?? (() => {});
  const values = Qwen2Model.randomParameters(config, { seed: 1 });
  const ranks = rankCounts.map((n) => rankState(values, n));
  for (const r of ranks)
    log(
      `N=${r.ranks}: state ${r.state_bytes} bytes per rank (params ${r.param_shard_bytes}, grads ${r.gradient_shard_bytes}, AdamW ${r.optimizer_bytes})`,
    );
  const model = new Qwen2Model(config, values);
  try {
    const batch = randomBatch(rows, length, config.vocabSize, 7);
    const plain = await forwardBackwardPeak(model, batch);
    log(`activations: peak ${plain.activations} bytes (${plain.peak} with the parameters' gradients)`);
    model.gradientCheckpointing = true;
    const checkpointed = await forwardBackwardPeak(model, batch);
    log(`checkpointed: peak ${checkpointed.activations} bytes (${checkpointed.peak} with gradients)`);
    const figures: Record<string, number> = {};
    for (const r of ranks) figures[`state_bytes_per_rank_n${r.ranks}`] = r.state_bytes;
    const loraRank = options.loraRank ?? 8;
    figures.lora_rank = loraRank;
    for (const n of rankCounts) Object.assign(figures, loraRankFigures(config, values, loraRank, n));
    log(
      `LoRA rank ${loraRank}: state ${rankCounts.map((n) => figures[`lora_state_bytes_per_rank_n${n}`]).join(" / ")} bytes per rank for N = ${rankCounts.join(" / ")}, the reference adds nothing (the base with the adapters off)`,
    );
    figures.activation_peak_bytes = plain.activations;
    figures.activation_peak_bytes_checkpointed = checkpointed.activations;
    figures.activation_checkpointing_ratio = plain.activations / checkpointed.activations;
    figures.fwd_bwd_peak_bytes = plain.peak;
    figures.fwd_bwd_peak_bytes_checkpointed = checkpointed.peak;
    const weights = measureWeightBytes(config, values);
    log(`weights between passes: ${weights.weight_bytes_fp32} bytes fp32, ${weights.weight_bytes_bf16} bf16`);
    figures.weight_bytes_fp32 = weights.weight_bytes_fp32;
    figures.weight_bytes_bf16 = weights.weight_bytes_bf16;
    figures.model_tensor_bytes_fp32 = weights.model_tensor_bytes_fp32;
    figures.model_tensor_bytes_bf16 = weights.model_tensor_bytes_bf16;
    return {
      config: {
        parameters: countParameters(config),
        layers: config.numHiddenLayers,
        hidden: config.hiddenSize,
        vocab: config.vocabSize,
        rows,
        length,
      },
      ranks,
      figures,
      method:
        "state: ShardedParameters' allocations for rank r of N (largest rank); activations: peak bytes of the tensor data buffers created during one forward+backward (each buffer once, from creation to free), without the returned parameter gradients; weights: the bytes a float32 and a bf16 model of the config hold between passes (weight tensors vs host arrays) and tf.memory()'s growth when each is built; LoRA: the same accounting of the adapters (ShardedParameters) and the frozen base's shard (FrozenShards, float32); LoRA's reference is the base with the adapters off (no bytes of its own), full fine-tuning's a FrozenShards of the whole model",
    };
  } finally {
    model.dispose();
  }
}

export const benchMemoryCommand = defineBench({
  summary:
    "benchmark training memory: per-rank FSDP state for N ranks, activation peaks with and without checkpointing",
  usage: [
    "usage: pnpm torl bench memory [--json] [--ranks 1,2,4] [--rows 2] [--length 256] [--lora-rank 8]",
    "",
    "For a ~25M-parameter Qwen2 (8 layers, hidden 512, vocab 6144), on the default backend:",
    "  state_bytes_per_rank_n<N>           parameters + gradients + optimizer state one rank holds with",
    "                                      FSDP over N ranks (target: falls as 1/N within 10%)",
    "  activation_peak_bytes               peak activation bytes of a forward + backward (--rows x --length)",
    "  activation_peak_bytes_checkpointed  the same with gradient checkpointing (target: >= 3x less)",
    "  fwd_bwd_peak_bytes(_checkpointed)   the raw peaks, the parameters' gradients included",
    "  lora_state_bytes_per_rank_n<N>      LoRA (--lora-rank R, default 8, all-linear): the adapters' parameters +",
    "                                      gradients + AdamW state per rank; the frozen base's shard is",
    "                                      lora_base_shard_bytes_per_rank_n<N>",
    "  reference_bytes_per_rank_n<N>       the reference's shard with full fine-tuning; with LoRA",
    "                                      (lora_reference_bytes_per_rank_n<N>) 0: the base with the adapters off",
    "How each is measured is in the `method` field. The last line is one JSON object.",
  ].join("\n"),
  flags: {
    ranks: { type: "integers", min: 1 },
    rows: { type: "integer", min: 1 },
    length: { type: "integer", min: 2 },
    "lora-rank": { type: "integer", min: 1 },
  },
  async measure(flags) {
    await selectBackend({ log: null });
    return runMemoryBench({
      ranks: flags.ranks,
      rows: flags.rows,
      length: flags.length,
      loraRank: flags["lora-rank"],
      log: (s) => console.log(s),
    });
  },
  show(result, flags) {
    if (!flags.json) console.table(result.figures);
  },
});
