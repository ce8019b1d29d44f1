/**
 * The Qwen2 / Qwen3 / Llama causal LM in tfjs: embedding, N x decoder block (RMSNorm, GQA attention with
 * rotary embeddings, Qwen3's per-head q/k norms, RMSNorm, SwiGLU MLP: decoder-block.ts), final RMSNorm, LM
 * head (tied or not). Parameters
 * are tf.Variables named as in HF checkpoints (parameterSpecs is the name map); linear weights are held
 * transposed ([in, out], see linear.ts).
 */
import * as tf from "@tensorflow/tfjs";
import { gaussian, mulberry32 } from "../random.js";
import { cachedAttention, causalMask, type SequenceAttention } from "./attention.js";
import { checkpointedBlock, tapeIsRecording } from "./checkpointed-block.js";
import { hasQkNorm, type Qwen2Config } from "./config.js";
import {
  type BlockWeights,
  blockFinish,
  blockProjections,
  blockRowsIndependentPast,
  decoderBlock,
  decoderBlocks,
} from "./decoder-block.js";
import { ModelFormatError } from "./errors.js";
import { HalfArray, type StoredValues, type WeightDtype } from "./half-precision.js";
import type { KVCache } from "./kv-cache.js";
import { type LinearWeight, linear, linearTransposed, project } from "./linear.js";
import { type AdapterSpec, LoraAdapters, type LoraConfig } from "./lora.js";
import { type DecodeStepTables, nativeDecodeAttention } from "./native-decode-attention.js";
import { type Bf16Weight, cloneKeepingBits, refuseUnwritten } from "./native-matmul-bf16.js";
import { nativeMatmulActive } from "./native-state.js";
import { rmsNorm } from "./rms-norm.js";
import { Rotary } from "./rotary.js";
import { type TokenBatch, tokenPositions } from "./token-batch.js";
import { embeddingRows, widenedRows } from "./wasm-host-kernels.js";
import { transposeStored, WeightStore, type WeightStoreOptions } from "./weight-store.js";

/** One parameter: HF name, HF shape, and whether we hold it transposed. */
export interface ParamSpec {
  name: string;
  /** Shape as stored in HF checkpoints. */
  hfShape: number[];
  /** Shape as held here. */
  shape: number[];
  transposed: boolean;
  init: "normal" | "ones" | "zeros";
}

/** The parameter list of a config, in checkpoint order. */
export function parameterSpecs(c: Qwen2Config): ParamSpec[] {
  const h = c.hiddenSize;
  const q = c.numAttentionHeads * c.headDim;
  const kv = c.numKeyValueHeads * c.headDim;
  const specs: ParamSpec[] = [];
  const linear = (name: string, out: number, inp: number) =>
    specs.push({ name, hfShape: [out, inp], shape: [inp, out], transposed: true, init: "normal" });
  const vec = (name: string, n: number, init: ParamSpec["init"]) =>
    specs.push({ name, hfShape: [n], shape: [n], transposed: false, init });
  specs.push({
    name: "model.embed_tokens.weight",
    hfShape: [c.vocabSize, h],
    shape: [c.vocabSize, h],
    transposed: false,
    init: "normal",
  });
  for (let i = 0; i < c.numHiddenLayers; i++) {
    const p = `model.layers.${i}.`;
    vec(`${p}input_layernorm.weight`, h, "ones");
    linear(`${p}self_attn.q_proj.weight`, q, h);
    linear(`${p}self_attn.k_proj.weight`, kv, h);
    linear(`${p}self_attn.v_proj.weight`, kv, h);
    if (c.attentionBias) {
      vec(`${p}self_attn.q_proj.bias`, q, "zeros");
      vec(`${p}self_attn.k_proj.bias`, kv, "zeros");
      vec(`${p}self_attn.v_proj.bias`, kv, "zeros");
    }
    linear(`${p}self_attn.o_proj.weight`, h, q);
    if (hasQkNorm(c)) {
      vec(`${p}self_attn.q_norm.weight`, c.headDim, "ones");
      vec(`${p}self_attn.k_norm.weight`, c.headDim, "ones");
    }
    vec(`${p}post_attention_layernorm.weight`, h, "ones");
    linear(`${p}mlp.gate_proj.weight`, c.intermediateSize, h);
    linear(`${p}mlp.up_proj.weight`, c.intermediateSize, h);
    linear(`${p}mlp.down_proj.weight`, h, c.intermediateSize);
  }
  vec("model.norm.weight", h, "ones");
  if (!c.tieWordEmbeddings) linear("lm_head.weight", c.vocabSize, h);
  return specs;
}

export interface ForwardOptions {
  /** Return logits of the last position only ([B, V] instead of [B, L, V]). */
  lastOnly?: boolean;
  /** Return the final hidden states instead of logits. */
  hidden?: boolean;
  /**
   * Only positions [from, to) of every row go through the final norm and the LM head: logits [B, to -
   * from, V] (or hidden states [B, to - from, h]). A log-prob pass needs the head only where a scored
   * token is predicted, and the head is most of a pass at a large vocabulary. lastOnly already names its
   * one position: asking for both is a RangeError.
   */
  positions?: { from: number; to: number };
  /**
   * Collects each layer's keys and values [B, KV, L, D] here (kept tensors the caller disposes), for
   * prefill() to read back and write into a cache after the forward.
   */
  keysValues?: [tf.Tensor, tf.Tensor][];
  /**
   * Read a bfloat16 model's matrices and LM head straight from their bits where that runs (see
   * Qwen2Model.lmHead): generation's prefill does. The log-prob passes do not: their numbers must be those
   * the update computes under its tape from the widened weights (the first on-policy ratio is exactly 1).
   */
  bf16Bits?: boolean;
}

/** ForwardOptions.positions checked against a row length L: every position when absent. */
function keptPositions(positions: ForwardOptions["positions"], L: number): { from: number; to: number } {
  if (!positions) return { from: 0, to: L };
  const { from, to } = positions;
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to > L || from >= to)
    throw new RangeError(
      `positions [${from}, ${to}) must be a non-empty range of whole numbers from 0 to ${L}`,
    );
  return { from, to };
}

/**
 * How a model holds its weights (see weight-store.ts): trainable, storage dtype (veRL's
 * actor_rollout_ref.model.dtype), offload (fsdp_config.param_offload), layer-by-layer widening.
 */
export type Qwen2ModelOptions = WeightStoreOptions & {
  /**
   * LoRA adapters on the linear layers (lora.ts): the base weights are then frozen and the adapters are
   * the trained parameters (`values`: their starting values, default PEFT's initialisation).
   */
  lora?: { config: LoraConfig; values?: Map<string, Float32Array> };
};

const EMBEDDING = "model.embed_tokens.weight";

/** The LM head a decode loop holds (Qwen2Model.lmHead). */
export interface LmHead {
  /**
   * [h, V]; or [V, h] when `transposed`: the tied embedding, read transposed in place. A bfloat16 model's
   * generation head (lmHead(true)) is its bits, read in place (native-matmul-bf16.ts).
   */
  weight: tf.Tensor2D | Bf16Weight;
  transposed: boolean;
}

/** The key of Qwen2Model's bits-only variables: not exported, so only bitsOnlyVariables reaches them. */
const BITS_ONLY_VARIABLES = Symbol("bitsOnlyVariables");

/**
 * `model.variables(names)`, but bfloat16 matrices get tensors of their bits only: their float32 values
 * are never written (no 4 bytes a value per pass; the embedding's is 545 MB at Qwen2.5-0.5B's size).
 * For a caller whose every use of them reads the bits: the products of the linear layers and the LM head,
 * and lookups widened from the bits (the layer-by-layer update). The linear layers and the embedding
 * lookup throw where they would read such a tensor's values; other kernels do not check, so hand these
 * tensors to nothing else. Internal to the package (not in its public API): through a read of such a
 * tensor's values a caller would get whatever the memory held.
 */
export function bitsOnlyVariables(model: Qwen2Model, names?: readonly string[]): tf.Variable[] {
  return model[BITS_ONLY_VARIABLES](names);
}

export class Qwen2Model {
  readonly specs: ParamSpec[];
  private readonly weights: WeightStore;
  readonly trainable: boolean;
  private readonly rotary: Rotary;
  /**
   * Recompute each decoder layer's activations in the backward pass instead of keeping them
   * (actor_rollout_ref.model.enable_gradient_checkpointing; checkpointed-block.ts). Same gradients.
   */
  gradientCheckpointing = false;
  /** Set by withLayerOutput: the layers' output forward() starts from. */
  private layerOutput?: tf.Tensor2D;
  /** The LoRA adapters (Qwen2ModelOptions.lora): the trained parameters; the base is frozen. */
  readonly lora?: LoraAdapters;

  constructor(
    readonly config: Qwen2Config,
    values: Map<string, StoredValues>,
    options: Qwen2ModelOptions = {},
  ) {
    this.trainable = options.trainable ?? true;
    this.specs = parameterSpecs(config);
    for (const s of this.specs) {
      const v = values.get(s.name);
      if (!v) throw new ModelFormatError("parameter missing", "<values>", s.name);
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (v.length !== n)
        throw new ModelFormatError(`expected ${n} values, got ${v.length}`, "<values>", s.name);
    }
    const { lora, ...store } = options;
    // with adapters the base is frozen: no gradient is ever taken with respect to it
    this.weights = new WeightStore(this.specs, values, { ...store, trainable: this.trainable && !lora });
    if (lora) this.lora = new LoraAdapters(config, lora.config, lora.values);
    this.rotary = new Rotary(config.headDim, config.ropeTheta, config.ropeScaling);
  }

  /** A model with random weights (normal(0, std) matrices, unit norms, zero biases), seeded. */
  static random(
    config: Qwen2Config,
    options: { seed?: number; std?: number } & Qwen2ModelOptions = {},
  ): Qwen2Model {
    return new Qwen2Model(config, Qwen2Model.randomParameters(config, options), options);
  }

  /** The host values random() starts from (our layout), for writing a checkpoint without a read-back. */
  static randomParameters(
    config: Qwen2Config,
    options: { seed?: number; std?: number } = {},
  ): Map<string, Float32Array> {
    const std = options.std ?? 0.02;
    const rng = mulberry32(options.seed ?? 0);
    const values = new Map<string, Float32Array>();
    for (const s of parameterSpecs(config)) {
      const n = s.shape.reduce((a, b) => a * b, 1);
      const v = new Float32Array(n);
      if (s.init === "ones") v.fill(1);
      else if (s.init === "normal") for (let i = 0; i < n; i++) v[i] = gaussian(rng) * std;
      values.set(s.name, v);
    }
    return values;
  }

  /** Storage dtype of the weights. */
  get dtype(): WeightDtype {
    return this.weights.dtype;
  }

  /** True when the weights live on the host between passes (half dtype or offloaded). */
  get weightsOnHost(): boolean {
    return this.weights.onHost;
  }

  /**
   * The variables the model computes with, in checkpoint order (what an optimizer updates and a
   * gradient tape differentiates), or those of `names`. Host-held weights are widened for the current pass.
   */
  variables(names?: readonly string[], ...unexpected: unknown[]): tf.Variable[] {
    // the bits-only option this method once took is internal now: refuse it rather than ignore it
    if (unexpected.length > 0)
      throw new TypeError(
        "Qwen2Model.variables takes the names only; every tensor it returns holds its values",
      );
    return this.computeVariables(names, false);
  }

  /**
   * variables(), but with `bitsOnly` bfloat16 matrices get tensors of their bits only (WeightStore.variables):
   * for bitsOnlyVariables alone, whose callers hand them only to products that read the bits.
   */
  [BITS_ONLY_VARIABLES](names: readonly string[] | undefined): tf.Variable[] {
    return this.computeVariables(names, true);
  }

  private computeVariables(names: readonly string[] | undefined, bitsOnly: boolean): tf.Variable[] {
    if (this.lora && names?.some((n) => this.lora!.has(n)))
      return names.map((n) => this.storeOf(n).tensor(n, bitsOnly));
    return this.weights.variables(names, { bitsOnly });
  }

  variable(name: string): tf.Variable {
    return this.storeOf(name).tensor(name);
  }

  /** The parameters a trainer updates: the adapters with LoRA, else every weight. */
  get trainedSpecs(): readonly ParamSpec[] {
    return this.lora?.specs ?? this.specs;
  }

  /** The dtype weight or adapter `name` is stored in (LoRA adapters: float32 whatever the base's). */
  storageDtypeOf(name: string): WeightDtype {
    return this.storeOf(name).dtype;
  }

  /** Where weight or adapter `name` is held. */
  private storeOf(name: string): WeightStore {
    return this.lora?.has(name) ? this.lora.store : this.weights;
  }

  /**
   * Ends a pass: frees the float32 copies of host-held weights, so that between passes only the stored
   * weights remain (no-op for resident float32 weights). Returns the tensor bytes freed.
   */
  releaseComputeWeights(): number {
    return this.weights.release() + (this.lora?.releaseMerged() ?? 0);
  }

  /**
   * After decoder layer i of a pass with no gradient tape: a store that widens layer by layer (a large
   * host-held model, see WeightStore.layerByLayer) frees that layer's float32 copies now.
   */
  private layerDone(i: number): void {
    if (this.weights.layerByLayer && !tapeIsRecording()) this.weights.release(`model.layers.${i}.`);
  }

  /**
   * Frees every copy of the weights, for an owner that keeps them sharded at rest: until setParameters
   * brings them back, a pass that uses a weight throws WeightNotHeldError. Returns the bytes freed (in
   * the storage dtype).
   */
  evictWeights(): number {
    this.lora?.releaseMerged();
    return this.weights.evict() + (this.lora?.store.evict() ?? 0);
  }

  /** Whether the model holds weight (or adapter) `name` now (see evictWeights). */
  holdsWeight(name: string): boolean {
    return this.storeOf(name).holds(name);
  }

  /** Bytes the weights (and adapters) take between passes, in their storage dtype. */
  weightBytes(): number {
    return this.weights.atRestBytes() + (this.lora?.store.atRestBytes() ?? 0);
  }

  /** Bytes of weights held in tensors now (resident weights, or a pass's widened or merged copies). */
  weightTensorBytes(): number {
    return (
      this.weights.tensorBytes() + (this.lora ? this.lora.store.tensorBytes() + this.lora.mergedBytes() : 0)
    );
  }

  /** Every parameter (or those named) as a flat Float32Array by HF name, in our layout (linear weights [in, out]). */
  async getParameters(
    names: readonly string[] = this.specs.map((s) => s.name),
  ): Promise<Map<string, Float32Array>> {
    const host = await Promise.all(names.map((name) => this.storeOf(name).read(name)));
    return new Map(names.map((name, i) => [name, host[i]!]));
  }

  /**
   * Assigns parameters by name (our layout; rounded into the storage dtype); all names must exist; absent
   * names keep their values; evicted ones are held again.
   */
  setParameters(values: Map<string, Float32Array> | Record<string, Float32Array>): void {
    const entries = values instanceof Map ? [...values] : Object.entries(values);
    this.checkSizes(entries);
    this.lora?.releaseMerged();
    for (const [name, v] of entries) this.storeOf(name).assign(name, v);
  }

  /** Throws before anything is assigned if a name is not a parameter or its values have the wrong size. */
  private checkSizes(entries: [string, { length: number }][]): void {
    const specByName = new Map<string, ParamSpec | AdapterSpec>(
      [...this.specs, ...(this.lora?.specs ?? [])].map((s) => [s.name, s]),
    );
    for (const [name, v] of entries) {
      const s = specByName.get(name);
      if (!s) throw new RangeError(`no parameter named ${name}`);
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (v.length !== n) throw new RangeError(`parameter ${name}: expected ${n} values, got ${v.length}`);
    }
  }

  /**
   * Assigns parameters by name (our layout) from values already in the storage dtype (half bits of
   * model.dtype, or float32): evicted weights are held as the values themselves, nothing is rounded.
   */
  setStoredParameters(values: Map<string, StoredValues>): void {
    this.checkSizes([...values]);
    this.lora?.releaseMerged();
    for (const [name, v] of values) this.storeOf(name).assignStored(name, v);
  }

  /**
   * Held parameters whose stored values were overwritten where the model holds them (`values`: that
   * memory, by name): their compute copies follow; the variables stay the same (a trainer's tape keeps
   * them). Throws for a parameter held elsewhere.
   */
  storedValuesWritten(values: Map<string, StoredValues>): void {
    this.checkSizes([...values]);
    for (const [name, v] of values) this.storeOf(name).storedWritten(name, v);
  }

  /** Parameters in HF layout, for saving (host-held weights in their stored dtype, not rounded again). */
  async toHfTensors(): Promise<{ name: string; shape: number[]; data: StoredValues }[]> {
    return Promise.all(
      this.specs.map(async (s) => {
        const stored = this.weights.stored(s.name);
        if (stored) return { name: s.name, shape: s.hfShape, data: transposedBack(s, stored) };
        const v = this.weights.tensor(s.name);
        if (!s.transposed)
          return { name: s.name, shape: s.hfShape, data: ((await v.data()) as Float32Array).slice() };
        const t = tf.transpose(v);
        try {
          return { name: s.name, shape: s.hfShape, data: (await t.data()) as Float32Array };
        } finally {
          t.dispose();
        }
      }),
    );
  }

  dispose(): void {
    this.weights.dispose();
    this.lora?.dispose();
    this.rotary.dispose();
  }

  /** Number of parameters. */
  numParameters(): number {
    return this.specs.reduce((a, s) => a + s.shape.reduce((p, q) => p * q, 1), 0);
  }

  /**
   * Decoder layer i's weights, as the model holds them (or as `get` gives the trained ones, by parameter
   * name). With LoRA, `get` gives the adapters and the base comes from the model, merged (lora.ts).
   * `fromBits`: a bfloat16 model's matrices as their bits where that runs (generation; see lmHead).
   */
  blockWeights(i: number, get?: (name: string) => tf.Tensor, fromBits = false): BlockWeights {
    const p = `model.layers.${i}.`;
    const lora = this.lora;
    const w = lora
      ? (n: string) => lora.effective(p + n, this.weights.tensor(p + n), get)
      : (n: string) => (get ?? ((name: string) => this.weights.tensor(name)))(p + n);
    // The matrices of a bf16 model, in a pass without a tape, as their bits (no float32 copy).
    const bits = !get && fromBits && this.readsBf16Bits();
    const m = (n: string): LinearWeight => (bits ? this.weights.bf16Weight(p + n) : w(n));
    const bias = (n: string) => (this.config.attentionBias ? w(n) : undefined);
    return {
      inputNorm: w("input_layernorm.weight"),
      attention: {
        q: m("self_attn.q_proj.weight"),
        k: m("self_attn.k_proj.weight"),
        v: m("self_attn.v_proj.weight"),
        o: m("self_attn.o_proj.weight"),
        qBias: bias("self_attn.q_proj.bias"),
        kBias: bias("self_attn.k_proj.bias"),
        vBias: bias("self_attn.v_proj.bias"),
        qkNorm: hasQkNorm(this.config)
          ? { q: w("self_attn.q_norm.weight"), k: w("self_attn.k_norm.weight"), eps: this.config.rmsNormEps }
          : undefined,
      },
      postNorm: w("post_attention_layernorm.weight"),
      mlp: { gate: m("mlp.gate_proj.weight"), up: m("mlp.up_proj.weight"), down: m("mlp.down_proj.weight") },
    };
  }

  /**
   * Whether a pass that asks for it (generation: see lmHead) can read the linear layers and the LM head of
   * a bfloat16 model straight from their bits (native-matmul-bf16.ts): the addon's kernels run on this
   * backend, no gradient tape is recording (the kernel has no gradient) and no LoRA adapters are merged
   * into the base. Otherwise weights are widened.
   */
  private readsBf16Bits(): boolean {
    return (
      this.weights.dtype === "bfloat16" &&
      !this.lora &&
      nativeMatmulActive(tf.getBackend()) &&
      !tapeIsRecording()
    );
  }

  /** The LM head's weight as bits: the tied embedding [V, h] (read transposed) or lm_head [h, V]. */
  private bf16Head(): LmHead {
    const tied = this.config.tieWordEmbeddings;
    return { weight: this.weights.bf16Weight(tied ? EMBEDDING : "lm_head.weight"), transposed: tied };
  }

  /**
   * The embeddings of `ids`, shape [rows, h]. In a pass without a tape, a half-stored model widens just
   * those rows of its bits; otherwise rows of the float32 table (`gather`: a plain gather, no gradient kernel).
   */
  private tokenRows(ids: Int32Array, gather = false): tf.Tensor2D {
    const half = tapeIsRecording() ? undefined : this.weights.halfValues(EMBEDDING);
    if (half) return widenedRows(half, ids, this.config.hiddenSize);
    const table = this.weights.tensor(EMBEDDING);
    refuseUnwritten(table, "an embedding lookup");
    return gather ? (tf.gather(table, tf.tensor1d(ids, "int32")) as tf.Tensor2D) : embeddingRows(table, ids);
  }

  /**
   * The LM head's weight [h, V] in our layout (the embedding transposed when tied). Always a new tensor
   * that the caller owns: disposing it never disposes the model's own variable.
   */
  lmHeadWeight(): tf.Tensor {
    return this.config.tieWordEmbeddings
      ? tf.transpose(this.weights.tensor("model.embed_tokens.weight"))
      : cloneKeepingBits(this.weights.tensor("lm_head.weight"));
  }

  /**
   * Whether the LM head reads the tied embedding [V, h] transposed in place: with OpenBLAS, so that no
   * transposed copy of the largest matrix (V x h floats) is made per forward or held per generation.
   */
  private headInPlace(): boolean {
    return this.config.tieWordEmbeddings && nativeMatmulActive(tf.getBackend());
  }

  /**
   * The LM head as a decode loop holds it (decodeStep): the weight [h, V], or the tied embedding [V, h]
   * itself (`transposed`) where the backend reads it so. The caller owns `weight` (kept: no tidy frees
   * it) and disposes it after the generation; that never disposes the model's own variable.
   *
   * `fromBits` (a generation's head): a bfloat16 model's head is its bits, read in place by the addon's
   * matmulBf16 (native-matmul-bf16.ts), where that runs: the wasm backend with the addon, no gradient
   * tape, no LoRA adapters. Its decode steps read the layers' matrices from the bits likewise.
   */
  lmHead(fromBits = false): LmHead {
    if (fromBits && this.readsBf16Bits()) return this.bf16Head();
    const weight = this.headInPlace()
      ? cloneKeepingBits(this.weights.tensor("model.embed_tokens.weight"))
      : this.lmHeadWeight();
    return { weight: tf.keep(weight) as tf.Tensor2D, transposed: this.headInPlace() };
  }

  /**
   * Full-sequence forward (training, scoring, prefill). Positions count real tokens per row (left padding
   * shifts them). Returns logits [B, L, V], or [B, V] with lastOnly, or hidden states [B, L, h].
   * Call inside tf.tidy or dispose the result.
   */
  forward(batch: TokenBatch, options: ForwardOptions = {}): tf.Tensor {
    const c = this.config;
    const { batch: B, length: L } = batch;
    const given = this.layerOutput;
    if (given && (given.shape[0] !== B * L || given.shape[1] !== c.hiddenSize))
      throw new RangeError(
        `the given layer output has shape [${given.shape}], the batch needs [${B * L}, ${c.hiddenSize}]`,
      );
    if (options.lastOnly && options.positions)
      throw new RangeError("forward: lastOnly and positions both name the kept positions; pass one");
    const fromBits = options.bf16Bits === true && this.readsBf16Bits();
    return tf.tidy(() => {
      let x: tf.Tensor2D;
      if (given) x = given;
      else {
        const seq = this.sequenceAttention(batch, options.keysValues);
        x = this.embed(batch);
        // without a tape there is nothing to recompute for
        const block = this.gradientCheckpointing && tapeIsRecording() ? checkpointedBlock : decoderBlock;
        for (let i = 0; i < c.numHiddenLayers; i++) {
          x = block(x, this.blockWeights(i, undefined, fromBits), seq, c.rmsNormEps);
          this.layerDone(i);
        }
      }
      const { from, to } = options.lastOnly ? { from: L - 1, to: L } : keptPositions(options.positions, L);
      const S = to - from;
      let hfinal = x;
      if (S !== L)
        hfinal = tf.reshape(
          tf.slice(tf.reshape(x, [B, L, c.hiddenSize]), [0, from, 0], [B, S, c.hiddenSize]),
          [B * S, c.hiddenSize],
        );
      hfinal = rmsNorm(hfinal, this.weights.tensor("model.norm.weight"), c.rmsNormEps);
      if (options.hidden)
        return tf.reshape(hfinal, options.lastOnly ? [B, c.hiddenSize] : [B, S, c.hiddenSize]);
      const bits = fromBits ? this.bf16Head() : undefined;
      const logits = bits
        ? project(hfinal, bits.weight, bits.transposed)
        : this.headInPlace()
          ? linearTransposed(hfinal, this.weights.tensor(EMBEDDING))
          : this.config.tieWordEmbeddings
            ? linear(hfinal, this.lmHeadWeight())
            : // the weight itself, no copy: a gradient routed to the host finds it (linear.ts)
              linear(hfinal, this.weights.tensor("lm_head.weight"));
      return options.lastOnly ? logits : tf.reshape(logits, [B, S, c.vocabSize]);
    });
  }

  /**
   * The rows past which batches may share the decoder layers' products in decoderOutputs and still get,
   * bit for bit, what each gets alone (blockRowsIndependentPast: a bfloat16 model read from its bits on
   * AMX tiles, in a pass without a tape); undefined where they may not.
   */
  sharedLayersPast(): number | undefined {
    if (!this.readsBf16Bits() || this.layerOutput || this.config.numHiddenLayers === 0) return undefined;
    return blockRowsIndependentPast(this.blockWeights(0, undefined, true));
  }

  /**
   * The decoder layers' outputs [B_i*L_i, h] of several batches, in a pass without a tape, each layer's
   * products shared by all of them (decoderBlocks): the matrices are read once per layer, not once per
   * batch. Where every batch has more than sharedLayersPast() rows, each output is, bit for bit, the one
   * forward() computes for that batch alone (before the final norm). Call inside tf.tidy.
   */
  decoderOutputs(batches: TokenBatch[]): tf.Tensor2D[] {
    if (tapeIsRecording())
      throw new RangeError("decoderOutputs runs without a gradient tape; use forward() under one");
    const fromBits = this.readsBf16Bits();
    const seqs = batches.map((b) => this.sequenceAttention(b));
    let xs = batches.map((b) => this.embed(b));
    for (let i = 0; i < this.config.numHiddenLayers; i++) {
      // each layer's activations freed as soon as its outputs exist: the batches' together would
      // otherwise stay until the caller's scope ends
      const inputs = xs;
      xs = tf.tidy(() =>
        decoderBlocks(inputs, this.blockWeights(i, undefined, fromBits), seqs, this.config.rmsNormEps),
      );
      for (const x of inputs) x.dispose();
      this.layerDone(i);
    }
    return xs;
  }

  /**
   * The tensors every layer's attention shares for one batch: the additive mask and the rotary tables of
   * the token positions (positions count real tokens, so left padding shifts them). Call inside tf.tidy
   * or dispose them.
   */
  sequenceAttention(batch: TokenBatch, keysValues?: [tf.Tensor, tf.Tensor][]): SequenceAttention {
    const c = this.config;
    const { batch: B, length: L } = batch;
    const H = c.numAttentionHeads;
    const KV = c.numKeyValueHeads;
    const positions = tokenPositions(batch);
    const mask = tf.tensor4d(causalMask(batch, H), [B, H, L, L]);
    const [cosQ, sinQ] = this.rotary.tables(positions, B, L, H);
    const [cosK, sinK] = KV === H ? [cosQ, sinQ] : this.rotary.tables(positions, B, L, KV);
    const shape = { heads: H, kvHeads: KV, headDim: c.headDim };
    return { shape, B, L, mask, rotary: this.rotary, cosQ, sinQ, cosK, sinK, keysValues };
  }

  /** The token embeddings of a batch, [B*L, h]. */
  embed(batch: TokenBatch): tf.Tensor2D {
    return this.tokenRows(batch.ids);
  }

  /**
   * Runs `f` with forward() starting from `x` [B*L, h], the last decoder layer's output computed
   * elsewhere (layer by layer, see layerwise.ts): only the final norm and the head run, so gradients of
   * `x` and of the head's parameters come out of a tape around `f`.
   */
  withLayerOutput<T>(x: tf.Tensor2D, f: () => T): T {
    this.layerOutput = x;
    try {
      return f();
    } finally {
      this.layerOutput = undefined;
    }
  }

  /**
   * Prefills a cache with a left-padded batch, in row chunks small enough that the [rows, heads, L, L]
   * attention scores stay within `maxScoreFloats`; returns the last position's logits [B, V].
   */
  async prefill(batch: TokenBatch, cache: KVCache, maxScoreFloats = 8 * 1024 * 1024): Promise<tf.Tensor2D> {
    const { batch: B, length: L } = batch;
    const rows = Math.max(1, Math.floor(maxScoreFloats / (this.config.numAttentionHeads * L * L)));
    cache.startPrefill(L);
    const parts: tf.Tensor[] = [];
    for (let s = 0; s < B; s += rows) {
      const e = Math.min(B, s + rows);
      const sub: TokenBatch = {
        ids: batch.ids.subarray(s * L, e * L),
        mask: batch.mask.subarray(s * L, e * L),
        batch: e - s,
        length: L,
      };
      const keysValues: [tf.Tensor, tf.Tensor][] = [];
      try {
        parts.push(tf.tidy(() => this.forward(sub, { lastOnly: true, keysValues, bf16Bits: true })));
        // Every layer's keys and values in one round trip, then into the cache on the host side.
        const host = await Promise.all(keysValues.flat().map((t) => t.data() as Promise<Float32Array>));
        for (const [layer, [k, v]] of keysValues.entries())
          cache.writePrefill(
            layer,
            { data: host[2 * layer]!, shape: k.shape },
            { data: host[2 * layer + 1]!, shape: v.shape },
            s,
          );
      } catch (error) {
        for (const t of parts) t.dispose();
        throw error;
      } finally {
        for (const t of keysValues.flat()) t.dispose();
      }
    }
    cache.finishPrefill(batch);
    if (parts.length === 1) return parts[0] as tf.Tensor2D;
    const out = tf.concat(parts, 0) as tf.Tensor2D;
    for (const t of parts) t.dispose();
    return out;
  }

  /**
   * One decode step for the whole batch: `tokens[b]` is appended to row b of the cache; returns logits
   * [B, V]. `head` is the LM head from lmHead(), taken once per generation.
   */
  async decodeStep(tokens: Int32Array, cache: KVCache, head: LmHead): Promise<tf.Tensor2D> {
    cache.reserve(1);
    const x = tf.tidy(() => this.tokenRows(tokens, true));
    const native = nativeMatmulActive(tf.getBackend()) && cache.inPlaceLayer(0) !== undefined;
    const last = await (native ? this.nativeDecodeLayers(x, cache) : this.hostDecodeLayers(x, cache));
    try {
      const c = this.config;
      const logits = tf.tidy(() => {
        const hfinal = rmsNorm(last, this.weights.tensor("model.norm.weight"), c.rmsNormEps);
        return project(hfinal, head.weight, head.transposed);
      });
      cache.advance(tokens);
      return logits;
    } finally {
      last.dispose();
    }
  }

  /**
   * The decoder layers of a decode step with the native attention kernel: rotation, cache write and
   * attention in one kernel per layer, on the heap, so the step never waits for the host. Takes x.
   */
  private async nativeDecodeLayers(x: tf.Tensor2D, cache: KVCache): Promise<tf.Tensor2D> {
    const c = this.config;
    const shape = { heads: c.numAttentionHeads, kvHeads: c.numKeyValueHeads, headDim: c.headDim };
    const rope = this.rotary.stepTables(cache.nextPositions());
    const B = cache.batch;
    const half = c.headDim / 2;
    const tables: DecodeStepTables = {
      cos: tf.tensor2d(rope.cos, [B, half]),
      sin: tf.tensor2d(rope.sin, [B, half]),
      mask: tf.tensor2d(cache.stepMask(1), [B, cache.capacity]),
      slots: cache.stepSlots(),
    };
    try {
      return await this.decodeLayers(x, (i, w, prev) => {
        const [keys, values] = cache.inPlaceLayer(i)!;
        return tf.tidy(() => {
          const hn = rmsNorm(prev, w.inputNorm, c.rmsNormEps);
          const context = nativeDecodeAttention(hn, w.attention, keys, values, tables, shape);
          return blockFinish(prev, context, w, c.rmsNormEps);
        });
      });
    } finally {
      tables.cos.dispose();
      tables.sin.dispose();
      tables.mask.dispose();
    }
  }

  /**
   * The decoder layers of a decode step op by op (any backend). Each layer's q, k and v come back to the
   * host (rotary embedding, applied there because q and k are tiny here and it replaces a dozen small
   * kernels per layer; cache write) in one round trip; the tensors between reads live outside any tidy
   * scope and are disposed by hand. Takes x.
   */
  private async hostDecodeLayers(x: tf.Tensor2D, cache: KVCache): Promise<tf.Tensor2D> {
    const c = this.config;
    const B = cache.batch;
    const H = c.numAttentionHeads;
    const KV = c.numKeyValueHeads;
    const G = H / KV;
    const D = c.headDim;
    const rope = this.rotary.hostStep(cache.nextPositions());
    const maskArr = cache.stepMask(H); // [B, H, 1, cap] for the slot being written
    const cap = cache.capacity;
    const shape = { heads: H, kvHeads: KV, headDim: D };
    const mask = tf.tensor4d(maskArr, [B, KV, G, cap]);
    try {
      return await this.decodeLayers(x, async (i, w, prev) => {
        const qkv = tf.tidy(() => blockProjections(prev, w, c.rmsNormEps));
        let host: Float32Array[];
        try {
          host = await Promise.all(qkv.map((t) => t.data() as Promise<Float32Array>));
        } finally {
          for (const t of qkv) t.dispose();
        }
        const qh = rope(host[0]!.slice(), H, 1 / Math.sqrt(D));
        const kh = rope(host[1]!.slice(), KV, 1);
        // [B, KV*D] rows are [B, KV, 1, D] in memory.
        const [K, V] = cache.writeStep(
          i,
          { data: kh, shape: [B, KV, 1, D] },
          { data: host[2]!, shape: [B, KV, 1, D] },
        );
        return tf.tidy(() => {
          const context = cachedAttention(tf.tensor4d(qh, [B, KV, G, D]), K, V, mask, shape); // q pre-scaled
          return blockFinish(prev, context, w, c.rmsNormEps);
        });
      });
    } finally {
      mask.dispose();
    }
  }

  /**
   * Runs the decoder layers of a decode step: `layer` maps layer i's input to its output (both
   * [B, h]); each input is disposed once its layer is done. Takes x; on an error nothing is left.
   */
  private async decodeLayers(
    x: tf.Tensor2D,
    layer: (i: number, w: BlockWeights, x: tf.Tensor2D) => tf.Tensor2D | Promise<tf.Tensor2D>,
  ): Promise<tf.Tensor2D> {
    try {
      for (let i = 0; i < this.config.numHiddenLayers; i++) {
        const prev = x;
        x = await layer(i, this.blockWeights(i, undefined, true), prev);
        prev.dispose();
        this.layerDone(i);
      }
      return x;
    } catch (error) {
      x.dispose();
      throw error;
    }
  }
}

/** A stored weight in HF layout (linear weights transposed back from [in, out]), in its own dtype. */
function transposedBack(s: ParamSpec, v: StoredValues): StoredValues {
  if (!s.transposed) return v instanceof HalfArray ? new HalfArray(v.dtype, v.bits.slice()) : v.slice();
  return transposeStored(v, s.shape[0]!, s.shape[1]!);
}
