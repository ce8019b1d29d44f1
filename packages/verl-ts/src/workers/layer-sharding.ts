/**
 * The gradient of one micro-batch, reduce-scattered unit by unit into this rank's gradient shard (a
 * unit: one decoder layer, or a run of the parameters around the layers).
 *
 * With gradient checkpointing (the model's gradientCheckpointing), FSDP per decoder layer: the forward
 * all-gathers each layer's parameters from the shards just before the layer runs and frees them after;
 * the backward gathers them again, recomputes the layer, and reduce-scatters its gradient at once, so
 * a rank holds the full gradient of one layer at a time and otherwise only its shard (models/layerwise.ts).
 * The units outside the layers (the embedding, vocabulary-sized) gather their gradient over the
 * mini-batch's micro-batches and are summed over the ranks once per mini-batch: kept as the LM head's
 * factors where those are the smaller, else in a whole buffer reduce-scattered (outer-gradient.ts).
 * A tfjs backward cannot wait for a collective, so gathering in the backward needs the recompute.
 *
 * Without it, one tape over the whole model keeps every layer's activations and computes with the
 * model's own full weights; after the backward the gradients are read and reduce-scattered one unit at
 * a time (the host holds one unit's full gradient at a time; the tensor backend holds all of them
 * until their unit is read).
 *
 * Every rank runs the same number of micro-batch rounds (the largest count of any rank): a rank with
 * fewer runs empty rounds that take part in the same collectives with zero gradients.
 */
import * as tf from "@tensorflow/tfjs";
import {
  HalfArray,
  type HalfDtype,
  type StoredValues,
  storedRange,
  type WeightDtype,
} from "../models/half-precision.js";
import { type LayerTensors, layerwiseStep } from "../models/layerwise.js";
import type { Qwen2Model } from "../models/qwen2.js";
import type { TokenBatch } from "../models/token-batch.js";
import { hostMemory } from "../models/wasm-heap.js";
import { bitsOnlyTensor, widenedTensor } from "../models/wasm-host-kernels.js";
import { WorkerStateError } from "./errors.js";
import type { GatherTake } from "./gather-buffers.js";
import { OuterUnitGradient } from "./outer-gradient.js";
import type { FlatUnit, ShardedParameters } from "./sharded-parameters.js";

const LAYER_PARAM = /^model\.layers\.(\d+)\./;

/** The unit a parameter is sharded in: its decoder layer, or the run of parameters around the layers. */
export function layerUnitKey(name: string): string {
  const m = LAYER_PARAM.exec(name);
  return m ? `layer ${m[1]}` : "outside the layers";
}

/** Whether a unit is one decoder layer's parameters (else: a run of those around the layers). */
export function isLayerUnit(unit: { key: string }): boolean {
  return unit.key.startsWith("layer ");
}

/**
 * A decoder layer's weights as tensors from its unit's gathered values: float32 values as tensors over
 * them, half bits widened, but for the matrices, which go into the layer's linear layers alone and are
 * read from their bits (bitsOnlyTensor). `shapes`: each parameter's shape by name.
 */
export function unitLayerTensors(
  unit: FlatUnit,
  values: StoredValues,
  shapes: ReadonlyMap<string, number[]>,
): LayerTensors {
  return layerTensorsOf(unitParts(unit, values), shapes);
}

/** Each parameter of `unit` by name: its range of the unit's gathered `values`. */
export function unitParts(unit: FlatUnit, values: StoredValues): Map<string, StoredValues> {
  return new Map(
    unit.entries.map((e) => {
      const at = e.offset - unit.start;
      return [e.name, storedRange(values, at, at + e.size)] as const;
    }),
  );
}

/**
 * A layer's tensors from its parameters' values by name (see unitLayerTensors). `tiled`: the matrices
 * whose bits are in the tile layout (FrozenShards' `tiles`), read by the addon's products alone.
 */
export function layerTensorsOf(
  values: ReadonlyMap<string, StoredValues>,
  shapes: ReadonlyMap<string, number[]>,
  tiled: ReadonlySet<string> = new Set(),
): LayerTensors {
  return new Map(
    [...values].map(([name, v]) => {
      const shape = shapes.get(name)!;
      if (!(v instanceof HalfArray)) return [name, tf.tensor(v, shape, "float32")];
      if (shape.length !== 2) return [name, widenedTensor(v, shape)];
      return [name, bitsOnlyTensor(v, shape as [number, number], tiled.has(name) ? "tiles" : "rows")];
    }),
  );
}

/** A read the loss asked for (MicroStep.afterBackward), served with the head's gradients. */
export interface PendingRead {
  tensors: tf.Tensor[];
  use: (values: Float32Array[]) => void;
}

/**
 * Serves `reads` and hands each of `tensors`' float32 values to `use` (the reads' tensors are disposed,
 * `tensors` are the caller's). Where the backend keeps tensors in host memory (wasm heap, cpu) `use` gets
 * the tensor's own memory, no copy: it must not make tensors (a heap view dies when the heap grows).
 * Elsewhere everything is read in one round trip (a GPU backend maps its buffers together).
 */
async function readServing(
  reads: PendingRead[],
  tensors: tf.Tensor[],
  use: (k: number, values: Float32Array) => void,
): Promise<void> {
  const readAll = (ts: tf.Tensor[]) => Promise.all(ts.map((t) => t.data() as Promise<Float32Array>));
  try {
    const inPlace = tensors.every((t) => hostMemory(t) !== null);
    const [values, host] = await Promise.all([
      Promise.all(reads.map((r) => readAll(r.tensors))),
      inPlace ? null : readAll(tensors),
    ]);
    for (const [i, r] of reads.entries()) r.use(values[i]!);
    for (const [k, t] of tensors.entries()) use(k, host ? host[k]! : hostMemory(t)!);
  } finally {
    for (const r of reads) for (const t of r.tensors) t.dispose();
  }
}

/** Decoder layers' gathered bits kept from an earlier phase (see LayerSharding's constructor). */
export interface HeldLayers {
  /** The shard's version when they were gathered. */
  version: string;
  dtype: WeightDtype;
  /** The bits of each layer's unit, by unit index. */
  arrays: Map<number, Uint16Array>;
}

export class LayerSharding {
  /** The unit of each decoder layer. */
  private readonly layerUnit: number[];
  /** The units outside the layers (embedding; final norm and heads). */
  private readonly outerUnits: number[];
  /** The trained variables outside the layers, and each variable's parameter name. */
  private readonly headVariables: tf.Variable[];
  private readonly shapes: Map<string, number[]>;
  /** Every trained variable, and by parameter name (the whole-model path). */
  private readonly variables: tf.Variable[];
  private readonly variableOf: Map<string, tf.Variable>;
  /**
   * Gradients kept for the micro-batches of this update (this object lives for one update): the outer
   * units' (they gather a mini-batch's rounds) and one buffer the size of the largest decoder layer.
   * Reused memory is rewritten at a fraction of the cost of first touching fresh pages.
   */
  private readonly outerGradients = new Map<number, OuterUnitGradient>();
  private layerBuffer: Float32Array | null = null;
  /**
   * Where each decoder layer's half bits are gathered, one array per length, overwritten by the next
   * layer's gather: a layer's tensors (widened from these bits, which its products read) are disposed
   * before the step asks for the next layer's (layerwise.ts).
   */
  private readonly layerGathered = new Map<number, Uint16Array>();

  /**
   * `take`: where the arrays layers are gathered into come from (new ones without it). `held`: layers
   * whose bits an earlier gather left in kept arrays, at the shard's version then: read from there, with
   * no gather, for as long as the shard is at that version (until this update's first optimizer step).
   */
  constructor(
    private readonly sharded: ShardedParameters,
    private readonly model: Qwen2Model,
    variables: tf.Variable[],
    private readonly paramNameOf: Map<string, string>,
    private readonly take: GatherTake = (ctor, length) => new ctor(length) as InstanceType<typeof ctor>,
    private readonly held?: HeldLayers,
  ) {
    const L = model.config.numHiddenLayers;
    this.layerUnit = Array.from({ length: L }, (_, i) => {
      const units = sharded.units.flatMap((u, k) => (u.key === `layer ${i}` ? [k] : []));
      if (units.length !== 1)
        throw new WorkerStateError(
          `decoder layer ${i}'s parameters form ${units.length} units of the flat layout, expected 1 (sharded with layerUnitKey?)`,
        );
      return units[0]!;
    });
    this.outerUnits = sharded.units.flatMap((u, k) => (isLayerUnit(u) ? [] : [k]));
    this.headVariables = variables.filter((v) => !LAYER_PARAM.test(paramNameOf.get(v.name) ?? ""));
    this.shapes = new Map(model.trainedSpecs.map((s) => [s.name, s.shape]));
    this.variables = variables;
    this.variableOf = new Map(variables.map((v) => [paramNameOf.get(v.name)!, v]));
  }

  /**
   * Adds one micro-batch's gradient (of `loss`, which runs the model's forward on `tokens`) into this
   * rank's shard gradient, layer by layer when the model checkpoints its layers, else over the whole
   * model (see the file comment). `tokens` null: an empty round. `pending` gives the reads the loss
   * asked for, served together with the first gradients read. `round`: which of the mini-batch's rounds
   * this is (every rank calls with the same); layer by layer, the gradients outside the layers (the
   * vocabulary-sized embedding's) add up over the rounds and are reduce-scattered once, in the last.
   * The mini-batch's rounds write every value of the shard gradient before they add to it: its memory
   * may hold anything before the first round.
   */
  async microBatch(
    tokens: TokenBatch | null,
    loss: () => tf.Scalar,
    pending: () => PendingRead[],
    shardGrad: Float32Array,
    round: { first: boolean; last: boolean },
  ): Promise<void> {
    if (this.model.gradientCheckpointing) await this.layerByLayer(tokens, loss, pending, shardGrad, round);
    else await this.wholeModel(tokens, loss, pending, shardGrad, round.first);
  }

  /**
   * One tape over the whole model; the gradients reduce-scattered unit by unit afterwards (written over
   * what `shardGrad` held in the first round, added after).
   */
  private async wholeModel(
    tokens: TokenBatch | null,
    loss: () => tf.Scalar,
    pending: () => PendingRead[],
    shardGrad: Float32Array,
    first: boolean,
  ): Promise<void> {
    const sharded = this.sharded;
    let grads: tf.NamedTensorMap = {};
    if (tokens) {
      const r = tf.variableGrads(loss, this.variables);
      r.value.dispose();
      grads = r.grads;
    }
    try {
      for (const [u, unit] of sharded.units.entries()) {
        const reads = u === 0 ? pending() : [];
        const buf = new Float32Array(unit.end - unit.start);
        const present = unit.entries.flatMap((e) => {
          const g = grads[this.variableOf.get(e.name)?.name ?? ""];
          return g ? [{ e, g }] : [];
        });
        try {
          await readServing(
            reads,
            present.map(({ g }) => g),
            (k, values) => buf.set(values, present[k]!.e.offset - unit.start),
          );
        } finally {
          for (const { g } of present) g.dispose();
        }
        await sharded.reduceScatterUnit(u, buf, shardGrad, first);
      }
    } finally {
      for (const g of Object.values(grads)) if (!g.isDisposed) g.dispose();
    }
  }

  /**
   * FSDP per decoder layer (see the file comment). Each layer's gradient is reduce-scattered as soon as
   * it exists; the outer units' (the head's and the embedding's) add up in kept buffers over the
   * mini-batch's rounds and are reduce-scattered in its last round: one collective over the
   * vocabulary-sized gradient per optimizer step instead of one per micro-batch.
   */
  private async layerByLayer(
    tokens: TokenBatch | null,
    loss: () => tf.Scalar,
    pending: () => PendingRead[],
    shardGrad: Float32Array,
    round: { first: boolean; last: boolean },
  ): Promise<void> {
    const sharded = this.sharded;
    const unitSize = (u: number) => sharded.units[u]!.end - sharded.units[u]!.start;
    // the outer units' gradients gather contributions from the head and the embedding, over the rounds
    const outer = new Map(this.outerUnits.map((u) => [u, this.outerGradient(u, round.first)]));
    /** The outer unit's gradient that parameter `name` belongs to. */
    const gradientOf = (name: string): OuterUnitGradient => {
      const offset = sharded.offsetOf(name);
      for (const u of this.outerUnits) {
        const unit = sharded.units[u]!;
        if (offset >= unit.start && offset < unit.end) return outer.get(u)!;
      }
      throw new WorkerStateError(`parameter ${name} is not in a unit outside the layers`);
    };
    // head matrices whose gradient the LM head hands over as its factors (headGradientInto)
    const routed = new Set<string>();
    // in the first round a head parameter's gradient is the first in its place: copied in, not added (0 + x
    // is x but for -0, and a -0 sums into the shard gradient as +0 does); in a later round, or onto what
    // the head handed over, it adds
    const setInto = (name: string, values: Float32Array) =>
      gradientOf(name).addValues(name, values, round.first && !routed.has(name));
    await layerwiseStep(this.model, tokens, this.headVariables, loss, {
      layerWeights: async (i) => {
        const u = this.layerUnit[i]!;
        // the update computes with the weights the rollout and old log-probs used: rounded to model.dtype
        // (LoRA adapters are held in float32 whatever the base's dtype)
        // (half: gathered as half bits, widened straight into the tensors; the same values)
        const dtype = this.model.lora ? "float32" : this.model.dtype;
        // half bits into the kept array; float32 into a new one (a tensor made from it may keep reading it)
        const kept =
          this.held?.version === sharded.version && this.held.dtype === dtype
            ? this.held.arrays.get(u)
            : undefined;
        const values = kept
          ? new HalfArray(dtype as HalfDtype, kept)
          : await sharded.gatherUnitStored(
              u,
              dtype,
              dtype === "float32" ? undefined : this.layerGatherOut(unitSize(u)),
            );
        return unitLayerTensors(sharded.units[u]!, values, this.shapes);
      },
      layerGradients: async (i, grads) => {
        const u = this.layerUnit[i]!;
        const unit = sharded.units[u]!;
        // gradients that fill the whole unit overwrite every value: zeroing it first is a wasted pass
        const whole = grads !== null && this.coversUnit(u, grads);
        const buf = whole ? this.layerArray(unitSize(u)) : this.zeroedLayer(unitSize(u));
        if (grads) {
          const entries = [...grads];
          await readServing(
            [],
            entries.map(([, g]) => g),
            (k, values) => buf.set(values, sharded.offsetOf(entries[k]![0]) - unit.start),
          );
        }
        // every round reduces every layer: the first writes over what the gradient's memory held
        await sharded.reduceScatterUnit(u, buf, shardGrad, round.first);
      },
      // the LM head's matrix (the tied embedding, or lm_head) hands its gradient over as its factors
      // where it reads bf16 bits: no vocabulary-sized tensor on the heap, no pass to copy it
      headGradientInto: (v) => {
        const name = this.paramNameOf.get(v.name)!;
        if (this.shapes.get(name)?.length !== 2) return undefined;
        routed.add(name);
        const gradient = gradientOf(name);
        return (left, right, n) => gradient.addProduct(name, left, right, n);
      },
      headGradients: async (grads) => {
        const entries = grads ? [...grads] : [];
        await readServing(
          pending(),
          entries.map(([, g]) => g),
          (k, values) => setInto(this.paramNameOf.get(entries[k]![0])!, values),
        );
      },
      // the embedding's gradient is zero but for the batch's tokens' rows: only those are added (no
      // [vocab, h] tensor on the heap, no read of it, no pass over the vocabulary)
      embeddingRowGradient: async (grad) => {
        const name = "model.embed_tokens.weight";
        // a frozen embedding (LoRA: the adapters are the trained parameters) takes no gradient
        if (grad && this.variableOf.has(name))
          gradientOf(name).addRows(name, grad.ids, (await grad.dy.data()) as Float32Array);
        if (round.last) for (const u of this.outerUnits) await outer.get(u)!.reduceInto(shardGrad);
      },
    });
  }

  /** Bytes of this update's gradient buffers (the outer units', a layer's, and the layers' gathers). */
  get bufferBytes(): number {
    let n = this.layerBuffer?.byteLength ?? 0;
    for (const g of this.outerGradients.values()) n += g.bytes;
    for (const b of this.layerGathered.values()) n += b.byteLength;
    return n;
  }

  /**
   * Outer unit `u`'s gradient, kept from the round before: emptied for the first round of a mini-batch,
   * as the rounds before left it for a later one.
   */
  private outerGradient(u: number, first: boolean): OuterUnitGradient {
    let gradient = this.outerGradients.get(u);
    if (!gradient) {
      if (!first) throw new WorkerStateError(`unit ${u}: a later round before the mini-batch's first`);
      const unit = this.sharded.units[u]!;
      const budget = OuterUnitGradient.defaultBudget(unit.end - unit.start, this.sharded.worldSize);
      gradient = new OuterUnitGradient(this.sharded, u, this.shapes, budget);
      this.outerGradients.set(u, gradient);
    }
    if (first) gradient.begin();
    return gradient;
  }

  /** The array a layer's half bits of `size` values are gathered into (see layerGathered). */
  private layerGatherOut(size: number): Uint16Array {
    let out = this.layerGathered.get(size);
    if (!out) {
      out = this.take(Uint16Array, size);
      this.layerGathered.set(size, out);
    }
    return out;
  }

  /** Whether `grads` has every entry of unit `u` and its entries leave no gap in the unit. */
  private coversUnit(u: number, grads: LayerTensors): boolean {
    const unit = this.sharded.units[u]!;
    let filled = 0;
    for (const e of unit.entries) {
      if (!grads.has(e.name)) return false;
      filled += e.size;
    }
    return filled === unit.end - unit.start;
  }

  /** A zeroed buffer of `size` values for one decoder layer's gradient (the same memory every layer). */
  private zeroedLayer(size: number): Float32Array {
    return this.layerArray(size).fill(0);
  }

  /** `size` values of the memory kept for a decoder layer's gradient, as the layer before left them. */
  private layerArray(size: number): Float32Array {
    if (!this.layerBuffer || this.layerBuffer.length < size) {
      const most = Math.max(
        ...this.layerUnit.map((u) => this.sharded.units[u]!.end - this.sharded.units[u]!.start),
      );
      this.layerBuffer = new Float32Array(Math.max(most, size));
    }
    return this.layerBuffer.subarray(0, size);
  }
}
