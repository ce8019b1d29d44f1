/**
 * The Qwen2 / Llama causal LM in tfjs: embedding, N x (RMSNorm, GQA attention with rotary embeddings,
 * RMSNorm, SwiGLU MLP), final RMSNorm, LM head (tied or not). Parameters are tf.Variables named as in
 * HF checkpoints; linear weights are held transposed ([in, out]) because plain matmuls are ~10x faster
 * than transposed ones on the wasm backend, and the linear gradient is written with explicit transposes
 * for the same reason.
 */
import * as tf from "@tensorflow/tfjs";
import { gaussian, mulberry32 } from "../random.js";
import type { Qwen2Config } from "./config.js";
import { ModelFormatError } from "./errors.js";
import { HalfArray, type StoredValues, type WeightDtype } from "./half-precision.js";
import type { KVCache } from "./kv-cache.js";
import { nativeMatmulActive } from "./native-matmul.js";
import { transposeStored, WeightStore } from "./weight-store.js";

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
    vec(`${p}post_attention_layernorm.weight`, h, "ones");
    linear(`${p}mlp.gate_proj.weight`, c.intermediateSize, h);
    linear(`${p}mlp.up_proj.weight`, c.intermediateSize, h);
    linear(`${p}mlp.down_proj.weight`, h, c.intermediateSize);
  }
  vec("model.norm.weight", h, "ones");
  if (!c.tieWordEmbeddings) linear("lm_head.weight", c.vocabSize, h);
  return specs;
}

/**
 * x [N, in] @ w [in, out]. The gradient transposes explicitly for XNNPACK (faster on untransposed
 * operands); OpenBLAS reads transposed operands in place, so there the transpose flags save two kernels.
 */
const linearOp = tf.customGrad(((...args: unknown[]) => {
  const [x, w, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
  save([x, w]);
  return {
    value: tf.matMul(x as tf.Tensor2D, w as tf.Tensor2D),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ws] = saved as [tf.Tensor2D, tf.Tensor2D];
      const d = dy as tf.Tensor2D;
      if (nativeMatmulActive(tf.getBackend()))
        return [tf.matMul(d, ws, false, true), tf.matMul(xs, d, true, false)];
      return [tf.matMul(d, tf.transpose(ws) as tf.Tensor2D), tf.matMul(tf.transpose(xs) as tf.Tensor2D, d)];
    },
  };
}) as any) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor2D;

export function linear(x: tf.Tensor2D, w: tf.Tensor, b?: tf.Tensor): tf.Tensor2D {
  const y = linearOp(x, w);
  return b ? tf.add(y, b) : y;
}

/** A batch of token rows, row-major [batch, length]; mask 1 marks real tokens, 0 padding. */
export interface TokenBatch {
  ids: Int32Array;
  mask: Uint8Array;
  batch: number;
  length: number;
}

/** Pads token rows to one length; left padding for generation, right padding for training. */
export function padBatch(
  rows: ArrayLike<number>[],
  side: "left" | "right" = "left",
  padId = 0,
  length?: number,
): TokenBatch {
  const batch = rows.length;
  const L = length ?? Math.max(1, ...rows.map((r) => r.length));
  const ids = new Int32Array(batch * L).fill(padId);
  const mask = new Uint8Array(batch * L);
  rows.forEach((r, b) => {
    if (r.length > L) throw new RangeError(`row ${b} has ${r.length} tokens, more than the length ${L}`);
    const off = b * L + (side === "left" ? L - r.length : 0);
    for (let i = 0; i < r.length; i++) {
      ids[off + i] = r[i]!;
      mask[off + i] = 1;
    }
  });
  return { ids, mask, batch, length: L };
}

const NEG = -1e9;

export interface ForwardOptions {
  /** Return logits of the last position only ([B, V] instead of [B, L, V]). */
  lastOnly?: boolean;
  /** Return the final hidden states instead of logits. */
  hidden?: boolean;
  /**
   * Collects each layer's keys and values [B, KV, L, D] here (kept tensors the caller disposes), for
   * prefill() to read back and write into a cache after the forward.
   */
  keysValues?: [tf.Tensor, tf.Tensor][];
}

/** One layer's keys or values read back to the host, in the memory order of `shape`. */
export interface HostTensor {
  data: Float32Array;
  shape: readonly number[];
}

/** How a model holds its weights (see weight-store.ts). */
export interface Qwen2ModelOptions {
  /** Gradients can be taken with respect to the weights. Default true. */
  trainable?: boolean;
  /** Storage dtype (veRL's actor_rollout_ref.model.dtype). Default float32. */
  dtype?: WeightDtype;
  /** Hold float32 weights on the host between passes (fsdp_config.param_offload). */
  offload?: boolean;
}

export class Qwen2Model {
  readonly specs: ParamSpec[];
  private readonly weights: WeightStore;
  readonly trainable: boolean;
  /** Signed permutation R with x @ R = rotate_half(x). */
  private readonly rot: tf.Tensor2D;
  private readonly invFreq: Float64Array;

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
    this.weights = new WeightStore(this.specs, values, {
      dtype: options.dtype,
      offload: options.offload,
      trainable: this.trainable,
    });
    const D = config.headDim;
    const half = D / 2;
    const r = new Float32Array(D * D);
    for (let j = 0; j < half; j++) r[(j + half) * D + j] = -1;
    for (let j = half; j < D; j++) r[(j - half) * D + j] = 1;
    this.rot = tf.keep(tf.tensor2d(r, [D, D]));
    this.invFreq = new Float64Array(half);
    for (let i = 0; i < half; i++) this.invFreq[i] = 1 / config.ropeTheta ** ((2 * i) / D);
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
   * gradient tape differentiates). Host-held weights are widened for the current pass.
   */
  variables(): tf.Variable[] {
    return this.weights.variables();
  }

  variable(name: string): tf.Variable {
    return this.weights.tensor(name);
  }

  /**
   * Ends a pass: frees the float32 copies of host-held weights, so that between passes only the stored
   * weights remain (no-op for resident float32 weights). Returns the tensor bytes freed.
   */
  releaseComputeWeights(): number {
    return this.weights.release();
  }

  /** Bytes the weights take between passes, in their storage dtype. */
  weightBytes(): number {
    return this.weights.atRestBytes();
  }

  /** Bytes of weights held in tensors now (resident weights, or a pass's widened copies). */
  weightTensorBytes(): number {
    return this.weights.tensorBytes();
  }

  /** Every parameter as a flat Float32Array by HF name, in our layout (linear weights [in, out]). */
  async getParameters(): Promise<Map<string, Float32Array>> {
    const host = await Promise.all(this.specs.map((s) => this.weights.read(s.name)));
    return new Map(this.specs.map((s, i) => [s.name, host[i]!]));
  }

  /**
   * Assigns parameters by name (our layout; rounded into the storage dtype); all names must exist; absent
   * names keep their values.
   */
  setParameters(values: Map<string, Float32Array> | Record<string, Float32Array>): void {
    const entries = values instanceof Map ? [...values] : Object.entries(values);
    const specByName = new Map(this.specs.map((s) => [s.name, s]));
    for (const [name, v] of entries) {
      const s = specByName.get(name);
      if (!s) throw new RangeError(`no parameter named ${name}`);
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (v.length !== n) throw new RangeError(`parameter ${name}: expected ${n} values, got ${v.length}`);
    }
    for (const [name, v] of entries) this.weights.assign(name, v);
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
    this.rot.dispose();
  }

  /** Number of parameters. */
  numParameters(): number {
    return this.specs.reduce((a, s) => a + s.shape.reduce((p, q) => p * q, 1), 0);
  }

  private rmsNorm(x: tf.Tensor2D, w: tf.Tensor): tf.Tensor2D {
    const ms = tf.mean(tf.square(x), -1, true);
    return tf.mul(tf.mul(x, tf.rsqrt(tf.add(ms, this.config.rmsNormEps))), w);
  }

  /** cos and sin tables for rows of positions, expanded to [B, L, heads, D]. */
  private rope(positions: Int32Array, B: number, L: number, heads: number): [tf.Tensor4D, tf.Tensor4D] {
    const D = this.config.headDim;
    const half = D / 2;
    const cos = new Float32Array(B * L * heads * D);
    const sin = new Float32Array(B * L * heads * D);
    const c = new Float32Array(D);
    const s = new Float32Array(D);
    for (let t = 0; t < B * L; t++) {
      const p = positions[t]!;
      for (let i = 0; i < half; i++) {
        const a = p * this.invFreq[i]!;
        c[i] = c[i + half] = Math.cos(a);
        s[i] = s[i + half] = Math.sin(a);
      }
      for (let h = 0; h < heads; h++) {
        cos.set(c, (t * heads + h) * D);
        sin.set(s, (t * heads + h) * D);
      }
    }
    return [tf.tensor4d(cos, [B, L, heads, D]), tf.tensor4d(sin, [B, L, heads, D])];
  }

  private applyRope(x: tf.Tensor4D, cos: tf.Tensor4D, sin: tf.Tensor4D): tf.Tensor4D {
    const [B, L, H, D] = x.shape;
    const rotated = tf.reshape(tf.matMul(tf.reshape(x, [B * L * H, D]) as tf.Tensor2D, this.rot), [
      B,
      L,
      H,
      D,
    ]);
    return tf.add(tf.mul(x, cos), tf.mul(rotated, sin));
  }

  /**
   * The LM head's weight [h, V] in our layout (the embedding transposed when tied). Always a new tensor
   * that the caller owns: disposing it never disposes the model's own variable.
   */
  lmHeadWeight(): tf.Tensor {
    return this.config.tieWordEmbeddings
      ? tf.transpose(this.weights.tensor("model.embed_tokens.weight"))
      : tf.clone(this.weights.tensor("lm_head.weight"));
  }

  /**
   * Full-sequence forward (training, scoring, prefill). Positions count real tokens per row (left padding
   * shifts them). Returns logits [B, L, V], or [B, V] with lastOnly, or hidden states [B, L, h].
   * Call inside tf.tidy or dispose the result.
   */
  forward(batch: TokenBatch, options: ForwardOptions = {}): tf.Tensor {
    const c = this.config;
    const { batch: B, length: L } = batch;
    const H = c.numAttentionHeads;
    const KV = c.numKeyValueHeads;
    const G = H / KV;
    const D = c.headDim;
    const positions = new Int32Array(B * L);
    for (let b = 0; b < B; b++) {
      let n = 0;
      for (let t = 0; t < L; t++) {
        const m = batch.mask[b * L + t]!;
        positions[b * L + t] = m ? n : 0;
        n += m;
      }
    }
    // Additive mask [B, H, L, L]: causal and key padding.
    const maskArr = new Float32Array(B * H * L * L);
    for (let b = 0; b < B; b++) {
      const base = b * H * L * L;
      for (let i = 0; i < L; i++)
        for (let j = 0; j < L; j++) maskArr[base + i * L + j] = j <= i && batch.mask[b * L + j] ? 0 : NEG;
      for (let h = 1; h < H; h++) maskArr.copyWithin(base + h * L * L, base, base + L * L);
    }
    const keysValues = options.keysValues;
    const out = tf.tidy(() => {
      const mask = tf.tensor4d(maskArr, [B, H, L, L]);
      const [cosQ, sinQ] = this.rope(positions, B, L, H);
      const [cosK, sinK] = KV === H ? [cosQ, sinQ] : this.rope(positions, B, L, KV);
      const ids = tf.tensor1d(batch.ids, "int32");
      let x = tf.gather(this.weights.tensor("model.embed_tokens.weight"), ids) as tf.Tensor2D; // [B*L, h]
      for (let i = 0; i < c.numHiddenLayers; i++) {
        const p = `model.layers.${i}.`;
        const w = (n: string) => this.weights.tensor(p + n);
        const bias = (n: string) => (c.attentionBias ? this.weights.tensor(p + n) : undefined);
        const hn = this.rmsNorm(x, w("input_layernorm.weight"));
        let q = tf.reshape(linear(hn, w("self_attn.q_proj.weight"), bias("self_attn.q_proj.bias")), [
          B,
          L,
          H,
          D,
        ]) as tf.Tensor4D;
        let k = tf.reshape(linear(hn, w("self_attn.k_proj.weight"), bias("self_attn.k_proj.bias")), [
          B,
          L,
          KV,
          D,
        ]) as tf.Tensor4D;
        const v = tf.reshape(linear(hn, w("self_attn.v_proj.weight"), bias("self_attn.v_proj.bias")), [
          B,
          L,
          KV,
          D,
        ]);
        q = this.applyRope(q, cosQ, sinQ);
        k = this.applyRope(k, cosK, sinK);
        const qt = tf.reshape(tf.transpose(q, [0, 2, 1, 3]), [B, KV, G * L, D]);
        const kt = tf.transpose(k, [0, 2, 1, 3]); // [B, KV, L, D]
        const vt = tf.transpose(v, [0, 2, 1, 3]);
        if (keysValues) keysValues.push([tf.keep(kt), tf.keep(vt)]);
        const scores = tf.mul(tf.matMul(qt, kt, false, true), 1 / Math.sqrt(D)); // [B, KV, G*L, L]
        const probs = tf.softmax(tf.add(tf.reshape(scores, [B, H, L, L]), mask));
        const ctx = tf.matMul(tf.reshape(probs, [B, KV, G * L, L]), vt); // [B, KV, G*L, D]
        const merged = tf.reshape(tf.transpose(tf.reshape(ctx, [B, H, L, D]), [0, 2, 1, 3]), [
          B * L,
          H * D,
        ]) as tf.Tensor2D;
        x = tf.add(x, linear(merged, w("self_attn.o_proj.weight")));
        const hn2 = this.rmsNorm(x, w("post_attention_layernorm.weight"));
        const gate = linear(hn2, w("mlp.gate_proj.weight"));
        const up = linear(hn2, w("mlp.up_proj.weight"));
        x = tf.add(x, linear(tf.mul(tf.mul(gate, tf.sigmoid(gate)), up), w("mlp.down_proj.weight")));
      }
      let hfinal = x;
      if (options.lastOnly)
        hfinal = tf.reshape(
          tf.slice(tf.reshape(x, [B, L, c.hiddenSize]), [0, L - 1, 0], [B, 1, c.hiddenSize]),
          [B, c.hiddenSize],
        );
      hfinal = this.rmsNorm(hfinal, this.weights.tensor("model.norm.weight"));
      if (options.hidden)
        return tf.reshape(hfinal, options.lastOnly ? [B, c.hiddenSize] : [B, L, c.hiddenSize]);
      const logits = linear(hfinal, this.lmHeadWeight());
      return options.lastOnly ? logits : tf.reshape(logits, [B, L, c.vocabSize]);
    });
    return out;
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
        parts.push(tf.tidy(() => this.forward(sub, { lastOnly: true, keysValues })));
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
   * [B, V]. `lmHead` is the LM head weight from lmHeadWeight(), computed once per generation.
   */
  async decodeStep(tokens: Int32Array, cache: KVCache, lmHead: tf.Tensor): Promise<tf.Tensor2D> {
    const c = this.config;
    const B = cache.batch;
    const H = c.numAttentionHeads;
    const KV = c.numKeyValueHeads;
    const G = H / KV;
    const D = c.headDim;
    cache.reserve(1);
    const positions = cache.nextPositions();
    const slot = cache.length;
    const maskArr = cache.stepMask(H); // [B, H, 1, cap] for the slot being written
    const cap = cache.capacity;
    // Rotary tables for this step's positions, [B, D/2]; applied on the host (q and k are tiny here, and
    // this replaces a dozen small kernels per layer).
    const half = D / 2;
    const cos = new Float32Array(B * half);
    const sin = new Float32Array(B * half);
    for (let b = 0; b < B; b++)
      for (let j = 0; j < half; j++) {
        const a = positions[b]! * this.invFreq[j]!;
        cos[b * half + j] = Math.cos(a);
        sin[b * half + j] = Math.sin(a);
      }
    const ropeHost = (x: Float32Array, heads: number, scale: number) => {
      for (let b = 0; b < B; b++)
        for (let h = 0; h < heads; h++) {
          const o = (b * heads + h) * D;
          for (let j = 0; j < half; j++) {
            const c = cos[b * half + j]!;
            const s = sin[b * half + j]!;
            const x1 = x[o + j]!;
            const x2 = x[o + j + half]!;
            x[o + j] = (x1 * c - x2 * s) * scale;
            x[o + j + half] = (x2 * c + x1 * s) * scale;
          }
        }
      return x;
    };
    // Each layer's q, k and v come back to the host (rotary embedding, cache write) in one round trip;
    // the tensors between reads live outside any tidy scope and are disposed by hand.
    const mask = tf.tensor4d(maskArr, [B, KV, G, cap]);
    let x = tf.tidy(() =>
      tf.gather(this.weights.tensor("model.embed_tokens.weight"), tf.tensor1d(tokens, "int32")),
    );
    try {
      for (let i = 0; i < c.numHiddenLayers; i++) {
        const p = `model.layers.${i}.`;
        const w = (n: string) => this.weights.tensor(p + n);
        const bias = (n: string) => (c.attentionBias ? this.weights.tensor(p + n) : undefined);
        const qkv = tf.tidy(() => {
          const hn = this.rmsNorm(x as tf.Tensor2D, w("input_layernorm.weight"));
          return ["q_proj", "k_proj", "v_proj"].map((n) =>
            linear(hn, w(`self_attn.${n}.weight`), bias(`self_attn.${n}.bias`)),
          );
        });
        let host: Float32Array[];
        try {
          host = await Promise.all(qkv.map((t) => t.data() as Promise<Float32Array>));
        } finally {
          for (const t of qkv) t.dispose();
        }
        const qh = ropeHost(host[0]!.slice(), H, 1 / Math.sqrt(D));
        const kh = ropeHost(host[1]!.slice(), KV, 1);
        // [B, KV*D] rows are [B, KV, 1, D] in memory.
        const [K, V] = cache.writeStep(
          i,
          slot,
          { data: kh, shape: [B, KV, 1, D] },
          { data: host[2]!, shape: [B, KV, 1, D] },
        );
        const prev = x;
        x = tf.tidy(() => {
          const scores = tf.matMul(tf.tensor4d(qh, [B, KV, G, D]), K, false, true); // [B, KV, G, cap], q pre-scaled
          const probs = tf.softmax(tf.add(scores, mask));
          const ctx = tf.reshape(tf.matMul(probs, V), [B, H * D]) as tf.Tensor2D;
          const h1 = tf.add(prev, linear(ctx, w("self_attn.o_proj.weight"))) as tf.Tensor2D;
          const hn2 = this.rmsNorm(h1, w("post_attention_layernorm.weight"));
          const gate = linear(hn2, w("mlp.gate_proj.weight"));
          const up = linear(hn2, w("mlp.up_proj.weight"));
          return tf.add(h1, linear(tf.mul(tf.mul(gate, tf.sigmoid(gate)), up), w("mlp.down_proj.weight")));
        });
        prev.dispose();
      }
      const logits = tf.tidy(() => {
        const hfinal = this.rmsNorm(x as tf.Tensor2D, this.weights.tensor("model.norm.weight"));
        return tf.matMul(hfinal, lmHead as tf.Tensor2D) as tf.Tensor2D;
      });
      cache.advance(tokens);
      return logits;
    } finally {
      x.dispose();
      mask.dispose();
    }
  }
}

/** A stored weight in HF layout (linear weights transposed back from [in, out]), in its own dtype. */
function transposedBack(s: ParamSpec, v: StoredValues): StoredValues {
  if (!s.transposed) return v instanceof HalfArray ? new HalfArray(v.dtype, v.bits.slice()) : v.slice();
  return transposeStored(v, s.shape[0]!, s.shape[1]!);
}

let uidCounter = 0;
/** A process-unique number for tfjs variable names (they share one registry). */
export function uid(): number {
  return ++uidCounter;
}

export { mulberry32 } from "../random.js";
