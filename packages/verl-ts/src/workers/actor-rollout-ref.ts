/**
 * veRL's ActorRolloutRefWorker, FSDP-style, for the hybrid engine: one process per bundle holds the actor
 * (trained), the rollout (generation on the actor's gathered weights, colocated in the same process) and
 * the reference policy (a frozen copy).
 *
 * The actor's weights are sharded at rest (rollout.free_cache_engine, veRL's default true): between
 * phases a rank holds only its FSDP shard (float32 master + AdamW state). Generation, the old log-prob
 * pass and the update all-gather the full weights, in the storage dtype (model.dtype), when they begin and
 * free them when they end, as veRL's hybrid engine hands the rollout engine the full weights and releases
 * them after; an update with gradient checkpointing gathers only the parameters around the decoder layers,
 * each layer being gathered for its own forward and backward (layer-sharding.ts). With
 * free_cache_engine=false the gathered copy stays between phases (one gather per optimizer step, none at
 * a phase's start: faster, the full weights on every rank). Either way the model computes with the
 * same values: the master shard rounded into model.dtype. Over more than one rank the reference policy is
 * sharded at rest too (frozen-shards.ts): its log-prob pass gathers it and frees it after.
 *
 * Sharding and the global loss aggregation: see fsdp.ts (shared with the critic).
 */
import * as tf from "@tensorflow/tfjs";
import { collective, getCallSignal } from "@torl-ts/actors";
import { AlgorithmInputError } from "../algorithms/masked.js";
import type { PolicyLossOptions } from "../algorithms/policy-loss.js";
import { getPolicyLoss, runPolicyLoss } from "../algorithms/policy-loss-registry.js";
import { aggLossTf, asTfTensor, klLossTf } from "../algorithms/tf-ops.js";
import { miniBatchRows } from "../config/derived.js";
import type { RolloutConfig, TrainerConfig } from "../config/types.js";
import { selectBackend } from "../models/backend.js";
import { layerwiseLogProbs } from "../models/layerwise.js";
import { computeLogProbsOfBatches, type HeadBlocks, tokenLogProbs } from "../models/logprobs.js";
import { initialAdapterValues, loraConfigOf } from "../models/lora.js";
import { nativeBlas } from "../models/native-blas.js";
import { setActivationDtype } from "../models/native-matmul-bf16.js";
import { nativeMatmulActive } from "../models/native-state.js";
import { loadModelValues } from "../models/pretrained.js";
import { bitsOnlyVariables, Qwen2Model } from "../models/qwen2.js";
import { loadTokenizer, type Tokenizer } from "../models/tokenizer.js";
import { backendHeapBytes } from "../models/wasm-heap.js";
import { DataProto } from "../protocol/data-proto.js";
import { agentLoopRollout } from "../rollout/agent-loop.js";
import { promptsFromDataProto } from "../rollout/batch.js";
import { agentTrainingBatch, multiTurnConfig, multiTurnSettings } from "../rollout/multi-turn.js";
import { buildRolloutTool } from "../rollout/rollout-tool.js";
import { rolloutPromptBatch, type TirRolloutOptions, type TirSample } from "../rollout/tir.js";
import type { Tool } from "../rollout/tool.js";
import type { ToolSpec } from "../rollout/tool-config.js";
import { Dispatch, type Registrations } from "../single-controller/registration.js";
import { importExternalLib } from "./external-lib.js";
import { FlatLayout } from "./flat-params.js";
import { FrozenShards } from "./frozen-shards.js";
import {
  microBatches,
  padColumns,
  perWorkerRows,
  responseTokenBatch,
  rowColumns,
  rowsOf,
  ShardedParameters,
  ShardedWorker,
  type ShardInfo,
  WorkerStateError,
} from "./fsdp.js";
import { GatherBuffers, type GatherTake } from "./gather-buffers.js";
import { isLayerUnit, layerTensorsOf, layerUnitKey } from "./layer-sharding.js";
import { placeRows } from "./micro-batches.js";
import type { OptimSettings } from "./optim.js";
import { allReduceMax } from "./rank-context.js";
import { type FlatUnit, shardedLayout } from "./sharded-parameters.js";
import { streamedChunk, tagChunk, WeightSwapGate } from "./weight-swap.js";

export type { ToolSpec };

export interface ActorRolloutRefOptions {
  /** The trainer config (plain object, as loaded). */
  config: TrainerConfig;
  /**
   * Which parts this worker holds: actor + rollout + ref (default), actor + rollout, ref only, or a
   * rollout only (the separate rollout workers of trainer.mode one_step_off / fully_async: full weights,
   * not trained, updated by receiveWeights).
   */
  role?: "actor_rollout_ref" | "actor_rollout" | "ref" | "rollout";
  /** The rollout's tool (the trainer gives rolloutToolSpec's); null or absent for plain generation. */
  tool?: ToolSpec | null;
}

/** A worker's memory as memoryInfo reports it (bytes). */
export interface WorkerMemory {
  rank: number;
  /** tf.memory().numBytes: every tensor of the process. */
  tensorBytes: number;
  /** The actor's full weights held now, in model.dtype (0 between phases when sharded at rest). */
  actorWeightBytes: number;
  actorWeightTensorBytes: number;
  /** The actor's FSDP state on this rank (host arrays): float32 parameter shard + AdamW moments. */
  actorShardBytes: number;
  /** The reference's full weights held now, in model.dtype (0 between its passes when sharded at rest). */
  refWeightBytes: number;
  refWeightTensorBytes: number;
  /** The reference's FSDP shard on this rank, in model.dtype (sharded at rest over more than one rank). */
  refShardBytes: number;
  /**
   * With LoRA (model.lora_rank > 0): the reference is the actor's base with the adapters switched off, no
   * copy of its own (refWeightBytes and refShardBytes are 0).
   */
  refIsActorBase: boolean;
  /** With LoRA: the frozen base's shard on this rank, in model.dtype (sharded at rest); else 0. */
  actorBaseShardBytes: number;
  /**
   * Of refShardBytes and actorBaseShardBytes, the bytes in /dev/shm (shared memory, outside the resident
   * set): published where the ranks share a host (FrozenShards).
   */
  publishedShardBytes: number;
  /**
   * Bytes of every rank's published shards this rank maps and reads in place (the addon's mapFile): the
   * reference's layer-by-layer pass reads its layers there, nothing copied. Mapped pages it reads count in
   * the resident set until the pass lets them go, layer by layer.
   */
  mappedShardBytes: number;
  /**
   * Bytes of mapped pages the reference's passes let go block by block as their tied LM head read them
   * (LogProbOptions.headBlock; every pass's, counted each time): the mapped embedding is never resident
   * whole. 0 where the head is read whole (not mapped, untied, at most 8 scored positions per head pass,
   * or products off the AMX tiles).
   */
  refHeadReleasedBytes: number;
  /**
   * Bytes of the reference's decoder-layer matrices (every rank's) held in the AMX tiles' layout, which
   * its layer-by-layer passes read without packing them: where the model is bfloat16, its products run on
   * the tiles and ref.fsdp_config.reshard_after_forward holds; else 0.
   */
  refTileLayoutBytes: number;
  /** With LoRA: the adapters' parameters (the trained ones); else 0. */
  adapterParameters: number;
  /**
   * Arrays kept for the gathers of the next phase (sharded at rest): between phases no model's weights are
   * in them, but they stay allocated, up to one model's weights in model.dtype (gather-buffers.ts).
   */
  gatherBufferBytes: number;
  /**
   * Of gatherBufferBytes, the arrays that lie in the update's gradient shard's memory (idle between
   * updates: generation's and the log-prob passes' decoder layers, FSDP per layer sharded at rest).
   */
  gatherInGradientBytes: number;
  /**
   * Bytes of gathers not made so far because the kept arrays still held them (the old log-prob pass right
   * after generation, with no optimizer step between, takes generation's gathered bits back).
   */
  gatherReusedBytes: number;
  /**
   * Bytes of the units around the layers (the embedding) that the last update read from its own pieces of
   * its gradient shard's memory, gathered there or left there by the phase before: FSDP per layer sharded
   * at rest with reshard_after_forward, half weights, up to 2 ranks. 0 otherwise.
   */
  updateGatherInGradientBytes: number;
  /**
   * Times this worker handed the memory it freed back to the kernel: after loading the actor and the
   * reference, and where the update gathers each decoder layer into the gradient shard's memory
   * (reshard_after_forward, FSDP per layer), before each optimizer step and after the update.
   */
  transientReleases: number;
  /**
   * The last update's gradient buffers on this rank, at their largest: the float32 gradient shard, the
   * outer units' (the embedding's gradient: the LM head's factors, or the whole matrix past their budget)
   * and a decoder layer's. The memory stays in the process for the next update.
   */
  updateBufferBytes: number;
  /** The wasm backend's heap (it only grows; the tensors of every pass live there); 0 on other backends. */
  backendHeapBytes: number;
  /** Peak resident set of the process so far. */
  peakRssBytes: number;
  /** CPU seconds (user and system) of the process so far: what a phase took is the difference. */
  cpuSeconds: number;
  /**
   * Minor page faults of the process so far: times it first wrote a page of fresh memory (4 KiB on
   * x86-64: `getconf PAGESIZE`). A phase's difference times the page size is the fresh memory it touched, which costs far more than reusing
   * memory (much more again in a virtual machine whose host takes freed memory back).
   */
  minorPageFaults: number;
}

export class ActorRolloutRefWorker extends ShardedWorker {
  static override readonly registered = {
    ...ShardedWorker.registered,
    initModel: Dispatch.ONE_TO_ALL,
    generateSequences: Dispatch.DP_COMPUTE_PROTO,
    computeLogProb: Dispatch.DP_COMPUTE_PROTO,
    computeRefLogProb: Dispatch.DP_COMPUTE_PROTO,
    updateActor: Dispatch.DP_COMPUTE_METRIC,
    memoryInfo: Dispatch.ONE_TO_ALL,
    sendWeights: Dispatch.ONE_TO_ALL,
    receiveWeights: Dispatch.ONE_TO_ALL,
  } satisfies Registrations<ActorRolloutRefWorker>;

  private readonly cfg: TrainerConfig;
  private readonly role: NonNullable<ActorRolloutRefOptions["role"]>;
  private readonly toolSpec: ToolSpec | null;
  private model?: Qwen2Model;
  private ref?: Qwen2Model;
  /** The reference's FSDP shard when it is sharded at rest (more than one rank); its model holds no weights between passes. */
  private refShards?: FrozenShards;
  /**
   * With LoRA: the actor's frozen base, sharded at rest (free_cache_engine) in model.dtype; `sharded`
   * then holds the adapters only.
   */
  private baseShards?: FrozenShards;
  private tokenizer?: Tokenizer;
  private tool?: Tool;
  private multiTurn?: ReturnType<typeof multiTurnSettings>;
  /** rollout.free_cache_engine: the actor's full weights are freed after each phase (see the file comment). */
  private readonly shardedAtRest: boolean;
  /** The reference's own arrays, with ref.fsdp_config.reshard_after_forward=false (its gathered weights, kept). */
  private readonly refGatherBuffers = new GatherBuffers();
  /** A rollout-only worker: the parameters' sizes in the trained actor's flat order (receiveWeights). */
  private parameterSizes?: Map<string, { length: number }>;
  /** A rollout-only worker: when weight updates go in while it generates (weight-swap.ts). */
  private swapGate?: WeightSwapGate;

  constructor(options: ActorRolloutRefOptions) {
    super();
    this.cfg = options.config;
    this.role = options.role ?? "actor_rollout_ref";
    // a rollout-only worker keeps its full weights: nothing to gather them from
    this.shardedAtRest = this.cfg.actor_rollout_ref.rollout.free_cache_engine && this.role !== "rollout";
    this.toolSpec = options.tool ?? null;
  }

  private get isActor(): boolean {
    return this.role === "actor_rollout_ref" || this.role === "actor_rollout";
  }
  private get hasRef(): boolean {
    return this.role === "actor_rollout_ref" || this.role === "ref";
  }

  /** Loads the model (every rank from the same directory), shards it and sets up the optimizer. */
  async initModel(): Promise<ShardInfo> {
    const lora = await this.loadModels();
    // each rank reads the whole model's values to keep its shard: with the loading frame gone they are
    // unreachable, and their memory goes back to the kernel (before the reference reads them again)
    this.releaseTransients();
    // with LoRA the reference is the actor's base with the adapters off: nothing more to load
    if (this.hasRef && !(lora && this.isActor)) {
      this.loadReference();
      this.releaseTransients();
    }
    return this.shardInfo();
  }

  /** The models of this worker's role but the reference, from actor_rollout_ref.model.path; whether with LoRA. */
  private async loadModels(): Promise<boolean> {
    // the user's module first: the policy loss it registers must exist in this process
    await importExternalLib(this.cfg.actor_rollout_ref.model.external_lib);
    if (this.isActor) getPolicyLoss(this.cfg.actor_rollout_ref.actor.policy_loss.loss_mode);
    const backend = await selectBackend({ log: null });
    this.backendName = backend.name;
    this.backendLine = backend.line;
    const path = this.cfg.actor_rollout_ref.model.path;
    if (!path)
      throw new WorkerStateError("actor_rollout_ref.model.path is not set (an HF model directory is needed)");
    // Weights are stored in model.dtype; the optimizer's master shard is float32 from the file's values
    // (not rounded to the storage dtype first). The reference is its own copy, read again.
    const ar = this.cfg.actor_rollout_ref;
    const dtype = ar.model.dtype;
    setActivationDtype(ar.model.compute_dtype, this.backendName);
    this.tokenizer = loadTokenizer(path);
    if (this.role === "rollout") {
      const { config, values } = loadModelValues(path);
      this.parameterSizes = new Map([...values].map(([name, v]) => [name, { length: v.length }]));
      this.model = new Qwen2Model(config, values, { trainable: false, dtype });
    }
    const lora = loraConfigOf(ar.model);
    if (this.isActor && lora) {
      // LoRA: the adapters are the trained, sharded parameters (the same starting values on every rank);
      // the base is frozen, sharded at rest like the reference
      const { config, values } = loadModelValues(path);
      const adapters = initialAdapterValues(config, lora, Number(ar.rollout.seed) >>> 0);
      this.sharded = new ShardedParameters(adapters, this.ctx, ar.actor.optim);
      this.sharded.weightDtype = dtype;
      this.model = new Qwen2Model(config, values, { dtype, lora: { config: lora, values: adapters } });
      this.model.gradientCheckpointing = ar.model.enable_gradient_checkpointing;
      if (this.shardedAtRest) {
        this.baseShards = new FrozenShards(values, this.ctx, dtype);
        this.model.evictWeights();
      }
    } else if (this.isActor) {
      const { config, values } = loadModelValues(path);
      this.sharded = new ShardedParameters(values, this.ctx, ar.actor.optim);
      this.sharded.weightDtype = dtype;
      this.model = new Qwen2Model(config, values, { trainable: true, dtype });
      this.model.gradientCheckpointing = ar.model.enable_gradient_checkpointing;
      if (this.shardedAtRest) this.model.evictWeights();
    }
    return lora !== null;
  }

  /** The reference: its own copy of the model, read again. */
  private loadReference(): void {
    const ar = this.cfg.actor_rollout_ref;
    const { config, values } = loadModelValues(ar.model.path!);
    this.ref = new Qwen2Model(config, values, {
      trainable: false,
      dtype: ar.model.dtype,
      offload: ar.ref.fsdp_config.param_offload,
    });
    // over several ranks the reference is sharded at rest too: each pass gathers it (computeRefLogProb)
    if (this.worldSize > 1) {
      this.refShards = new FrozenShards(values, this.ctx, ar.model.dtype, this.refTiles(this.ref));
      this.ref.evictWeights();
    }
  }

  /**
   * The reference's decoder-layer matrices to hold in the AMX tiles' layout (FrozenShards' `tiles`):
   * where its layer-by-layer pass reads them (reshard_after_forward), the model is bfloat16 and products
   * run on the tiles in this process. Frozen, they are laid out once, and its products then read them as
   * they lie instead of packing each one (see amx-bf16.cc); a whole pass gets them back row-major.
   */
  private refTiles(ref: Qwen2Model): Map<string, readonly [number, number]> {
    const ar = this.cfg.actor_rollout_ref;
    const tiles = new Map<string, readonly [number, number]>();
    const blas = nativeMatmulActive(this.backendName) ? nativeBlas() : undefined;
    if (ar.model.dtype !== "bfloat16" || !ar.ref.fsdp_config.reshard_after_forward || !blas?.amx().enabled)
      return tiles;
    for (const s of ref.specs)
      if (isLayerUnit({ key: layerUnitKey(s.name) }) && s.shape.length === 2) {
        const [k, n] = s.shape as [number, number];
        if (k % 32 === 0 && n % 32 === 0) tiles.set(s.name, [k, n]);
      }
    return tiles;
  }

  protected override numParameters(): number {
    // with LoRA the model computes with its base and the adapters
    const lora = this.model?.lora;
    if (lora) return this.model!.numParameters() + lora.numParameters();
    return this.sharded?.layout.total ?? this.model?.numParameters() ?? this.ref?.numParameters() ?? 0;
  }

  /**
   * The trained actor's side of a weight update of separate rollout workers: every trainer rank
   * broadcasts its FSDP shard (float32 master) over `group` (the trainer ranks first, then the rollout
   * ranks), one broadcast per trainer rank in rank order. The rollout ranks call receiveWeights at the
   * same time.
   */
  async sendWeights(group: string): Promise<void> {
    const sharded = this.needSharded();
    const sizes = new Map(sharded.layout.entries.map((e) => [e.name, { length: e.size }]));
    await exchangeShards(sizes, this.worldSize, group, (r) => (r === this.rank ? sharded.params : undefined));
  }

  /** The full parameters as one flat vector (checkpoint order); a rollout-only worker's are the ones it generates with. */
  override async gatheredParameters(): Promise<Float32Array> {
    if (this.role !== "rollout" || !this.parameterSizes) return super.gatheredParameters();
    const layout = new FlatLayout([...this.parameterSizes].map(([name, v]) => ({ name, size: v.length })));
    return layout.flatten(await this.needModel().getParameters());
  }

  /**
   * A rollout-only worker takes the trained actor's weights: the shards `trainerWorldSize` trainer
   * ranks broadcast over `group` (sendWeights), put together into the full parameters.
   */
  async receiveWeights(group: string, trainerWorldSize: number, version?: number): Promise<void> {
    const model = this.needModel();
    const sizes = this.parameterSizes;
    if (this.role !== "rollout" || !sizes)
      throw new WorkerStateError(`rank ${this.rank}: receiveWeights is for rollout-only workers`);
    const full = await exchangeShards(sizes, trainerWorldSize, group, () => undefined);
    const values = new FlatLayout([...sizes].map(([name, v]) => ({ name, size: v.length }))).unflatten(full);
    const gate = this.weightGate();
    // with a generation running: at its next token boundary (partial rollout) or after it (weight-swap.ts)
    await gate.swap(() => model.setParameters(values), version ?? gate.version + 1);
  }

  private weightGate(): WeightSwapGate {
    this.swapGate ??= new WeightSwapGate(this.cfg.async_training.partial_rollout);
    return this.swapGate;
  }

  /**
   * A rollout-only worker's generation as a stream (trainer.mode=fully_async): generateSequences' rows,
   * yielded as they finish, several at a time, each chunk with metaInfo `rows` (their indices in
   * `prompts`) and the non-tensor columns param_version_start / param_version_end (the lowest and highest
   * weight version that sampled a token of the row: they differ when a weight update landed mid-response
   * with async_training.partial_rollout). With metaInfo `rollout_log_probs`, the tensor rollout_log_probs
   * (each token's log-prob when it was sampled; 0 on tool output). Stopping the stream, or cancelling the
   * call, stops the generation at its next token boundary. The multi-turn agent loop does not stream: its
   * batch comes whole at the end.
   */
  async *generateSequencesStream(prompts: DataProto): AsyncGenerator<DataProto> {
    this.injectFault("generateSequences");
    const model = this.needModel();
    if (this.role !== "rollout")
      throw new WorkerStateError(`rank ${this.rank}: generateSequencesStream is for rollout-only workers`);
    const stop = new AbortController();
    let callSignal: AbortSignal | undefined;
    try {
      callSignal = getCallSignal();
    } catch {
      // called in-process (tests): only stopping the stream ends it early
    }
    const onCancel = () => stop.abort(callSignal?.reason);
    callSignal?.addEventListener("abort", onCancel, { once: true });
    const withLogProbs = prompts.metaInfo.rollout_log_probs === true;
    const ready: TirSample[] = [];
    let wake: (() => void) | undefined;
    let ended = false;
    let failure: unknown;
    const gate = this.weightGate();
    const run = gate
      .exclusive(async (policy) => {
        if (multiTurnConfig(this.cfg)?.enable) {
          const v = gate.version;
          const whole = await this.generateWith(model, prompts);
          if (withLogProbs)
            whole.batch.rollout_log_probs = (await this.computeLogProb(whole)).tensor("old_log_probs");
          const rows = [...Array(whole.length).keys()];
          return tagChunk(
            whole,
            rows,
            rows.map(() => [v, v]),
          );
        }
        await this.generateWith(model, prompts, {
          policy,
          signal: stop.signal,
          logprobs: withLogProbs,
          onSample: (s) => {
            ready.push(s);
            wake?.();
          },
        });
        return undefined;
      }, stop.signal)
      .then(
        (whole) => {
          if (whole) ended = true;
          return whole;
        },
        (e) => {
          failure = e;
          return undefined;
        },
      )
      .finally(() => {
        ended = true;
        wake?.();
      });
    try {
      for (;;) {
        if (ready.length > 0) {
          const samples = ready.splice(0);
          yield streamedChunk(samples, prompts, this.tokenizer!, this.cfg, withLogProbs);
          continue;
        }
        if (ended) break;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
      const whole = await run;
      if (failure) throw failure;
      if (whole) yield whole;
    } finally {
      callSignal?.removeEventListener("abort", onCancel);
      stop.abort(new Error("the generation stream was stopped"));
      await run;
    }
  }

  protected override storageDtype() {
    return this.model?.dtype ?? this.ref?.dtype ?? super.storageDtype();
  }

  /** Whether the actor holds every weight now (between phases: only with free_cache_engine=false). */
  private holdsAllWeights(model: Qwen2Model): boolean {
    return [...model.specs, ...model.trainedSpecs].every((s) => model.holdsWeight(s.name));
  }

  /**
   * A phase of the actor begins: its weights are all-gathered from the shards (those of the units `which`
   * selects), unless it holds them all already. Every rank calls it at the same point.
   */
  protected async actorPhaseBegins(model: Qwen2Model, which?: (unit: FlatUnit) => boolean): Promise<void> {
    if (this.holdsAllWeights(model)) return;
    // sharded at rest, the gathered weights go into kept arrays that actorPhaseEnded takes back
    const borrower = this.shardedAtRest ? ACTOR : undefined;
    // LoRA: the frozen base first (all of it: FSDP per layer gathers the adapters only), then the adapters
    if (this.baseShards && !model.specs.every((s) => model.holdsWeight(s.name)))
      await this.baseShards.gatherInto(model, borrower ? this.lendTo(borrower) : undefined);
    await this.gatherWeightsInto(model, which, undefined, borrower);
  }

  /**
   * Sharded at rest with FSDP per layer and actor.fsdp_config.reshard_after_forward, generation's and the
   * log-prob passes' decoder layers are gathered into the update's gradient shard's memory: the update
   * gathers its layers itself, and a rank holds one of the two at a time (LoRA: the adapters' gradient is
   * too small to hold the layers).
   */
  protected override layersShareGradientMemory(model: Qwen2Model): boolean {
    return (
      this.shardedAtRest &&
      model.gradientCheckpointing &&
      !model.lora &&
      this.cfg.actor_rollout_ref.actor.fsdp_config.reshard_after_forward
    );
  }

  /** GatherBuffers.take for `borrower`. */
  private lendTo(borrower: string): GatherTake {
    return (ctor, length) => this.gatherBuffers.take(borrower, ctor, length);
  }

  /**
   * A phase of the actor ended: sharded at rest, every copy of its weights is freed; otherwise the
   * float32 copies of host-held weights (model.dtype half) go back to rest.
   */
  protected actorPhaseEnded(model: Qwen2Model): void {
    if (this.shardedAtRest) {
      model.evictWeights();
      this.gatherBuffers.reclaim(ACTOR);
    } else model.releaseComputeWeights();
  }

  protected needModel(): Qwen2Model {
    if (!this.model || !this.tokenizer)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before using the actor`);
    return this.model;
  }

  private async getTool(): Promise<Tool | undefined> {
    if (!this.toolSpec) return undefined;
    // checked as a Tool, its stop strings against rollout.tool.stop, its calls bounded by call_timeout
    this.tool ??= await buildRolloutTool(this.toolSpec, this.cfg).catch((e: Error) => {
      throw new WorkerStateError(e.message);
    });
    return this.tool;
  }

  /**
   * Rollout on the gathered weights (ToRL's TIR generation; plain generation when C = 0 or without a
   * tool). In: input_ids / attention_mask [B, P] left-padded prompts. metaInfo: `seed` (this rank
   * samples with seed + rank * 1_000_003), `validate` (use rollout.val_kwargs: greedy by default),
   * `do_sample` (false: greedy).
   * Out: `rolloutTrainingBatch` of the samples (prompts, responses, input_ids, attention_mask,
   * position_ids, response_mask, tool_output_mask, loss_mask = response_mask & tool_output_mask when
   * actor.mask_tool_output, execution_passes, num_tool_calls, num_tool_passes; non-tensor
   * response_text, finish_reason, tool_observations).
   */
  async generateSequences(prompts: DataProto): Promise<DataProto> {
    this.injectFault("generateSequences");
    const model = this.needModel();
    await this.actorPhaseBegins(model);
    try {
      return await this.generateWith(model, prompts);
    } finally {
      this.actorPhaseEnded(model);
    }
  }

  /** generateSequences on the actor's gathered weights. */
  private async generateWith(
    model: Qwen2Model,
    prompts: DataProto,
    streaming: Pick<TirRolloutOptions, "policy" | "signal" | "logprobs" | "onSample"> = {},
  ): Promise<DataProto> {
    const tok = this.tokenizer!;
    const ro = this.cfg.actor_rollout_ref.rollout;
    const validate = prompts.metaInfo.validate === true;
    const seedBase = Number(prompts.metaInfo.seed ?? ro.seed) >>> 0;
    const sampling = rolloutSampling(ro, validate);
    // veRL's do_sample=false in metaInfo: a greedy pass (ReMax's baseline)
    if (prompts.metaInfo.do_sample === false) sampling.temperature = 0;
    const seed = (seedBase + this.rank * 1_000_003) >>> 0;
    // the worker's own part: whether the loss skips tool output (actor.mask_tool_output)
    const maskToolOutput = this.cfg.actor_rollout_ref.actor.mask_tool_output;
    if (multiTurnConfig(this.cfg)?.enable) {
      // veRL's multi-turn agent loop (the text-trigger tool is not used in this mode; ignore_eos is
      // refused with it by checkTrainerSetup: an assistant turn ends at its end-of-turn token)
      this.multiTurn ??= multiTurnSettings(this.cfg, tok);
      const agent = await this.multiTurn;
      const { ignoreEos: _ignoreEos, ...agentSampling } = sampling;
      const { samples } = await agentLoopRollout(model, tok, promptsFromDataProto(prompts), {
        ...agent,
        ...agentSampling,
        seed,
      });
      return agentTrainingBatch(samples, {
        padTokenId: tok.padTokenId,
        promptLength: prompts.tensor("input_ids").shape[1]!,
        responseLength: sampling.maxResponseLength,
        maskToolOutput,
      });
    }
    const tool = ro.num_llm_calls_available > 0 ? await this.getTool() : undefined;
    const { batch } = await rolloutPromptBatch(model, tok, prompts, {
      ...sampling,
      tool,
      numLlmCallsAvailable: tool ? ro.num_llm_calls_available : 0,
      seed,
      maskToolOutput,
      ...streaming,
    });
    return batch;
  }

  /** Micro-batches of a log-prob pass: logProbMicroRows rows, or a token budget. */
  private logProbGroups(key: "rollout" | "ref", data: DataProto): number[][] {
    const section = this.cfg.actor_rollout_ref[key];
    const rows = logProbMicroRows(this.cfg, key, this.worldSize);
    return microBatches(
      data,
      rows,
      section.log_prob_use_dynamic_bsz ? section.log_prob_max_token_len_per_gpu : null,
    );
  }

  /** Log-probs (and entropy) of the responses under `model`, [B, R] each, micro-batched. */
  private async responseLogProbs(
    model: Qwen2Model,
    data: DataProto,
    key: "rollout" | "ref",
    withEntropy: boolean,
  ): Promise<Float32Array[]> {
    const R = data.tensor("responses").shape[1]!;
    const temperature = this.cfg.actor_rollout_ref.rollout.temperature || 1;
    try {
      const groups = this.logProbGroups(key, data);
      const parts = groups.map((g) => responseTokenBatch(rowsOf(data, g)));
      // every micro-batch in one call: their LM heads share passes where that gives the same bits
      const scores = await computeLogProbsOfBatches(
        model,
        parts.map(({ tb, P, kept }) => ({
          tokens: tb,
          // the head runs only where a response token is predicted
          options: { temperature, withEntropy, scoreColumns: { from: P, to: P + kept } },
        })),
      );
      const outs = (withEntropy ? [0, 1] : [0]).map(() => new Float32Array(data.length * R));
      for (const [k, g] of groups.entries()) {
        const { tb, P, kept } = parts[k]!;
        const cols = (full: Float32Array) => rowColumns(full, tb.batch, tb.length, P, kept, R);
        placeRows(outs[0]!, cols(scores[k]!.logProbs), g, R);
        if (withEntropy) placeRows(outs[1]!, cols(scores[k]!.entropy!), g, R);
      }
      return outs;
    } finally {
      // host-held weights (model.dtype half, or ref.fsdp_config.param_offload) go back to rest
      model.releaseComputeWeights();
    }
  }

  /**
   * What this process holds now: bytes in tensors (tf.memory), the stored weights of the actor/rollout
   * and of the reference (in model.dtype) and how much of each sits in tensors, the actor's FSDP shard,
   * and the process's peak resident set. Between passes a host-held model has no weight bytes in
   * tensors, and an actor sharded at rest (rollout.free_cache_engine) holds no full weights at all.
   */
  memoryInfo(): WorkerMemory {
    return {
      rank: this.rank,
      tensorBytes: tf.memory().numBytes,
      actorWeightBytes: this.model?.weightBytes() ?? 0,
      actorWeightTensorBytes: this.model?.weightTensorBytes() ?? 0,
      actorShardBytes: (this.sharded?.params.byteLength ?? 0) + (this.sharded?.optim.stateBytes ?? 0),
      refWeightBytes: this.ref?.weightBytes() ?? 0,
      refWeightTensorBytes: this.ref?.weightTensorBytes() ?? 0,
      refShardBytes: this.refShards?.bytes ?? 0,
      refIsActorBase: this.hasRef && this.model?.lora !== undefined,
      actorBaseShardBytes: this.baseShards?.bytes ?? 0,
      publishedShardBytes: (this.refShards?.publishedBytes ?? 0) + (this.baseShards?.publishedBytes ?? 0),
      mappedShardBytes: (this.refShards?.mappedBytes ?? 0) + (this.baseShards?.mappedBytes ?? 0),
      refHeadReleasedBytes: this.refShards?.releasedValueBytes ?? 0,
      refTileLayoutBytes: [...(this.refShards?.tiles.values() ?? [])].reduce((n, [k, v]) => n + k * v * 2, 0),
      adapterParameters: this.model?.lora?.numParameters() ?? 0,
      gatherBufferBytes: this.gatherBuffers.bytes + this.refGatherBuffers.bytes,
      gatherInGradientBytes: this.gatherBuffers.carvedBytes,
      transientReleases: this.transientReleases,
      gatherReusedBytes: this.gatherBuffers.reusedBytes,
      updateGatherInGradientBytes: this.updateGatherInGradientBytes,
      updateBufferBytes: this.updateBufferBytes,
      backendHeapBytes: backendHeapBytes(),
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      cpuSeconds: cpuSecondsSoFar(),
      minorPageFaults: process.resourceUsage().minorPageFault,
    };
  }

  /** Old log-probs and entropy of the responses under the current actor: old_log_probs, entropys [B, R]. */
  async computeLogProb(data: DataProto): Promise<DataProto> {
    const model = this.needModel();
    await this.actorPhaseBegins(model);
    let logProbs: Float32Array | undefined;
    let entropy: Float32Array | undefined;
    try {
      [logProbs, entropy] = await this.responseLogProbs(model, data, "rollout", true);
    } finally {
      this.actorPhaseEnded(model);
    }
    const shape = [data.length, data.tensor("responses").shape[1]!];
    return DataProto.fromDict({
      old_log_probs: { data: logProbs!, shape },
      entropys: { data: entropy!, shape },
    });
  }

  /** Log-probs of the responses under the frozen reference policy: ref_log_prob [B, R]. */
  async computeRefLogProb(data: DataProto): Promise<DataProto> {
    if (this.hasRef && this.model?.lora) return this.baseRefLogProb(this.model, data);
    const ref = this.ref;
    if (!ref) throw new WorkerStateError(`rank ${this.rank}: this worker holds no reference model`);
    let logProbs: Float32Array | undefined;
    // ref.fsdp_config.reshard_after_forward=false: the gathered weights stay for the next pass (the
    // reference is frozen), in arrays kept lent to it, so the actor's gathers never take them
    const keep = !this.cfg.actor_rollout_ref.ref.fsdp_config.reshard_after_forward;
    // kept, they live in arrays of their own: the actor's gathers keep theirs (taken back by the update)
    const pool = keep ? this.refGatherBuffers : this.gatherBuffers;
    let done = false;
    try {
      const shards = this.refShards;
      const byLayer = shards && !keep ? await this.refByLayer(ref, data) : undefined;
      if (shards && byLayer) logProbs = await this.refLogProbsByLayer(ref, shards, data, byLayer);
      else {
        if (!(keep && this.holdsAllWeights(ref)))
          await shards?.gatherInto(ref, (ctor, length) => pool.take(REF, ctor, length));
        [logProbs] = await this.responseLogProbs(ref, data, "ref", false);
      }
      done = true;
    } finally {
      // a failed pass frees them whatever the setting: the next one gathers whole weights again
      if (this.refShards && !(keep && done)) {
        ref.evictWeights();
        pool.reclaim(REF);
        this.refGatherBuffers.reclaim(REF_LAYERS);
      }
    }
    return DataProto.fromDict({
      ref_log_prob: { data: logProbs!, shape: [data.length, data.tensor("responses").shape[1]!] },
    });
  }

  /**
   * The micro-batches of a reference pass that runs layer by layer (refLogProbsByLayer), or undefined
   * where it does not: it runs sharded at rest over more than one rank, with reshard_after_forward, when
   * every rank's hidden states stay within REF_BY_LAYER_STATE_BYTES. One all-reduce decides, so the
   * ranks gather alike: every rank calls it at the same point.
   */
  private async refByLayer(ref: Qwen2Model, data: DataProto): Promise<RefMicroBatches | undefined> {
    if (this.worldSize < 2) return undefined;
    const groups = this.logProbGroups("ref", data);
    const parts = groups.map((g) => responseTokenBatch(rowsOf(data, g)));
    const bytes = parts.reduce((n, { tb }) => n + tb.batch * tb.length * ref.config.hiddenSize * 4, 0);
    return (await allReduceMax(this.ctx, bytes)) <= REF_BY_LAYER_STATE_BYTES ? { groups, parts } : undefined;
  }

  /**
   * The reference's log-probs with its decoder layers gathered one at a time (FSDP's
   * reshard_after_forward), each run on every micro-batch before the next is gathered into the same
   * array: the reference never holds more than one layer, and the actor's kept arrays keep the layers
   * generation gathered, which the update takes back. The units around the layers (the embedding) go
   * into the actor's kept arrays as a whole gather's would. The same numbers as the whole pass.
   */
  private async refLogProbsByLayer(
    ref: Qwen2Model,
    shards: FrozenShards,
    data: DataProto,
    { groups, parts }: RefMicroBatches,
  ): Promise<Float32Array> {
    const R = data.tensor("responses").shape[1]!;
    const temperature = this.cfg.actor_rollout_ref.rollout.temperature || 1;
    // the units around the layers (the embedding): read where the published shards lie, or gathered into
    // the actor's kept arrays as a whole gather's would be
    const releaseOuter = await shards.holdInto(
      ref,
      (ctor, length) => this.gatherBuffers.take(REF, ctor, length),
      (u) => !isLayerUnit(u),
    );
    let releaseLast = () => {};
    const unitOfLayer = new Map(
      shards.units.flatMap((u, k) => (isLayerUnit(u) ? [[u.key, k] as const] : [])),
    );
    const shapes = new Map(ref.specs.map((s) => [s.name, [...s.shape]]));
    const arrays = new Map<number, Uint16Array>();
    const into: GatherTake = (ctor, length) => {
      let a = arrays.get(length);
      if (!a) {
        a = this.refGatherBuffers.take(REF_LAYERS, Uint16Array, length);
        arrays.set(length, a);
      }
      return a as InstanceType<typeof ctor>;
    };
    // a layer's values are read where the published shards lie (mapped) or gathered into `into`; the
    // layer before lets its mapped pages go once the next is asked for (layerwiseLogProbs is done with it)
    // the tied head is read a block of the vocabulary at a time where the shards are mapped, each block's
    // pages let go after it: the mapped embedding is never resident whole
    const h = ref.config.hiddenSize;
    const headBlock: HeadBlocks | undefined = ref.config.tieWordEmbeddings
      ? {
          // whole tiles of rows: on AMX the head's rows are then read as they lie (amx-bf16.cc)
          rows: Math.max(32, Math.floor(REF_HEAD_BLOCK_BYTES / (2 * h) / 32) * 32),
          after: (from, to) => shards.releaseValues("model.embed_tokens.weight", from * h, to * h),
        }
      : undefined;
    let scores: Awaited<ReturnType<typeof layerwiseLogProbs>>;
    try {
      scores = await layerwiseLogProbs(
        ref,
        parts.map(({ tb, P, kept }) => ({
          tokens: tb,
          // the head runs only where a response token is predicted
          options: { temperature, scoreColumns: { from: P, to: P + kept }, headBlock },
        })),
        async (i) => {
          const u = unitOfLayer.get(`layer ${i}`);
          if (u === undefined)
            throw new WorkerStateError(`the reference's shards hold no unit for decoder layer ${i}`);
          releaseLast();
          const { values, release, tiled } = await shards.unitParameters(u, into, { tiles: true });
          releaseLast = release;
          return layerTensorsOf(values, shapes, tiled);
        },
      );
    } finally {
      releaseLast();
      releaseOuter();
    }
    const out = new Float32Array(data.length * R);
    for (const [k, g] of groups.entries()) {
      const { tb, P, kept } = parts[k]!;
      placeRows(out, rowColumns(scores[k]!.logProbs, tb.batch, tb.length, P, kept, R), g, R);
    }
    return out;
  }

  /**
   * The reference log-probs with LoRA: the actor's base with its adapters switched off (veRL does the
   * same), gathered from the shards like the actor's phases.
   */
  private async baseRefLogProb(model: Qwen2Model, data: DataProto): Promise<DataProto> {
    const lora = model.lora!;
    await this.actorPhaseBegins(model);
    let logProbs: Float32Array | undefined;
    lora.setEnabled(false);
    try {
      [logProbs] = await this.responseLogProbs(model, data, "ref", false);
    } finally {
      lora.setEnabled(true);
      this.actorPhaseEnded(model);
    }
    return DataProto.fromDict({
      ref_log_prob: { data: logProbs!, shape: [data.length, data.tensor("responses").shape[1]!] },
    });
  }

  /**
   * PPO update of the actor on this rank's rows (see the file comment for the global aggregation). The
   * driver lays rows out with `layoutForMiniBatches` so that every rank's mini-batch j is its part of
   * global mini-batch j. Needs input_ids, attention_mask, responses, old_log_probs, advantages and a
   * loss mask (loss_mask, else response_mask); ref_log_prob when actor.use_kl_loss. Returns the metrics
   * (identical on every rank).
   */
  async updateActor(data: DataProto): Promise<Record<string, number>> {
    this.injectFault("updateActor");
    const model = this.needModel();
    const metrics = await this.inUpdatePhase((m) => this.updateWith(m, data));
    // resharding, the update's transients (its layers' gathers and activations, the head's factors) do
    // not stay resident under the next phases' gathers and mappings
    if (this.layersShareGradientMemory(model)) this.releaseTransients();
    return metrics;
  }

  /**
   * Runs an update of the actor's trained parameters (`update`) in an update phase: its weights gathered
   * (FSDP per layer, with gradient checkpointing, gathers each decoder layer for itself: the model then
   * needs only the parameters around the layers, all of them when it keeps its weights between phases),
   * and back at rest after.
   */
  protected async inUpdatePhase<T>(update: (model: Qwen2Model) => Promise<T>): Promise<T> {
    const model = this.needModel();
    // sharing the gradient shard's memory, the units around the layers go into their pieces of it
    const shared = this.layersShareGradientMemory(model);
    try {
      if (shared) await this.outerUnitsIntoGradient(model);
      else
        await this.actorPhaseBegins(model, model.gradientCheckpointing ? (u) => !isLayerUnit(u) : undefined);
      return await update(model);
    } finally {
      this.actorPhaseEnded(model);
      if (shared) this.lendGradientMemory();
    }
  }

  /** updateActor on the gathered weights. */
  private async updateWith(model: Qwen2Model, data: DataProto): Promise<Record<string, number>> {
    const ar = this.cfg.actor_rollout_ref;
    const a = ar.actor;
    const W = this.worldSize;
    const lossMode = a.policy_loss.loss_mode;
    // the metrics come from the loss itself: it names them at registration
    const lossMetrics = getPolicyLoss(lossMode).metrics;
    const temperature = ar.rollout.temperature || 1;
    const held = model.trainedSpecs.filter((s) => model.holdsWeight(s.name)).map((s) => s.name);
    // layer by layer every use of a bf16 matrix reads its bits: its tensor needs no float32 values
    const vars = model.gradientCheckpointing ? bitsOnlyVariables(model, held) : model.variables(held);
    const nameOf = new Map(vars.map((v, i) => [v.name, held[i]!]));
    const useKl = a.use_kl_loss;
    const entCoef = a.entropy_coeff;
    const pl = a.policy_loss;
    const lossOptions: PolicyLossOptions = {
      clipRatio: a.clip_ratio,
      clipRatioLow: a.clip_ratio_low,
      clipRatioHigh: a.clip_ratio_high,
      clipRatioC: a.clip_ratio_c,
      clipCovRatio: pl.clip_cov_ratio,
      clipCovLb: pl.clip_cov_lb,
      clipCovUb: pl.clip_cov_ub,
      klCovRatio: pl.kl_cov_ratio,
      ppoKlCoef: pl.ppo_kl_coef,
    };
    let microStep = 0;
    const seedBase = (Number(ar.rollout.seed) + this.rank * 1_000_003) >>> 0;
    // Per-mini-batch sums: pg loss, kl loss, entropy loss, tokens, then each loss metric * tokens.
    const run = await this.updateEpochs(
      data,
      {
        what: "actor.ppo_mini_batch_size x rollout.n",
        globalMiniRows: miniBatchRows(this.cfg, "actor"),
        micro: perWorkerRows(a.ppo_micro_batch_size_per_gpu, a.ppo_micro_batch_size, W),
        maxTokens: a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : null,
        epochs: a.ppo_epochs,
        lossAggMode: a.loss_agg_mode,
        optim: a.optim as OptimSettings,
        gradClip: a.grad_clip,
        sums: 4 + lossMetrics.length,
      },
      model,
      vars,
      nameOf,
      (step) => {
        const { part, tokens, weights: w, sums: mb } = step;
        const { tb, P, R, kept } = tokens;
        const b = part.length;
        const old = part.tensor("old_log_probs");
        const adv = part.tensor("advantages");
        const sc = tokenLogProbs(model, tb, {
          temperature,
          withEntropy: entCoef !== 0,
          scoreColumns: { from: P, to: P + kept },
        });
        const logp = padColumns(tf.slice(sc.logProbs, [0, P], [b, kept]) as tf.Tensor2D, R);
        const pmask = part.batch.loss_mask ?? part.tensor("response_mask");
        const weights = asTfTensor(w);
        // veRL's rollout IS correction: each token's policy loss times its weight (algorithm.rollout_is)
        const isWeights = part.batch.rollout_is_weights
          ? asTfTensor(part.tensor("rollout_is_weights"))
          : null;
        const out = runPolicyLoss(lossMode, {
          oldLogProb: old,
          logProb: logp,
          advantages: adv,
          responseMask: pmask,
          // the global token weights already hold loss_agg_mode's normalisation over the mini-batch
          aggregate: (perToken) =>
            tf.sum(tf.mul(isWeights ? tf.mul(perToken, isWeights) : perToken, weights)) as tf.Scalar,
          options: { ...lossOptions, seed: (seedBase + microStep++) >>> 0 },
        });
        const pg = out.pgLoss;
        let tok = 0;
        for (let i = 0; i < pmask.data.length; i++) tok += Number(pmask.data[i]);
        mb[3]! += tok;
        let loss: tf.Tensor = pg;
        // Read after the backward pass: pg, then entropy and kl losses when present, then the metrics.
        const scalars: [number, tf.Tensor][] = [[0, pg]];
        if (entCoef !== 0 && sc.entropy) {
          const ent = padColumns(tf.slice(sc.entropy, [0, P], [b, kept]) as tf.Tensor2D, R);
          const el = tf.mul(aggLossTf(ent, w, "seq-mean-token-sum-norm"), R);
          scalars.push([2, el]);
          loss = tf.sub(loss, tf.mul(el, entCoef));
        }
        if (useKl) {
          const refLp = part.tensor("ref_log_prob");
          const kl = tf.mul(klLossTf(logp, refLp, w, a.kl_loss_type, "seq-mean-token-sum-norm"), R);
          scalars.push([1, kl]);
          loss = tf.add(loss, tf.mul(kl, a.kl_loss_coef));
        }
        // the loss's own metrics (token means), read with the losses after the backward pass
        const metricTensors = lossMetrics.map((name) => out.metrics[name]!);
        step.afterBackward([...scalars.map(([, t]) => t), ...metricTensors], (host) => {
          scalars.forEach(([at], i) => {
            mb[at]! += host[i]![0]!;
          });
          metricTensors.forEach((_, j) => {
            mb[4 + j]! += host[scalars.length + j]![0]! * tok;
          });
        });
        return loss as tf.Scalar;
      },
    );
    const { sums, miniBatches: minis } = run;
    const tok = Math.max(1, sums[3]!);
    const metrics: Record<string, number> = {
      "actor/pg_loss": sums[0]! / minis,
      "actor/grad_norm": run.gradNorm,
      "actor/lr": run.lr,
    };
    lossMetrics.forEach((name, j) => {
      metrics[`actor/${name}`] = sums[4 + j]! / tok;
    });
    if (entCoef !== 0) metrics["actor/entropy_loss"] = sums[2]! / minis;
    if (useKl) {
      metrics["actor/kl_loss"] = sums[1]! / minis;
      metrics["actor/kl_coef"] = a.kl_loss_coef;
    }
    if (run.skipped) metrics["actor/skipped_updates"] = run.skipped;
    // every optimizer step skipped because the loss itself is not finite: the next steps would skip too
    // (the weights never change), so the run stops here instead of "training" on (a lone non-finite
    // gradient norm with a finite loss still only skips its step)
    const bad = (
      [
        ["pg_loss", 0, `the policy loss "${lossMode}" (actor_rollout_ref.actor.policy_loss.loss_mode)`],
        ["kl_loss", 1, "the KL loss (actor_rollout_ref.actor.use_kl_loss)"],
        ["entropy_loss", 2, "the entropy loss (actor_rollout_ref.actor.entropy_coeff)"],
      ] as const
    ).filter(([, at]) => !Number.isFinite(sums[at]!));
    if (run.skipped === minis && bad.length)
      throw new AlgorithmInputError(
        `every optimizer step of this update was skipped: ${bad.map(([name, at, who]) => `${who} gave ${name} = ${sums[at]! / minis}`).join("; ")}; check the loss and its inputs (advantages, log-probs)`,
      );
    return metrics;
  }

  /** The update's units around the layers into their own pieces of its gradient's memory (gatherIntoGradient). */
  private outerUnitsIntoGradient(model: Qwen2Model): Promise<void> {
    return this.gatherIntoGradient(model, (u) => !isLayerUnit(u), ACTOR);
  }

  /** The new parameters into the units the model holds; none after the update's last step when sharded at rest. */
  protected override async afterOptimizerStep(model: Qwen2Model, more: boolean): Promise<void> {
    if (!more && this.shardedAtRest) return;
    if (this.layersShareGradientMemory(model)) {
      // the units around the layers lie in the gradient's memory, which the step read: gathered there again
      await this.outerUnitsIntoGradient(model);
      return;
    }
    await this.gatherWeightsInto(model, (u) => u.entries.every((e) => model.holdsWeight(e.name)));
  }

  protected async currentParameters(): Promise<Map<string, Float32Array>> {
    const model = this.needModel();
    await this.actorPhaseBegins(model);
    try {
      return await model.getParameters(model.trainedSpecs.map((s) => s.name));
    } finally {
      this.actorPhaseEnded(model);
    }
  }

  /** Sharded at rest the shards are all there is: the next phase gathers from them. */
  protected applyParameters(values: Map<string, Float32Array>): void {
    const model = this.needModel();
    if (this.holdsAllWeights(model)) model.setParameters(values);
  }
}

/**
 * One broadcast per trainer rank r (root r of `group`) of r's FSDP shard of parameters of `sizes` over
 * `trainerWorldSize` ranks; `own(r)` is this process's shard when it is rank r. Returns the full flat
 * parameter vector put together from the shards.
 */
async function exchangeShards(
  sizes: Map<string, { length: number }>,
  trainerWorldSize: number,
  group: string,
  own: (rank: number) => Float32Array | undefined,
): Promise<Float32Array> {
  let full: Float32Array | undefined;
  for (let r = 0; r < trainerWorldSize; r++) {
    const { layout, pieces, length } = shardedLayout(sizes, { rank: r, worldSize: trainerWorldSize, group });
    full ??= new Float32Array(layout.total);
    const buf = Float32Array.from(own(r) ?? new Float32Array(length));
    await collective.broadcast(buf, r, group);
    for (const p of pieces) full.set(buf.subarray(p.local, p.local + p.end - p.start), p.start);
  }
  return full ?? new Float32Array(0);
}

/**
 * How the rollout generates, from the config: rollout.* for training, rollout.val_kwargs for
 * validation (greedy unless val_kwargs.do_sample); ignore_eos keeps generating to response_length.
 */
export function rolloutSampling(
  ro: RolloutConfig,
  validate: boolean,
): Pick<
  TirRolloutOptions,
  "temperature" | "topP" | "topK" | "ignoreEos" | "maxResponseLength" | "maxBatchSize"
> {
  const kw = validate ? ro.val_kwargs : ro;
  const greedy = validate ? !ro.val_kwargs.do_sample : !ro.do_sample;
  return {
    temperature: greedy ? 0 : kw.temperature,
    topP: kw.top_p,
    topK: Math.max(kw.top_k, 0),
    ignoreEos: ro.ignore_eos,
    maxResponseLength: ro.response_length,
    maxBatchSize: Math.max(1, ro.max_num_seqs as number),
  };
}

/**
 * Rows per micro-batch of a log-prob pass on one worker (old log-probs: "rollout", reference: "ref"):
 * log_prob_micro_batch_size_per_gpu, else the deprecated global log_prob_micro_batch_size over the
 * workers, else the actor's micro-batch, else 8.
 */
export function logProbMicroRows(cfg: TrainerConfig, key: "rollout" | "ref", worldSize: number): number {
  const ar = cfg.actor_rollout_ref;
  const section = ar[key] as {
    log_prob_micro_batch_size: number | null;
    log_prob_micro_batch_size_per_gpu: number | null;
  };
  return (
    perWorkerRows(section.log_prob_micro_batch_size_per_gpu, section.log_prob_micro_batch_size, worldSize) ??
    perWorkerRows(ar.actor.ppo_micro_batch_size_per_gpu, ar.actor.ppo_micro_batch_size, worldSize) ??
    8
  );
}

/**
 * Reorders a batch so that DP_COMPUTE_PROTO's contiguous chunking gives rank r, as its local mini-batch
 * j, the r-th slice of global mini-batch j (rows [j M, (j+1) M) of the batch, M = miniBatchRows).
 * With this layout the set of global mini-batches, and so the update, does not depend on worldSize.
 */
export function layoutForMiniBatches(data: DataProto, worldSize: number, miniBatchRows: number): DataProto {
  const B = data.length;
  if (worldSize === 1) return data;
  if (miniBatchRows % worldSize !== 0 || B % miniBatchRows !== 0) {
    throw new WorkerStateError(
      `cannot lay out ${B} rows in mini-batches of ${miniBatchRows} over ${worldSize} ranks`,
    );
  }
  const per = miniBatchRows / worldSize;
  const minis = B / miniBatchRows;
  const idx: number[] = [];
  for (let r = 0; r < worldSize; r++)
    for (let j = 0; j < minis; j++) for (let i = 0; i < per; i++) idx.push(j * miniBatchRows + r * per + i);
  return data.selectRows(idx);
}

/** Borrowers of gatherBuffers: the actor's gathered weights and the reference's, one phase each. */
const ACTOR = "actor";
const REF = "ref";
/** The reference pass layer by layer borrows its layer arrays under this name (refGatherBuffers). */
const REF_LAYERS = "ref layers";
/**
 * Hidden states a reference pass layer by layer keeps at once, every micro-batch's [tokens, h] float32 on
 * the tensor backend: 256 MiB. A pass that needs more gathers the whole reference instead.
 */
const REF_BY_LAYER_STATE_BYTES = 256 * 2 ** 20;

/**
 * bf16 bytes of the tied head a reference pass layer by layer reads at a time from the mapped shards,
 * letting each block's pages go after it (LogProbOptions.headBlock): 16 MiB, where the whole embedding is
 * 272 MB at Qwen2.5-0.5B's size.
 */
const REF_HEAD_BLOCK_BYTES = 16 * 2 ** 20;

/** A reference pass's micro-batches (row indices) and each one's token batch, as refByLayer found them. */
interface RefMicroBatches {
  groups: number[][];
  parts: ReturnType<typeof responseTokenBatch>[];
}

/** The process's CPU seconds (user and system) so far. */
function cpuSecondsSoFar(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}
