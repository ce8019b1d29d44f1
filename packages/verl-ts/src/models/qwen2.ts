/**
 * The Qwen2 / Llama causal LM in tfjs: embedding, N x decoder block (RMSNorm, GQA attention with rotary
 * embeddings, RMSNorm, SwiGLU MLP: decoder-block.ts), final RMSNorm, LM head (tied or not). Parameters
 * are tf.Variables named as in HF checkpoints (parameterSpecs is the name map); linear weights are held
 * transposed ([in, out], see linear.ts).
 */
import * as tf from "@tensorflow/tfjs";
import { gaussian, mulberry32 } from "../random.js";
import { cachedAttention, causalMask, type SequenceAttention } from "./attention.js";
import type { Qwen2Config } from "./config.js";
import { type BlockWeights, blockFinish, blockProjections, decoderBlock } from "./decoder-block.js";
import { ModelFormatError } from "./errors.js";
import type { KVCache } from "./kv-cache.js";
import { linear } from "./linear.js";
import { rmsNorm } from "./rms-norm.js";
import { Rotary } from "./rotary.js";
import { type TokenBatch, tokenPositions } from "./token-batch.js";
import { uid } from "./variable-names.js";

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

export class Qwen2Model {
  readonly specs: ParamSpec[];
  private readonly byName: Map<string, tf.Variable>;
  private readonly rotary: Rotary;

  constructor(
    readonly config: Qwen2Config,
    values: Map<string, Float32Array>,
    readonly trainable = true,
  ) {
    this.specs = parameterSpecs(config);
    for (const s of this.specs) {
      const v = values.get(s.name);
      if (!v) throw new ModelFormatError("parameter missing", "<values>", s.name);
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (v.length !== n)
        throw new ModelFormatError(`expected ${n} values, got ${v.length}`, "<values>", s.name);
    }
    this.byName = new Map();
    for (const s of this.specs)
      this.byName.set(
        s.name,
        tf.variable(tf.tensor(values.get(s.name)!, s.shape, "float32"), trainable, `${s.name}#${uid()}`),
      );
    this.rotary = new Rotary(config.headDim, config.ropeTheta);
  }

  /** A model with random weights (normal(0, std) matrices, unit norms, zero biases), seeded. */
  static random(
    config: Qwen2Config,
    options: { seed?: number; std?: number; trainable?: boolean } = {},
  ): Qwen2Model {
    return new Qwen2Model(config, Qwen2Model.randomParameters(config, options), options.trainable ?? true);
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

  /** The variables, in checkpoint order (what an optimizer updates). */
  variables(): tf.Variable[] {
    return this.specs.map((s) => this.byName.get(s.name)!);
  }

  variable(name: string): tf.Variable {
    const v = this.byName.get(name);
    if (!v) throw new RangeError(`no parameter named ${name}`);
    return v;
  }

  /** Every parameter as a flat Float32Array by HF name, in our layout (linear weights [in, out]). */
  async getParameters(): Promise<Map<string, Float32Array>> {
    const host = await Promise.all(
      this.specs.map((s) => this.byName.get(s.name)!.data() as Promise<Float32Array>),
    );
    return new Map(this.specs.map((s, i) => [s.name, host[i]!]));
  }

  /** Assigns parameters by name (our layout); all names must exist; absent names keep their values. */
  setParameters(values: Map<string, Float32Array> | Record<string, Float32Array>): void {
    const entries = values instanceof Map ? [...values] : Object.entries(values);
    const specByName = new Map(this.specs.map((s) => [s.name, s]));
    for (const [name, v] of entries) {
      const s = specByName.get(name);
      if (!s) throw new RangeError(`no parameter named ${name}`);
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (v.length !== n) throw new RangeError(`parameter ${name}: expected ${n} values, got ${v.length}`);
    }
    for (const [name, v] of entries) {
      const s = specByName.get(name)!;
      tf.tidy(() => this.byName.get(name)!.assign(tf.tensor(v, s.shape, "float32")));
    }
  }

  /** Parameters in HF layout, for saving. */
  async toHfTensors(): Promise<{ name: string; shape: number[]; data: Float32Array }[]> {
    return Promise.all(
      this.specs.map(async (s) => {
        const v = this.byName.get(s.name)!;
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
    for (const v of this.byName.values()) v.dispose();
    this.rotary.dispose();
  }

  /** Number of parameters. */
  numParameters(): number {
    return this.specs.reduce((a, s) => a + s.shape.reduce((p, q) => p * q, 1), 0);
  }

  /** Decoder layer i's weights, as the model holds them. */
  blockWeights(i: number): BlockWeights {
    const p = `model.layers.${i}.`;
    const w = (n: string) => this.byName.get(p + n)!;
    const bias = (n: string) => (this.config.attentionBias ? w(n) : undefined);
    return {
      inputNorm: w("input_layernorm.weight"),
      attention: {
        q: w("self_attn.q_proj.weight"),
        k: w("self_attn.k_proj.weight"),
        v: w("self_attn.v_proj.weight"),
        o: w("self_attn.o_proj.weight"),
        qBias: bias("self_attn.q_proj.bias"),
        kBias: bias("self_attn.k_proj.bias"),
        vBias: bias("self_attn.v_proj.bias"),
      },
      postNorm: w("post_attention_layernorm.weight"),
      mlp: { gate: w("mlp.gate_proj.weight"), up: w("mlp.up_proj.weight"), down: w("mlp.down_proj.weight") },
    };
  }

  /**
   * The LM head's weight [h, V] in our layout (the embedding transposed when tied). Always a new tensor
   * that the caller owns: disposing it never disposes the model's own variable.
   */
  lmHeadWeight(): tf.Tensor {
    return this.config.tieWordEmbeddings
      ? tf.transpose(this.byName.get("model.embed_tokens.weight")!)
      : tf.clone(this.byName.get("lm_head.weight")!);
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
    const positions = tokenPositions(batch);
    const maskArr = causalMask(batch, H);
    return tf.tidy(() => {
      const mask = tf.tensor4d(maskArr, [B, H, L, L]);
      const [cosQ, sinQ] = this.rotary.tables(positions, B, L, H);
      const [cosK, sinK] = KV === H ? [cosQ, sinQ] : this.rotary.tables(positions, B, L, KV);
      const seq: SequenceAttention = {
        shape: { heads: H, kvHeads: KV, headDim: c.headDim },
        B,
        L,
        mask,
        rotary: this.rotary,
        cosQ,
        sinQ,
        cosK,
        sinK,
        keysValues: options.keysValues,
      };
      const ids = tf.tensor1d(batch.ids, "int32");
      let x = tf.gather(this.byName.get("model.embed_tokens.weight")!, ids) as tf.Tensor2D; // [B*L, h]
      for (let i = 0; i < c.numHiddenLayers; i++)
        x = decoderBlock(x, this.blockWeights(i), seq, c.rmsNormEps);
      let hfinal = x;
      if (options.lastOnly)
        hfinal = tf.reshape(
          tf.slice(tf.reshape(x, [B, L, c.hiddenSize]), [0, L - 1, 0], [B, 1, c.hiddenSize]),
          [B, c.hiddenSize],
        );
      hfinal = rmsNorm(hfinal, this.byName.get("model.norm.weight")!, c.rmsNormEps);
      if (options.hidden)
        return tf.reshape(hfinal, options.lastOnly ? [B, c.hiddenSize] : [B, L, c.hiddenSize]);
      const logits = linear(hfinal, this.lmHeadWeight());
      return options.lastOnly ? logits : tf.reshape(logits, [B, L, c.vocabSize]);
    });
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
    const rope = this.rotary.hostStep(cache.nextPositions());
    const slot = cache.length;
    const maskArr = cache.stepMask(H); // [B, H, 1, cap] for the slot being written
    const cap = cache.capacity;
    const shape = { heads: H, kvHeads: KV, headDim: D };
    // Each layer's q, k and v come back to the host (rotary embedding, applied there because q and k are
    // tiny here and it replaces a dozen small kernels per layer; cache write) in one round trip; the
    // tensors between reads live outside any tidy scope and are disposed by hand.
    const mask = tf.tensor4d(maskArr, [B, KV, G, cap]);
    let x = tf.tidy(() =>
      tf.gather(this.byName.get("model.embed_tokens.weight")!, tf.tensor1d(tokens, "int32")),
    ) as tf.Tensor2D;
    try {
      for (let i = 0; i < c.numHiddenLayers; i++) {
        const w = this.blockWeights(i);
        const qkv = tf.tidy(() => blockProjections(x, w, c.rmsNormEps));
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
          slot,
          { data: kh, shape: [B, KV, 1, D] },
          { data: host[2]!, shape: [B, KV, 1, D] },
        );
        const prev = x;
        x = tf.tidy(() => {
          const context = cachedAttention(tf.tensor4d(qh, [B, KV, G, D]), K, V, mask, shape); // q pre-scaled
          return blockFinish(prev, context, w, c.rmsNormEps);
        });
        prev.dispose();
      }
      const logits = tf.tidy(() => {
        const hfinal = rmsNorm(x, this.byName.get("model.norm.weight")!, c.rmsNormEps);
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
