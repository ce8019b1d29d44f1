/**
 * The base of the trained workers (the actor and the critic): their rank context, the update loop over
 * mini- and micro-batches with global loss weights, the optimizer step on the shard, and the registered
 * methods every such worker has (shard info, gathered parameters, checkpoint save and load).
 */
import * as tf from "@tensorflow/tfjs";
import type { LossAggMode } from "../algorithms/loss-aggregation.js";
import {
  bytesPerValue,
  HalfArray,
  type HalfDtype,
  type StoredValues,
  type WeightDtype,
} from "../models/half-precision.js";
import type { Qwen2Model } from "../models/qwen2.js";
import type { TokenBatch } from "../models/token-batch.js";
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { Dispatch, type Registrations } from "../single-controller/registration.js";
import { Worker } from "../single-controller/worker.js";
import { WorkerStateError } from "./errors.js";
import { FaultInjector } from "./fault-injection.js";
import { GatherBuffers } from "./gather-buffers.js";
import { type HeldLayers, isLayerUnit, LayerSharding, unitParts } from "./layer-sharding.js";
import { globalMaskSum, lossTokenWeights } from "./loss-weights.js";
import { microBatches, miniBatchPlan } from "./micro-batches.js";
import { learningRate, type OptimSettings } from "./optim.js";
import { allReduceMax, allReduceSum, type RankContext } from "./rank-context.js";
import { releaseTransientMemory } from "./release-memory.js";
import { pickRows, responseTokenBatch, rowsOf } from "./rows.js";
import type { FlatUnit, ShardedParameters } from "./sharded-parameters.js";

/** Where a rank's shard lies and the bytes it holds. */
export interface ShardInfo {
  rank: number;
  worldSize: number;
  numParameters: number;
  /** Parameters in this rank's shard (its piece of every unit). */
  shardElements: number;
  /** fp32 master shard of the parameters. */
  paramShardBytes: number;
  /** AdamW exp_avg + exp_avg_sq of the shard. */
  optimizerBytes: number;
  /**
   * The full weights the model computes with, in their storage dtype (model.dtype: 2 bytes per
   * parameter for bfloat16 / float16), as a pass holds them on every rank.
   */
  gatheredParamBytes: number;
  backend: string;
  /** The backend's line: its name and whether the native kernels are on (the reason when not). */
  backendLine: string;
  pid: number;
}

/** One micro-batch of an update, as the loss sees it. */
export interface MicroStep {
  /** Its rows. */
  part: DataProto;
  /** Their tokens, trimmed (responseTokenBatch). */
  tokens: { tb: TokenBatch; P: number; R: number; kept: number };
  /** The global loss weight of each of their response tokens [rows, R]. */
  weights: BatchTensor;
  /** The mini-batch's metric sums, to add to. */
  sums: Float64Array;
  /**
   * Asks for tensors' values after the backward pass: `use` gets them (in order) once the gradients are
   * read, all in one round trip. The loss runs inside the gradient tape, where nothing can be awaited,
   * and synchronous reads do not exist on GPU backends.
   */
  afterBackward(tensors: tf.Tensor[], use: (values: Float32Array[]) => void): void;
  /** Reads asked for by afterBackward, not yet served. */
  pending: { tensors: tf.Tensor[]; use: (values: Float32Array[]) => void }[];
}

/**
 * A worker that trains a sharded model (the actor, the critic): its rank context and the registered
 * methods every such worker has (gathered parameters, checkpoint save and load of its shard).
 */
export abstract class ShardedWorker extends Worker {
  static readonly registered = {
    shardInfo: Dispatch.ONE_TO_ALL,
    // every rank takes part: the weights may have to be all-gathered from the shards
    gatheredParameters: Dispatch.ONE_TO_ALL,
    saveCheckpoint: Dispatch.ONE_TO_ALL,
    loadCheckpoint: Dispatch.ONE_TO_ALL,
  } satisfies Registrations<ShardedWorker>;

  protected sharded?: ShardedParameters;
  /** Where units are gathered into, kept between phases (gather-buffers.ts). */
  protected readonly gatherBuffers = new GatherBuffers();
  /**
   * The last update's gradient buffers at their largest: the gradient shard and LayerSharding's
   * (memoryInfo's updateBufferBytes).
   */
  protected updateBufferBytes = 0;
  /**
   * The update's gradient shard, kept from one update to the next where decoder layers' gathers are
   * carved out of it between updates (layersShareGradientMemory).
   */
  private gradientMemory: Float32Array | null = null;
  /**
   * Whether the model holds units whose bits lie in their own pieces of the gradient shard's memory
   * (gatherIntoGradient): a mini-batch's last round writes over them, so they are gathered again after
   * each optimizer step, taken or skipped, that another mini-batch follows.
   */
  private weightsInGradient = false;
  /** Bytes of the units the last update read from its gradient shard's memory (memoryInfo). */
  protected updateGatherInGradientBytes = 0;
  /** Times this worker handed the memory it freed back to the kernel (memoryInfo's transientReleases). */
  protected transientReleases = 0;
  /** The tensor backend initModel selected, and its line. */
  protected backendName = "";
  protected backendLine = "";
  private readonly faults = new FaultInjector(() => this.rank);

  protected get ctx(): RankContext {
    return { rank: this.rank, worldSize: this.worldSize, group: this.env.collectiveGroup };
  }

  /**
   * Full collections, then every whole free page of malloc's heap back to the kernel
   * (releaseTransientMemory), counted in transientReleases.
   */
  protected releaseTransients(): void {
    this.transientReleases++;
    releaseTransientMemory();
  }

  /** Test fault hook (fault-injection.ts): call at the start of a method a test may crash. */
  protected injectFault(method: string): void {
    this.faults.at(method);
  }

  /** The trained parameters by name, as the model holds them now (the flat layout's order). */
  protected abstract currentParameters(): Promise<Map<string, Float32Array>>;

  /** Puts full parameters (by name) into the model. */
  protected abstract applyParameters(values: Map<string, Float32Array>): void;

  /**
   * Whether the decoder layers' gathers of the phases between updates are carved out of the update's
   * gradient shard's memory (gather-buffers.ts: the two never live at once). Only where the update gathers
   * its layers itself (FSDP per layer) and the model holds no layer between phases. Default: never.
   */
  protected layersShareGradientMemory(_model: Qwen2Model): boolean {
    return false;
  }

  /** The kept gradient shard's memory, lent to gatherBuffers while no update runs (made on first use). */
  private sharedGradientMemory(): Float32Array {
    if (!this.gradientMemory) {
      this.gradientMemory = this.needSharded().newGradient();
      this.gatherBuffers.lendRegion(this.gradientMemory.buffer as ArrayBuffer);
    }
    return this.gradientMemory;
  }

  /** The gradient shard's memory lent again for the phases until the next update (no-op when it is). */
  protected lendGradientMemory(): void {
    if (this.gradientMemory && !this.gatherBuffers.regionLent)
      this.gatherBuffers.lendRegion(this.gradientMemory.buffer as ArrayBuffer);
  }

  /**
   * For an update that shares its gradient shard's memory (layersShareGradientMemory): takes that memory
   * back and gathers the units `which` selects (those around the layers: the vocabulary-sized embedding)
   * into their own pieces of it, in `model`'s half dtype, where a unit's bits fit its float32 piece (2
   * bytes a value against 4 of its 1/W share: up to 2 ranks), so the update holds no copy of them beside
   * its gradient. A mini-batch's rounds write a unit's piece only in the last round, after the head's and
   * the lookup's last reads (layer-sharding.ts). Bits an earlier phase left carved exactly there, at the
   * shard's version, are read in place (one all-reduce decides for all ranks). A unit that does not fit
   * goes into arrays lent to `borrower`. Every rank calls it at the same point.
   */
  protected async gatherIntoGradient(
    model: Qwen2Model,
    which: (unit: FlatUnit) => boolean,
    borrower: string,
  ): Promise<void> {
    const sharded = this.needSharded();
    const grad = this.sharedGradientMemory();
    const selected = [...sharded.units.entries()].filter(([, unit]) => which(unit));
    const placed = new Map<number, HalfArray>();
    for (const [u, unit] of selected) {
      const dtype = unitStorageDtype(model, unit);
      const piece = sharded.pieces[u]!;
      const size = unit.end - unit.start;
      if (dtype === "float32" || 2 * size > 4 * (piece.end - piece.start)) continue;
      const view = new Uint16Array(grad.buffer, grad.byteOffset + 4 * piece.local, size);
      placed.set(u, new HalfArray(dtype, view));
    }
    // per unit, on every rank alike (each rank's pieces, so what fits, may differ)
    const kept = await sharded.everyRankEach(
      selected.map(([u]) => {
        const at = placed.get(u);
        return at !== undefined && this.gatherBuffers.holdsAt(this.unitContent(u, at.dtype), at.bits);
      }),
    );
    const inPlace = new Set(selected.flatMap(([u], k) => (kept[k] ? [u] : [])));
    // the phases' arrays carved out of the memory are gone now (those read in place were idle)
    this.gatherBuffers.reclaimRegion();
    this.updateGatherInGradientBytes = 0;
    for (const [u, unit] of selected) {
      const dtype = unitStorageDtype(model, unit);
      const at = placed.get(u);
      // after an optimizer step the model holds the units already: a placed one is gathered where it
      // lies, the others through a scratch array the model copies from (as gatherWeightsInto does)
      const held = unit.entries.every((e) => model.holdsWeight(e.name));
      let values: StoredValues;
      if (at && inPlace.has(u)) {
        values = at;
        this.gatherBuffers.reusedBytes += at.bits.byteLength;
      } else {
        const out =
          at?.bits ??
          (dtype === "float32"
            ? undefined
            : this.gatherBuffers.take(held ? SCRATCH : borrower, Uint16Array, unit.end - unit.start));
        values = await sharded.gatherUnitStored(u, dtype, out);
      }
      if (at) this.updateGatherInGradientBytes += at.bits.byteLength;
      if (at && held) model.storedValuesWritten(unitParts(unit, values));
      else if (values instanceof HalfArray) model.setStoredParameters(unitParts(unit, values));
      else model.setParameters(unitParts(unit, values) as Map<string, Float32Array>);
      this.gatherBuffers.reclaim(SCRATCH);
    }
    this.weightsInGradient = placed.size > 0;
  }

  protected needSharded(): ShardedParameters {
    if (!this.sharded)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before training or checkpointing`);
    return this.sharded;
  }

  /** Storage dtype of the model this worker computes with (model.dtype). */
  protected storageDtype(): WeightDtype {
    return this.sharded?.weightDtype ?? "float32";
  }

  /** Parameters of the model this worker computes with (the sharded ones, unless it holds others). */
  protected numParameters(): number {
    return this.sharded?.layout.total ?? 0;
  }

  /** Where this rank's shard lies and the bytes it holds. */
  shardInfo(): ShardInfo {
    const s = this.sharded;
    const total = this.numParameters();
    return {
      rank: this.rank,
      worldSize: this.worldSize,
      numParameters: total,
      shardElements: s?.params.length ?? 0,
      paramShardBytes: s?.params.byteLength ?? 0,
      optimizerBytes: s?.optim.stateBytes ?? 0,
      gatheredParamBytes: total * bytesPerValue(this.storageDtype()),
      backend: this.backendName,
      backendLine: this.backendLine,
      pid: process.pid,
    };
  }

  /**
   * The update loop both trained workers run: `epochs` passes over the rank's rows in local
   * mini-batches (laid out by layoutForMiniBatches), each cut into micro-batches (fixed rows, or a token
   * budget), the gradient of `loss` accumulated over them with the global token weights of
   * `lossAggMode` (layer by layer, FSDP per layer: layer-sharding.ts), then one optimizer step on the shards and the gathered parameters back in the model.
   * `loss` runs inside the gradient tape and adds its metric sums to `step.sums` (all-reduced per
   * mini-batch, summed over mini-batches). One scheduler step per call.
   */
  protected async updateEpochs(
    data: DataProto,
    plan: {
      /** What the mini-batch is, for errors ("actor.ppo_mini_batch_size x rollout.n"). */
      what: string;
      globalMiniRows: number;
      micro: number | null;
      maxTokens: number | null;
      epochs: number;
      lossAggMode: LossAggMode;
      optim: OptimSettings;
      gradClip: number;
      /** Metric sums per mini-batch. */
      sums: number;
    },
    model: Qwen2Model,
    vars: tf.Variable[],
    paramNameOf: Map<string, string>,
    loss: (step: MicroStep) => tf.Scalar,
  ): Promise<{ sums: Float64Array; miniBatches: number; gradNorm: number; skipped: number; lr: number }> {
    const sharded = this.needSharded();
    // where the layers' gathers between updates lie in the gradient shard's memory, the update takes it
    // back (those gathers are gone) and gathers each layer itself
    const shareGradient = this.layersShareGradientMemory(model);
    if (shareGradient) {
      this.sharedGradientMemory();
      // (a no-op after gatherIntoGradient, which took it back already)
      this.gatherBuffers.reclaimRegion();
    }
    // the layers' gathers go into one kept array (taken back when this update ends), unless an earlier
    // phase's gather left every layer's bits of this version in kept arrays
    const layers = new LayerSharding(
      sharded,
      model,
      vars,
      paramNameOf,
      (ctor, length) => this.gatherBuffers.take(LAYERS, ctor, length),
      shareGradient ? undefined : await this.heldLayers(model),
    );
    const { localMini, micro } = miniBatchPlan(
      this.ctx,
      data.length,
      plan.globalMiniRows,
      plan.micro,
      plan.what,
    );
    const lr = learningRate(plan.optim, sharded.schedulerStep);
    this.updateBufferBytes = 0;
    const sums = new Float64Array(plan.sums);
    let gradNormSum = 0;
    let updates = 0;
    let skipped = 0;
    try {
      for (let epoch = 0; epoch < plan.epochs; epoch++) {
        for (let ms = 0; ms < data.length; ms += localMini) {
          const mini = data.slice(ms, ms + localMini);
          const R = mini.tensor("responses").shape[1]!;
          const mask = mini.batch.loss_mask ?? mini.tensor("response_mask");
          const globalTokens = await globalMaskSum(this.ctx, mask);
          const weights = lossTokenWeights(mask, plan.lossAggMode, globalTokens, plan.globalMiniRows);
          const mb = new Float64Array(plan.sums);
          const groups = microBatches(mini, micro, plan.maxTokens);
          // every rank runs as many rounds as the rank with the most micro-batches (layer-sharding.ts)
          const rounds = await allReduceMax(this.ctx, groups.length);
          // the rounds write every value of the gradient before adding to it (LayerSharding.microBatch):
          // the shared memory, which held the layers' gathers, needs no pass of zeros first
          const grad = shareGradient ? this.sharedGradientMemory() : sharded.newGradient();
          if (rounds === 0) grad.fill(0);
          for (let round = 0; round < rounds; round++) {
            const rows = groups[round];
            if (!rows) {
              await layers.microBatch(
                null,
                () => tf.scalar(0),
                () => [],
                grad,
                { first: round === 0, last: round === rounds - 1 },
              );
              continue;
            }
            const part = rowsOf(mini, rows);
            const step: MicroStep = {
              part,
              tokens: responseTokenBatch(part),
              weights: { data: pickRows(weights, R, rows), shape: [rows.length, R] },
              sums: mb,
              pending: [],
              afterBackward(tensors, use) {
                // A clone shares the data, so the loss the tape hands back can be disposed independently.
                this.pending.push({ tensors: tensors.map((t) => tf.keep(tf.clone(t))), use });
              },
            };
            await layers.microBatch(
              step.tokens.tb,
              () => loss(step),
              () => step.pending.splice(0),
              grad,
              { first: round === 0, last: round === rounds - 1 },
            );
          }
          this.updateBufferBytes = Math.max(this.updateBufferBytes, grad.byteLength + layers.bufferBytes);
          await allReduceSum(this.ctx, mb);
          for (let i = 0; i < plan.sums; i++) sums[i]! += mb[i]!;
          // the micro-batches' transients (layers' gathers, activations, the head's factors), freed but
          // kept resident, go back before the optimizer step, whose AdamW moments (first written by the
          // first step) would otherwise land on top of them
          if (shareGradient) this.releaseTransients();
          const norm = await sharded.step(grad, lr, plan.gradClip);
          const more = epoch < plan.epochs - 1 || ms + localMini < data.length;
          if (Number.isFinite(norm)) {
            await this.afterOptimizerStep(model, more);
            gradNormSum += norm;
            updates++;
          } else {
            skipped++;
            // veRL warns on every skipped step; the metric alone (…/skipped_updates) is easy to miss
            if (this.ctx.rank === 0)
              console.warn(
                `[${this.constructor.name}] WARN: grad_norm is ${norm} in mini-batch ${ms / localMini + 1} of ${Math.ceil(data.length / localMini)} (epoch ${epoch + 1}): optimizer step skipped, weights unchanged`,
              );
            // the shard is unchanged, but the last round wrote over the units read from the gradient's
            // memory: the next mini-batch needs them gathered again
            if (this.weightsInGradient && more) await this.afterOptimizerStep(model, more);
          }
        }
      }
      sharded.schedulerStep++;
      return {
        sums,
        miniBatches: plan.epochs * (data.length / localMini),
        gradNorm: updates ? gradNormSum / updates : Number.NaN,
        skipped,
        lr,
      };
    } finally {
      // the layers' weights were disposed with their tensors: nothing reads the kept array now
      this.gatherBuffers.reclaim(LAYERS);
      // (units the model read from the gradient's memory are evicted when the update phase ends, before
      // any phase gathers into it)
      this.weightsInGradient = false;
      if (shareGradient) this.lendGradientMemory();
    }
  }

  /**
   * After an optimizer step of updateEpochs: the model gets the new parameters (all of them, gathered);
   * `more`: another step of this update follows.
   */
  protected async afterOptimizerStep(_model: Qwen2Model, _more: boolean): Promise<void> {
    this.applyParameters(await this.needSharded().gather());
  }

  /**
   * All-gathers the units `which` selects from the shards into `model` (in its storage dtype; evicted
   * weights are held again), one unit at a time: beside the model, a rank holds one unit's gathered
   * values at most. A unit the model stores in a half dtype is gathered in it (each rank rounds its own
   * piece, the ring moves half the bytes, nothing is rounded after: the same bits as rounding the
   * gathered float32 values). `assign` puts a unit's float32 values elsewhere instead of into the model.
   * A unit the model holds already is gathered into a kept array (the model copies the values); with
   * `borrower`, an evicted one is gathered into arrays of `gatherBuffers` lent to it, which the caller
   * reclaims once it has evicted the model again. Every rank calls it at the same point with the same
   * selection.
   */
  protected async gatherWeightsInto(
    model: Qwen2Model,
    which: (unit: FlatUnit) => boolean = () => true,
    assign?: (values: Map<string, Float32Array>) => void,
    borrower?: string,
  ): Promise<void> {
    const sharded = this.needSharded();
    const selected = [...sharded.units.entries()].filter(([, unit]) => which(unit));
    const dtypeOf = (unit: FlatUnit) => (assign ? "float32" : unitStorageDtype(model, unit));
    // kept arrays for half bits only: a float32 tensor made from an array (tfjs's cpu backend) or a
    // variable assigned one keeps reading that array, which the next gather would overwrite
    const lenderOf = (unit: FlatUnit) =>
      dtypeOf(unit) === "float32"
        ? undefined
        : unit.entries.every((e) => model.holdsWeight(e.name))
          ? SCRATCH
          : borrower;
    // What a borrower's gather of half bits leaves in its arrays is named by the shard's version: when
    // every such unit is still there on every rank (generation, then the old log-prob pass, with no step
    // between), the arrays are taken back and nothing is gathered.
    const keptUnits = selected.filter(([, unit]) => borrower !== undefined && lenderOf(unit) === borrower);
    const takenBack =
      borrower === undefined
        ? undefined
        : await this.takeBack(
            keptUnits.map(([u, unit]) => [u, dtypeOf(unit)]),
            borrower,
          );
    // units gathered for a phase may lie in the gradient shard's memory (idle between updates); the first
    // unit carved lies where its own piece of the gradient is, which the update reads in place
    const carve = borrower !== undefined && this.layersShareGradientMemory(model);
    if (carve) this.sharedGradientMemory();
    for (const [u, unit] of selected) {
      const dtype = dtypeOf(unit);
      const lender = lenderOf(unit);
      const content = lender === borrower ? this.unitContent(u, dtype) : undefined;
      const held = takenBack?.get(u);
      let values: StoredValues;
      if (held) values = new HalfArray(dtype as HalfDtype, held as Uint16Array);
      else {
        const out = lender
          ? this.gatherBuffers.take(lender, Uint16Array, unit.end - unit.start, {
              carve: carve && lender === borrower,
            })
          : undefined;
        values = await sharded.gatherUnitStored(u, dtype, out);
        if (out && content !== undefined) this.gatherBuffers.markHolding(out, content);
      }
      const parts = unitParts(unit, values);
      if (assign) assign(parts as Map<string, Float32Array>);
      else if (values instanceof HalfArray) model.setStoredParameters(parts);
      else model.setParameters(parts as Map<string, Float32Array>);
      // the model copied the values of weights it held: the array is free for the next unit
      if (lender === SCRATCH) this.gatherBuffers.reclaim(SCRATCH);
    }
  }

  /**
   * The kept arrays that hold `units`' bits (unit, dtype) at the shard's current version, lent to
   * `borrower`, when every one of them is still there on every rank; else undefined, nothing taken. One
   * all-reduce decides, so the ranks gather together or not at all: every rank calls it at the same point.
   */
  private async takeBack(
    units: [number, WeightDtype][],
    borrower: string,
  ): Promise<Map<number, Uint16Array> | undefined> {
    if (units.length === 0) return undefined;
    const contents = units.map(([u, dtype]) => this.unitContent(u, dtype));
    const mine = contents.every((c) => this.gatherBuffers.holds(c));
    if (!(await this.needSharded().everyRank(mine))) return undefined;
    return new Map(
      units.map(([u], i) => [u, this.gatherBuffers.takeHolding(borrower, contents[i]!) as Uint16Array]),
    );
  }

  /** What a whole gather of unit `u` in `dtype` leaves in its array, named by the shard's version. */
  private unitContent(u: number, dtype: WeightDtype): string {
    return `${this.needSharded().version} unit ${u} ${dtype}`;
  }

  /**
   * For an update layer by layer: when every decoder layer's bits, gathered at the shard's current version
   * and in the dtype the update gathers them in, are still in kept arrays on every rank (generation and
   * the old log-prob pass gathered them, and no other pass took the arrays since), those arrays, lent to
   * the update. One all-reduce decides, so the ranks gather together or not at all.
   */
  private async heldLayers(model: Qwen2Model): Promise<HeldLayers | undefined> {
    if (!model.gradientCheckpointing) return undefined;
    const sharded = this.needSharded();
    // as LayerSharding gathers them: LoRA's base is frozen, its adapters float32
    const dtype: WeightDtype = model.lora ? "float32" : model.dtype;
    const units = sharded.units.flatMap((unit, u) => (isLayerUnit(unit) ? [u] : []));
    if (dtype === "float32" || units.length === 0) return undefined;
    const arrays = await this.takeBack(
      units.map((u) => [u, dtype]),
      LAYERS,
    );
    if (!arrays) return undefined;
    return { version: sharded.version, dtype, arrays };
  }

  /** The gathered parameters as one flat vector (checkpoint order); every rank returns the same. */
  async gatheredParameters(): Promise<Float32Array> {
    return this.needSharded().layout.flatten(await this.currentParameters());
  }

  /** Writes this rank's shard (params + AdamW state + counters) under `dir`. */
  saveCheckpoint(dir: string): { rank: number; bytes: number } {
    return { rank: this.rank, bytes: this.needSharded().save(dir) };
  }

  /** Loads the shards written by saveCheckpoint (by any number of ranks) and takes this rank's range. */
  async loadCheckpoint(dir: string): Promise<{ rank: number; schedulerStep: number }> {
    const sharded = this.needSharded();
    this.applyParameters(sharded.load(dir));
    return { rank: this.rank, schedulerStep: sharded.schedulerStep };
  }
}

/** The borrower of gatherBuffers' arrays gathered into for a copy (returned after each unit). */
const SCRATCH = "scratch";
/** The borrower of the array an update's layers are gathered into (returned when the update ends). */
const LAYERS = "layers";

/** The dtype every parameter of `unit` is stored in by `model`; float32 where they differ. */
function unitStorageDtype(model: Qwen2Model, unit: FlatUnit): WeightDtype {
  const dtypes = new Set(unit.entries.map((e) => model.storageDtypeOf(e.name)));
  return dtypes.size === 1 ? [...dtypes][0]! : "float32";
}
