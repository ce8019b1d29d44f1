/**
 * One data-parallel replica of a policy for an algorithm written on the actor API: the model in its own
 * actor process, which samples with the TIR rollout and takes policy-gradient steps with advantages the
 * driver computed. The replicas average their gradients with a collective all-reduce, so after every
 * step they hold the same weights (plain data parallelism, no parameter server). The driver owns the
 * algorithm: rewards, advantages, metrics.
 *
 *   const replicas = [0, 1].map(() => PolicyReplicaActor.remote(modelDir, { learningRate: 1e-5, tool: {...} }));
 *   await get(replicas.map((r) => r.setup()));
 *   await createCollectiveGroup(replicas, { name: "pg" });
 *   await get(replicas.map((r) => r.broadcastWeights(0, "pg")));
 *   const shards = await get(replicas.map((r, i) => r.rollout(promptsOf(i), sampling)));
 *   // ... rewards and advantages on the driver, an `advantages` column added to each shard ...
 *   await get(replicas.map((r, i) => r.update(withAdvantages[i], "pg")));
 *
 * Sampling is `tirRollout`: with the Python tool, a round that ends in the tool's stop string has its last
 * ```python block run in a sandbox and the observation appended; without one it is plain generation.
 * `rolloutTrainingBatch` turns the samples into the training batch (the stock trainer's workers build
 * the same one), the tool's output masked out of the loss. Everything crossing the process boundary is
 * a DataProto in wire form (typed arrays travel as raw frames) or plain numbers.
 */
import * as tf from "@tensorflow/tfjs";
import { actor } from "@torl-ts/actors";
import {
  applyGradients,
  forwardBackward,
  loadPretrained,
  type Qwen2Model,
  selectBackend,
  type Tokenizer,
} from "../models/index.js";
import { DataProto, type DataProtoWire } from "../protocol/data-proto.js";
import { responseOffset, rolloutTrainingBatch } from "../rollout/batch.js";
import type { PythonCodeInterpreter } from "../rollout/code-interpreter.js";
import {
  type CodeInterpreterToolConfig,
  createCodeInterpreterTool,
} from "../rollout/code-interpreter-tool.js";
import { tirRollout } from "../rollout/tir.js";
import { allReduceGradients, broadcastParameters } from "./replica-sync.js";

export interface PolicyReplicaOptions {
  /** Adam's learning rate. */
  learningRate: number;
  /**
   * ToRL's Python tool, with the keys of `actor_rollout_ref.rollout.tool` (`createCodeInterpreterTool`;
   * `sandbox_actors: 0` runs the interpreters in the replica's own process). Omitted or null: no tool,
   * plain generation.
   */
  tool?: CodeInterpreterToolConfig | null;
}

export interface PolicySamplingSettings {
  samplesPerPrompt: number;
  /** Most response tokens, generated and tool-appended together. */
  maxNewTokens: number;
  temperature: number;
  seed: number;
  /** Most tool calls per response (ToRL's C); ignored by a replica without a tool. */
  maxToolCalls: number;
}

/** What one replica's update step reports; a driver averages these over replicas. */
export interface PolicyUpdateStats {
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
  private tool?: PythonCodeInterpreter;

  constructor(
    private readonly modelDir: string,
    private readonly options: PolicyReplicaOptions,
  ) {}

  /**
   * Picks the tensor backend (TORL_BACKEND or the best available), loads the model, makes Adam, starts
   * the tool's sandbox; returns the backend's name.
   */
  async setup(): Promise<string> {
    const backend = await selectBackend({ log: null });
    const { model, tokenizer } = loadPretrained(this.modelDir, { trainable: true });
    this.model = model;
    this.tokenizer = tokenizer;
    this.optimizer = tf.train.adam(this.options.learningRate);
    if (this.options.tool) this.tool = await createCodeInterpreterTool(this.options.tool);
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
  async rollout(prompts: string[], s: PolicySamplingSettings): Promise<DataProtoWire> {
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
   * One REINFORCE step on this replica's rows (a rollout's batch with an `advantages` column, one per row):
   *   loss = -sum_i sum_t A_i * log pi(y_it | y_i<t) * m_it / sum_i sum_t m_it
   * (token mean over this replica's loss-mask tokens: generated ones, not tool output), gradients
   * averaged across the group, then Adam.
   */
  async update(wire: DataProtoWire, group: string): Promise<PolicyUpdateStats> {
    const model = this.ready();
    const data = DataProto.fromWire(wire);
    const ids = data.tensor<Int32Array>("input_ids");
    const [N, W] = ids.shape as [number, number];
    const P = responseOffset(data); // the response occupies columns [P, W) of input_ids
    const R = W - P;
    const lossMask = Float32Array.from(data.tensor<Uint8Array>("loss_mask").data);
    const advantages = Float32Array.from(data.tensor("advantages").data as ArrayLike<number>);
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

  /** Stops the tool's sandbox (call it before shutting the runtime down). */
  async close(): Promise<void> {
    const tool = this.tool;
    this.tool = undefined;
    await tool?.close();
  }

  private ready(): Qwen2Model {
    if (!this.model) throw new PolicyNotReadyError("call setup() before using the policy replica");
    return this.model;
  }
}

/** `PolicyReplicaActor.remote(modelDir, options)` starts a replica in its own actor process (1 CPU). */
export const PolicyReplicaActor = actor(PolicyReplica, { module: import.meta.url, numCpus: 1 });
