/**
 * A forward and backward of one batch run layer by layer, for a trainer that brings each decoder layer's
 * weights in just before the layer runs and hands its gradients on as soon as they exist (FSDP): the
 * forward keeps one hidden state per layer (the layer's input); the backward recomputes each layer
 * under a tape of its own with weights given again, from the last layer down. The head (final norm, LM
 * head and the loss) runs under the caller's tape through Qwen2Model.withLayerOutput. The kernels are
 * those of Qwen2Model.forward, so the gradients are the whole-model ones.
 */
import * as tf from "@tensorflow/tfjs";
import type { SequenceAttention } from "./attention.js";
import { blockRowsIndependentPast, decoderBlock, decoderBlocks, sharedBlockGroups } from "./decoder-block.js";
import { type WeightGradientSink, withHostWeightGradients } from "./linear.js";
import { computeLogProbsOfBatches, type LogProbOptions } from "./logprobs.js";
import { bf16BitsOf } from "./native-matmul-bf16.js";
import type { Qwen2Model } from "./qwen2.js";
import type { TokenBatch } from "./token-batch.js";
import { uid } from "./variable-names.js";
import { embeddingRows, widenedRows } from "./wasm-host-kernels.js";

/** One layer's weights by parameter name (HF names, our layout). */
export type LayerTensors = Map<string, tf.Tensor>;

export class LayerwisePass {
  private readonly seq: SequenceAttention;
  private readonly batchIds: Int32Array;

  /** The batch's token ids, [B*L] (the embedding's rows the pass looks up). */
  get ids(): Int32Array {
    return this.batchIds;
  }

  constructor(
    private readonly model: Qwen2Model,
    batch: TokenBatch,
  ) {
    this.seq = model.sequenceAttention(batch); // creates the shared tensors only, nothing to tidy
    this.batchIds = batch.ids;
  }

  /**
   * The token embeddings [B*L, h] (the first layer's input), from the model's embedding: widened from its
   * bfloat16 bits where it has them (the same values; its tensor may hold the bits only).
   */
  embed(): tf.Tensor2D {
    const table = this.model.variable("model.embed_tokens.weight");
    const bits = bf16BitsOf(table);
    return bits
      ? widenedRows(bits.values, this.batchIds, bits.shape[1])
      : embeddingRows(table, this.batchIds);
  }

  /** Layer `i` on `x` without a tape: its output. */
  forwardLayer(i: number, x: tf.Tensor2D, weights: LayerTensors): tf.Tensor2D {
    return tf.tidy(() =>
      decoderBlock(x, this.blockWeights(i, weights), this.seq, this.model.config.rmsNormEps),
    );
  }

  /**
   * Layer `i` recomputed on its input `x` under a tape, given `dy`, the gradient of its output: the
   * gradient of its input and of each of its weights (by name).
   */
  backwardLayer(
    i: number,
    x: tf.Tensor2D,
    weights: LayerTensors,
    dy: tf.Tensor2D,
  ): { dx: tf.Tensor2D; dWeights: LayerTensors } {
    const names = [...weights.keys()];
    const eps = this.model.config.rmsNormEps;
    const [dx, ...dws] = tf.grads((xi, ...ws) =>
      decoderBlock(
        xi as tf.Tensor2D,
        this.blockWeights(i, new Map(names.map((n, k) => [n, ws[k]!]))),
        this.seq,
        eps,
      ),
    )([x, ...weights.values()], dy);
    return { dx: dx as tf.Tensor2D, dWeights: new Map(names.map((n, k) => [n, dws[k]!])) };
  }

  /** The gradient of the embedding matrix from `dx`, the gradient of the first layer's input. */
  embeddingGradient(dx: tf.Tensor2D): tf.Tensor {
    const [g] = tf.grads((e) => embeddingRows(e, this.batchIds))(
      [this.model.variable("model.embed_tokens.weight")],
      dx,
    );
    return g!;
  }

  dispose(): void {
    for (const t of new Set([this.seq.mask, this.seq.cosQ, this.seq.sinQ, this.seq.cosK, this.seq.sinK]))
      t.dispose();
  }

  /** The attention inputs every layer shares for this batch. */
  get sequence(): SequenceAttention {
    return this.seq;
  }

  /** Layer `i`'s weights as the block reads them, from `weights` (by parameter name). */
  blockWeights(i: number, weights: LayerTensors) {
    return this.model.blockWeights(i, (name) => {
      const t = weights.get(name);
      if (!t) throw new RangeError(`layer ${i}: weight ${name} was not given`);
      return t;
    });
  }
}

/** Where a layer-by-layer step gets each layer's weights and hands its gradients on. */
export interface LayerwiseHooks {
  /** Brings layer i's weights in (FSDP: all-gathers them); the step disposes them after use. */
  layerWeights(i: number): Promise<LayerTensors>;
  /** Layer i's weight gradients (null in an empty round); disposed once this resolves. */
  layerGradients(i: number, grads: LayerTensors | null): Promise<void>;
  /**
   * The head's parameter gradients by variable name (null in an empty round); disposed once this resolves.
   * A variable whose gradient went to its headGradientInto array is not among them.
   */
  headGradients(grads: Map<string, tf.Tensor> | null): Promise<void>;
  /**
   * A host array (the variable's size) that the gradient of head variable `v` is added into, or a sink
   * that takes it as its two factors, where the LM head reads `v` from its bfloat16 bits
   * (withHostWeightGradients: no tensor of the vocabulary's size is made, and headGradients does not get
   * it); undefined, or a head that does not read bits: the gradient goes to headGradients. Asked once per
   * round with a batch, before the head runs.
   */
  headGradientInto?(v: tf.Variable): Float32Array | WeightGradientSink | undefined;
  /**
   * The embedding matrix's gradient through the first layer (null in an empty round); disposed after.
   * Give this or embeddingRowGradient, not both.
   */
  embeddingGradient?(grad: tf.Tensor | null): Promise<void>;
  /**
   * The same gradient as rows, without the [vocab, h] matrix that is zero but for them: row `ids[r]` of
   * it is the sum of rows `r` of `dy` with that id (null in an empty round; `dy` is disposed after).
   * addEmbeddingGradRows adds it into a host buffer with the dense gradient's bits.
   */
  embeddingRowGradient?(grad: EmbeddingRowGradient | null): Promise<void>;
}

/** The embedding matrix's gradient as the rows of `dy` [tokens, h] at the tokens' `ids`. */
export interface EmbeddingRowGradient {
  ids: Int32Array;
  dy: tf.Tensor2D;
}

/**
 * One forward and backward of `batch`, layer by layer: embed, each layer forward (weights brought in,
 * output kept), the head and `loss` under a tape over `headVariables` and the last layer's output, then
 * each layer backward from the last (weights brought in again, layer recomputed, gradients handed on),
 * then the embedding. With `batch` null the hooks are called in the same order with nothing computed:
 * a rank with fewer micro-batches than the others still takes part in every collective.
 */
export async function layerwiseStep(
  model: Qwen2Model,
  batch: TokenBatch | null,
  headVariables: tf.Variable[],
  loss: () => tf.Scalar,
  hooks: LayerwiseHooks,
): Promise<void> {
  if (!hooks.embeddingGradient === !hooks.embeddingRowGradient)
    throw new TypeError(
      "layerwiseStep: give exactly one of the hooks embeddingGradient and embeddingRowGradient",
    );
  const layers = model.config.numHiddenLayers;
  const pass = batch ? new LayerwisePass(model, batch) : null;
  const inputs: tf.Tensor2D[] = [];
  const release = (m: LayerTensors | null) => {
    if (m) for (const t of m.values()) t.dispose();
  };
  let dy: tf.Tensor2D | null = null;
  try {
    if (pass) inputs.push(pass.embed());
    for (let i = 0; i < layers; i++) {
      const w = await hooks.layerWeights(i);
      try {
        if (pass) inputs.push(pass.forwardLayer(i, inputs[i]!, w));
      } finally {
        release(w);
      }
    }
    let head: Map<string, tf.Tensor> | null = null;
    if (pass) {
      const last = inputs.pop()!;
      const out = tf.variable(last, true, `layer-output#${uid()}`);
      last.dispose(); // the variable holds the same data
      try {
        const routes = headVariables.flatMap((v): [tf.Variable, Float32Array | WeightGradientSink][] => {
          const into = hooks.headGradientInto?.(v);
          return into ? [[v, into]] : [];
        });
        const { value, grads } = model.withLayerOutput(out, () =>
          withHostWeightGradients(routes, () => tf.variableGrads(loss, [...headVariables, out])),
        );
        value.dispose();
        dy = grads[out.name] as tf.Tensor2D;
        // a head variable the loss does not reach (the untied embedding), or whose gradient went to its
        // host array, has no gradient here
        head = new Map(headVariables.filter((v) => grads[v.name]).map((v) => [v.name, grads[v.name]!]));
      } finally {
        out.dispose();
      }
    }
    try {
      await hooks.headGradients(head);
    } finally {
      release(head);
    }
    for (let i = layers - 1; i >= 0; i--) {
      const w = await hooks.layerWeights(i);
      let grads: LayerTensors | null = null;
      try {
        if (pass && dy) {
          const x = inputs.pop()!;
          const r = pass.backwardLayer(i, x, w, dy);
          x.dispose();
          dy.dispose();
          dy = r.dx;
          grads = r.dWeights;
        }
      } finally {
        release(w);
      }
      try {
        await hooks.layerGradients(i, grads);
      } finally {
        release(grads);
      }
    }
    if (hooks.embeddingRowGradient) {
      await hooks.embeddingRowGradient(pass && dy ? { ids: pass.ids, dy } : null);
    } else {
      const embedding = pass && dy ? pass.embeddingGradient(dy) : null;
      try {
        await hooks.embeddingGradient!(embedding);
      } finally {
        embedding?.dispose();
      }
    }
  } finally {
    dy?.dispose();
    for (const t of inputs) t.dispose();
    pass?.dispose();
  }
}

/**
 * Log-probs (and entropy) without gradients of several batches, layer by layer: each decoder layer's
 * weights are brought in once (`layerWeights`; FSDP: all-gathered) and run on every batch before the next
 * layer's come, so a sharded model is gathered once per pass and holds one layer at a time. Every batch's
 * hidden state [B*L, h] is kept between layers. Batches share a layer's products where that gives each its
 * own bits (decoderBlocks, in groups of sharedBlockGroups): each matrix is read once per group. The
 * embedding, the final norm and the head come from the model (it must hold them); the head runs as
 * chunkedTokenLogProbs runs it. The kernels are those of the whole-model pass, so are the numbers. Per
 * batch (each with its own options, as computeLogProbs takes them): [B*L] host arrays.
 */
export async function layerwiseLogProbs(
  model: Qwen2Model,
  batches: { tokens: TokenBatch; options: LogProbOptions & { chunkRows?: number } }[],
  layerWeights: (i: number) => Promise<LayerTensors>,
): Promise<{ logProbs: Float32Array; entropy?: Float32Array }[]> {
  const passes = batches.map((b) => new LayerwisePass(model, b.tokens));
  let states: tf.Tensor2D[] = [];
  try {
    // the model's own lookup: a bf16 embedding widens only the batch's rows
    states = batches.map((b) => model.embed(b.tokens));
    for (let i = 0; i < model.config.numHiddenLayers; i++) {
      const weights = await layerWeights(i);
      try {
        // batches whose rows give each its own bits share the layer's products (decoderBlocks)
        const w = passes[0]?.blockWeights(i, weights);
        const past = w && passes.length > 1 ? blockRowsIndependentPast(w) : undefined;
        const next: tf.Tensor2D[] = [...states];
        try {
          for (const group of sharedBlockGroups(
            states.map((x) => x.shape[0]),
            past,
          )) {
            const ys =
              group.length === 1
                ? [passes[group[0]!]!.forwardLayer(i, states[group[0]!]!, weights)]
                : tf.tidy(() =>
                    decoderBlocks(
                      group.map((k) => states[k]!),
                      w!,
                      group.map((k) => passes[k]!.sequence),
                      model.config.rmsNormEps,
                    ),
                  );
            for (const [j, k] of group.entries()) next[k] = ys[j]!;
          }
        } catch (error) {
          for (const [k, y] of next.entries()) if (y !== states[k]) y.dispose();
          throw error;
        }
        for (const x of states) x.dispose();
        states = next;
      } finally {
        for (const t of weights.values()) t.dispose();
      }
    }
    // the head over every micro-batch's final states, shared where that gives the same bits
    return await computeLogProbsOfBatches(
      model,
      batches.map(({ tokens, options }) => ({ tokens, options })),
      (k, f) => model.withLayerOutput(states[k]!, f),
    );
  } finally {
    for (const x of states) if (!x.isDisposed) x.dispose();
    for (const p of passes) p.dispose();
  }
}
