/**
 * One replica of the policy, living in its own actor process. The driver (rloo.ts) asks every replica
 * to sample, then to take a gradient step on its share of the batch; the replicas average their
 * gradients with a collective all-reduce, so after every step they hold the same weights (plain data
 * parallelism, no parameter server).
 *
 * Everything crossing the process boundary is a DataProto in wire form (typed arrays travel as raw
 * frames) or plain numbers.
 */

import * as tf from "@tensorflow/tfjs";
import { actor, collective } from "@torl-ts/actors";
import {
  applyGradients,
  DataProto,
  type DataProtoWire,
  forwardBackward,
  generate,
  loadPretrained,
  padBatch,
  type Qwen2Model,
  selectBackend,
  type Tokenizer,
} from "@torl-ts/verl";

export interface SamplingSettings {
  samplesPerPrompt: number;
  maxNewTokens: number;
  temperature: number;
  seed: number;
}

/** What one replica's update step reports; the driver averages these over replicas. */
export interface UpdateStats {
  policy_loss: number;
  grad_norm: number;
  response_tokens: number;
}

/** A method called before `setup()` finished. */
export class PolicyNotReadyError extends Error {
  override name = "PolicyNotReadyError";
}

export class PolicyReplica {
  private model?: Qwen2Model;
  private tokenizer?: Tokenizer;
  private optimizer?: tf.Optimizer;

  constructor(
    private readonly modelDir: string,
    private readonly learningRate: number,
  ) {}

  /** Picks the tensor backend (TORL_BACKEND or the best available), loads the model, makes Adam. */
  async setup(): Promise<string> {
    const backend = await selectBackend({ log: null });
    const { model, tokenizer } = loadPretrained(this.modelDir, { trainable: true });
    this.model = model;
    this.tokenizer = tokenizer;
    this.optimizer = tf.train.adam(this.learningRate);
    return backend.name;
  }

  /** Every replica takes rank `root`'s weights, so they start identical even from random inits. */
  async broadcastWeights(root: number, group: string): Promise<void> {
    const model = this.ready();
    const names = model.specs.map((s) => s.name);
    const params = model.getParameters();
    const flat = concatFlat(names.map((n) => params.get(n)!));
    await collective.broadcast(flat, root, group);
    model.setParameters(splitFlat(flat, names, params));
  }

  /**
   * Samples `samplesPerPrompt` responses for each prompt. Returns one row per sample: `input_ids` and
   * `attention_mask` [N, L] (prompt + response, right-padded), `response_mask` [N, L] (1 on generated
   * tokens), and the columns `prompt_index` and `response_text`.
   */
  rollout(prompts: string[], s: SamplingSettings): DataProtoWire {
    const model = this.ready();
    const tokenizer = this.tokenizer!;
    const promptIds = prompts.map((p) => tokenizer.encode(p));
    const repeated = promptIds.flatMap((ids) => Array.from({ length: s.samplesPerPrompt }, () => ids));
    const outputs = generate(model, tokenizer, repeated, {
      maxNewTokens: s.maxNewTokens,
      temperature: s.temperature,
      seed: s.seed,
    });
    const sequences = repeated.map((ids, i) => [...ids, ...outputs[i]!.tokenIds]);
    const batch = padBatch(sequences, "right", tokenizer.padTokenId);
    const responseMask = new Float32Array(batch.batch * batch.length);
    for (const [i, ids] of repeated.entries())
      responseMask.fill(1, i * batch.length + ids.length, i * batch.length + sequences[i]!.length);
    const N = batch.batch;
    const L = batch.length;
    return DataProto.fromDict(
      {
        input_ids: { data: batch.ids, shape: [N, L] },
        attention_mask: { data: batch.mask, shape: [N, L] },
        response_mask: { data: responseMask, shape: [N, L] },
      },
      {
        prompt_index: repeated.map((_, i) => Math.floor(i / s.samplesPerPrompt)),
        response_text: outputs.map((o) => o.text),
      },
    ).toWire();
  }

  /**
   * One REINFORCE step on this replica's rows with the advantages the driver computed:
   *   loss = -sum_i sum_t A_i * log pi(y_it | y_i<t) * m_it / sum_i sum_t m_it
   * (token mean over this replica's response tokens), gradients averaged across the group, then Adam.
   */
  async update(wire: DataProtoWire, group: string): Promise<UpdateStats> {
    const model = this.ready();
    const data = DataProto.fromWire(wire);
    const ids = data.tensor<Int32Array>("input_ids");
    const [N, L] = ids.shape as [number, number];
    const mask = data.tensor("response_mask").data as Float32Array;
    const advantages = data.tensor("advantages").data as Float32Array;
    const tokens = mask.reduce((a, b) => a + b, 0);
    const batch = {
      ids: ids.data,
      mask: data.tensor<Uint8Array>("attention_mask").data,
      batch: N,
      length: L,
    };

    const { loss, grads } = forwardBackward(model, batch, ({ rows: [start, end], scores }) => {
      const m = tf.tensor2d(mask.subarray(start * L, end * L), [end - start, L]);
      const a = tf.tensor2d(advantages.subarray(start, end), [end - start, 1]);
      return tf.div(tf.neg(tf.sum(tf.mul(tf.mul(scores.logProbs, m), a))), Math.max(tokens, 1)) as tf.Scalar;
    });

    // Average the gradients over the replicas: one flat array, one all-reduce.
    const names = [...grads.keys()];
    const flat = concatFlat(names.map((n) => grads.get(n)!.dataSync() as Float32Array));
    for (const g of grads.values()) g.dispose();
    await collective.allReduce(flat, "mean", group);
    const gradNorm = Math.sqrt(flat.reduce((acc, g) => acc + g * g, 0));
    const averaged = new Map<string, tf.Tensor>();
    let offset = 0;
    for (const name of names) {
      const shape = model.variable(name).shape;
      const size = shape.reduce((a, b) => a * b, 1);
      averaged.set(name, tf.tensor(flat.subarray(offset, offset + size), shape));
      offset += size;
    }
    applyGradients(model, this.optimizer!, averaged);
    return { policy_loss: loss, grad_norm: gradNorm, response_tokens: tokens };
  }

  /** A fingerprint of the weights (sum and sum of squares), for checks that replicas agree. */
  weightsFingerprint(): [number, number] {
    let sum = 0;
    let sq = 0;
    for (const p of this.ready().getParameters().values())
      for (const v of p) {
        sum += v;
        sq += v * v;
      }
    return [sum, sq];
  }

  private ready(): Qwen2Model {
    if (!this.model) throw new PolicyNotReadyError("call setup() before using the policy replica");
    return this.model;
  }
}

export const PolicyActor = actor(PolicyReplica, { module: import.meta.url, numCpus: 1 });

function concatFlat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

function splitFlat(
  flat: Float32Array,
  names: string[],
  like: Map<string, Float32Array>,
): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  let offset = 0;
  for (const name of names) {
    const n = like.get(name)!.length;
    out.set(name, flat.slice(offset, offset + n));
    offset += n;
  }
  return out;
}
