/**
 * One replica of the policy, living in its own actor process. The driver (rloo.ts) asks every replica
 * to sample, then to take a gradient step on its share of the batch; the replicas average their
 * gradients with a collective all-reduce, so after every step they hold the same weights (plain data
 * parallelism, no parameter server).
 *
 * Sampling is the project's TIR rollout (`tirRollout`): with the Python tool, a round that ends in
 * "```output" has its last ```python block run in a sandbox (a pool of warm interpreters inside this
 * process) and the observation appended; without a tool it is plain generation. `rolloutTrainingBatch`
 * turns the samples into the training batch, the same one the stock trainer's workers build, with the
 * tool's output masked out of the loss.
 *
 * Everything crossing the process boundary is a DataProto in wire form (typed arrays travel as raw
 * frames) or plain numbers.
 */

import * as tf from "@tensorflow/tfjs";
import { actor } from "@torl-ts/actors";
import { SandboxExecutor } from "@torl-ts/sandbox";
import {
  allReduceGradients,
  applyGradients,
  broadcastParameters,
  DataProto,
  type DataProtoWire,
  forwardBackward,
  loadPretrained,
  PythonCodeInterpreter,
  type Qwen2Model,
  responseOffset,
  rolloutTrainingBatch,
  selectBackend,
  type Tokenizer,
  type Tool,
  tirRollout,
} from "@torl-ts/verl";

/** The tool the policy may call while it writes a response. */
export type ToolChoice = "none" | "python";

export interface SamplingSettings {
  samplesPerPrompt: number;
  /** Most response tokens, generated and tool-appended together. */
  maxNewTokens: number;
  temperature: number;
  seed: number;
  /** Most tool calls per response (ToRL's C); ignored by a replica without a tool. */
  maxToolCalls: number;
}

/** What one replica's update step reports; the driver averages these over replicas. */
export interface UpdateStats {
  policy_loss: number;
  grad_norm: number;
  /** Tokens the loss covered (generated response tokens, tool output excluded). */
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
  private sandbox?: SandboxExecutor;
  private tool?: Tool;

  constructor(
    private readonly modelDir: string,
    private readonly learningRate: number,
    private readonly toolChoice: ToolChoice = "none",
  ) {}

  /** Picks the tensor backend (TORL_BACKEND or the best available), loads the model, makes Adam, starts the sandbox. */
  async setup(): Promise<string> {
    const backend = await selectBackend({ log: null });
    const { model, tokenizer } = loadPretrained(this.modelDir, { trainable: true });
    this.model = model;
    this.tokenizer = tokenizer;
    this.optimizer = tf.train.adam(this.learningRate);
    if (this.toolChoice === "python") {
      this.sandbox = await new SandboxExecutor({ workers: 2 }).start();
      this.tool = new PythonCodeInterpreter(this.sandbox, { runTimeout: 10 });
    }
    return backend.name;
  }

  /** Every replica takes rank `root`'s weights, so they start identical even from random inits. */
  async broadcastWeights(root: number, group: string): Promise<void> {
    await broadcastParameters(this.ready(), { group, root });
  }

  /**
   * Samples `samplesPerPrompt` responses for each prompt (prompt-major: the k samples of a prompt are
   * adjacent). Returns the rollout's training batch (`rolloutTrainingBatch`: input_ids, attention_mask,
   * responses, loss_mask, execution_passes, num_tool_calls, response_text, ...) plus `prompt_index`.
   */
  async rollout(prompts: string[], s: SamplingSettings): Promise<DataProtoWire> {
    const model = this.ready();
    const tokenizer = this.tokenizer!;
    const promptIds = prompts.map((p) => tokenizer.encode(p));
    const repeated = promptIds.flatMap((ids) => Array.from({ length: s.samplesPerPrompt }, () => ids));
    const { samples } = await tirRollout(model, tokenizer, repeated, {
      tool: this.tool,
      numLlmCallsAvailable: this.tool ? s.maxToolCalls : 0,
      maxResponseLength: s.maxNewTokens,
      temperature: s.temperature,
      seed: s.seed,
    });
    const batch = rolloutTrainingBatch(samples, { padTokenId: tokenizer.padTokenId });
    batch.nonTensorBatch.prompt_index = repeated.map((_, i) => Math.floor(i / s.samplesPerPrompt));
    return batch.toWire();
  }

  /**
   * One REINFORCE step on this replica's rows with the advantages the driver computed:
   *   loss = -sum_i sum_t A_i * log pi(y_it | y_i<t) * m_it / sum_i sum_t m_it
   * (token mean over this replica's loss-mask tokens: generated ones, not tool output), gradients
   * averaged across the group, then Adam.
   */
  async update(wire: DataProtoWire, group: string): Promise<UpdateStats> {
    const model = this.ready();
    const data = DataProto.fromWire(wire);
    const ids = data.tensor<Int32Array>("input_ids");
    const [N, W] = ids.shape as [number, number];
    const P = responseOffset(data); // the response occupies columns [P, W) of input_ids
    const R = W - P;
    const lossMask = Float32Array.from(data.tensor<Uint8Array>("loss_mask").data);
    const advantages = data.tensor("advantages").data as Float32Array;
    const tokens = lossMask.reduce((a, b) => a + b, 0);
    const batch = {
      ids: ids.data,
      mask: data.tensor<Uint8Array>("attention_mask").data,
      batch: N,
      length: W,
    };

    const { loss, grads } = await forwardBackward(model, batch, ({ rows: [start, end], scores }) => {
      const b = end - start;
      const logProbs = tf.slice(scores.logProbs, [0, P], [b, R]); // column t scores token t
      const m = tf.tensor2d(lossMask.subarray(start * R, end * R), [b, R]);
      const a = tf.tensor2d(advantages.subarray(start, end), [b, 1]);
      return tf.div(tf.neg(tf.sum(tf.mul(tf.mul(logProbs, m), a))), Math.max(tokens, 1)) as tf.Scalar;
    });

    // Average the gradients over the replicas (one all-reduce), then every replica takes the same step.
    const synced = await allReduceGradients(model, grads, { group, op: "mean" });
    applyGradients(model, this.optimizer!, synced.grads);
    return { policy_loss: loss, grad_norm: synced.norm, response_tokens: tokens };
  }

  /** A fingerprint of the weights (sum and sum of squares), for checks that replicas agree. */
  async weightsFingerprint(): Promise<[number, number]> {
    let sum = 0;
    let sq = 0;
    for (const p of (await this.ready().getParameters()).values())
      for (const v of p) {
        sum += v;
        sq += v * v;
      }
    return [sum, sq];
  }

  /** Stops the sandbox's interpreters (the driver calls it before shutting the runtime down). */
  async close(): Promise<void> {
    await this.sandbox?.close();
    this.sandbox = undefined;
    this.tool = undefined;
  }

  private ready(): Qwen2Model {
    if (!this.model) throw new PolicyNotReadyError("call setup() before using the policy replica");
    return this.model;
  }
}

export const PolicyActor = actor(PolicyReplica, { module: import.meta.url, numCpus: 1 });
