/**
 * REINFORCE with a per-prompt moving-average baseline, written from the public API of the torl-ts
 * packages alone. Two policy replicas (actors) sample with the TIR rollout, calling ToRL's Python
 * tool in a sandbox; the project's verifier scores the answers; the replicas average their gradients
 * over a collective group, so they stay identical.
 *
 *   npm start <model-dir> [steps]      (node --import tsx algorithm.ts <model-dir> [steps])
 *
 * <model-dir>: any HF-format Qwen2 directory (config.json, model.safetensors, tokenizer.json).
 */
import { fileURLToPath } from "node:url";
import { actor, createCollectiveGroup, get, init, shutdown } from "@torl-ts/actors";
import { SandboxExecutor } from "@torl-ts/sandbox";
import {
  allReduceGradients,
  applyGradients,
  broadcastParameters,
  computeMathScore,
  type DataProto,
  executionInfoFromRollout,
  forwardBackward,
  generateProblems,
  loadPretrained,
  PythonCodeInterpreter,
  type Qwen2Model,
  renderPrompt,
  responseOffset,
  rolloutTrainingBatch,
  selectBackend,
  type Tokenizer,
  tf,
  tirRollout,
} from "@torl-ts/verl";

// Hyperparameters, all in one place.
const REPLICAS = 2;
const PROMPTS_PER_REPLICA = 2;
const SAMPLES_PER_PROMPT = 2;
const MAX_RESPONSE_TOKENS = 96;
const MAX_TOOL_CALLS = 1;
const LEARNING_RATE = 1e-4;
const BASELINE_DECAY = 0.9;
const GROUP = "reinforce";

/** One replica of the policy, in its own actor process. */
export class Replica {
  private model?: Qwen2Model;
  private tokenizer?: Tokenizer;
  private optimizer?: tf.Optimizer;
  private sandbox?: SandboxExecutor;
  private tool?: PythonCodeInterpreter;
  /** The last rollout's training batch, kept here for `update`. */
  private batch?: DataProto;

  constructor(private readonly modelDir: string) {}

  async setup(): Promise<string> {
    const backend = await selectBackend({ log: null });
    const { model, tokenizer } = loadPretrained(this.modelDir, { trainable: true });
    this.model = model;
    this.tokenizer = tokenizer;
    this.optimizer = tf.train.adam(LEARNING_RATE);
    this.sandbox = await new SandboxExecutor({ workers: 1 }).start();
    this.tool = new PythonCodeInterpreter(this.sandbox, { runTimeout: 10 });
    return backend.name;
  }

  /** Every replica takes rank 0's weights. */
  async syncWeights(): Promise<void> {
    await broadcastParameters(this.model!, { group: GROUP });
  }

  /** Samples SAMPLES_PER_PROMPT responses per question and scores them with the verifier. */
  async rollout(
    questions: string[],
    answers: string[],
    seed: number,
  ): Promise<{ rewards: number[]; toolCalls: number }> {
    const tokenizer = this.tokenizer!;
    const prompts = questions.flatMap((q) => {
      const ids = tokenizer.encode(renderPrompt("tir_base_0309", [{ role: "user", content: q }]));
      return Array.from({ length: SAMPLES_PER_PROMPT }, () => ids);
    });
    const { samples } = await tirRollout(this.model!, tokenizer, prompts, {
      tool: this.tool,
      numLlmCallsAvailable: MAX_TOOL_CALLS,
      maxResponseLength: MAX_RESPONSE_TOKENS,
      temperature: 1,
      seed,
    });
    this.batch = rolloutTrainingBatch(samples, { padTokenId: tokenizer.padTokenId });
    const rewards = samples.map((s) => {
      const answer = answers[Math.floor(s.index / SAMPLES_PER_PROMPT)]!;
      return computeMathScore(s.text, answer, {}, executionInfoFromRollout(s)).score;
    });
    return { rewards, toolCalls: samples.reduce((n, s) => n + s.numToolCalls, 0) };
  }

  /** One REINFORCE step on the last rollout: loss = -mean over loss-mask tokens of A * log pi. */
  async update(advantages: number[]): Promise<{ loss: number; gradNorm: number }> {
    const model = this.model!;
    const batch = this.batch!;
    const ids = batch.tensor<Int32Array>("input_ids");
    const [rows, width] = ids.shape as [number, number];
    const P = responseOffset(batch); // responses are columns [P, width) of input_ids
    const R = width - P;
    const mask = Float32Array.from(batch.tensor<Uint8Array>("loss_mask").data);
    const tokens = Math.max(
      1,
      mask.reduce((a, b) => a + b, 0),
    );
    const tokenBatch = {
      ids: ids.data,
      mask: batch.tensor<Uint8Array>("attention_mask").data,
      batch: rows,
      length: width,
    };
    const { loss, grads } = await forwardBackward(model, tokenBatch, ({ rows: [start, end], scores }) => {
      const logProbs = tf.slice(scores.logProbs, [0, P], [end - start, R]);
      const m = tf.tensor2d(mask.subarray(start * R, end * R), [end - start, R]);
      const a = tf.tensor2d(advantages.slice(start, end), [end - start, 1]);
      return tf.div(tf.neg(tf.sum(tf.mul(tf.mul(logProbs, m), a))), tokens) as tf.Scalar;
    });
    const synced = await allReduceGradients(model, grads, { group: GROUP, op: "mean" });
    applyGradients(model, this.optimizer!, synced.grads);
    return { loss, gradNorm: synced.norm };
  }

  /** Sum of all weights: equal on every replica when they are in sync. */
  async fingerprint(): Promise<number> {
    let sum = 0;
    for (const values of (await this.model!.getParameters()).values()) for (const v of values) sum += v;
    return sum;
  }

  async close(): Promise<void> {
    await this.sandbox?.close();
  }
}

export const ReplicaActor = actor(Replica, { module: import.meta.url, numCpus: 1 });

async function main(modelDir: string, steps: number): Promise<void> {
  await init({ numCpus: REPLICAS });
  const replicas = Array.from({ length: REPLICAS }, () => ReplicaActor.remote(modelDir));
  try {
    const backends = await get(replicas.map((r) => r.setup()));
    const group = await createCollectiveGroup(replicas, { name: GROUP });
    try {
      await get(replicas.map((r) => r.syncWeights()));
      const before = await replicas[0]!.fingerprint();
      const problems = generateProblems({ count: steps * REPLICAS * PROMPTS_PER_REPLICA, seed: 1 });
      const baseline = new Map<string, number>();
      for (let step = 0; step < steps; step++) {
        const shards = replicas.map((_, i) => {
          const start = (step * REPLICAS + i) * PROMPTS_PER_REPLICA;
          return problems.slice(start, start + PROMPTS_PER_REPLICA);
        });
        const rollouts = await get(
          replicas.map((r, i) =>
            r.rollout(
              shards[i]!.map((p) => p.question),
              shards[i]!.map((p) => p.answer),
              step * REPLICAS + i,
            ),
          ),
        );
        // Advantage: reward minus the question's moving-average reward (0 before it was seen).
        const questionOf = (i: number, j: number) => shards[i]![Math.floor(j / SAMPLES_PER_PROMPT)]!.question;
        const advantages = rollouts.map(({ rewards }, i) =>
          rewards.map((reward, j) => reward - (baseline.get(questionOf(i, j)) ?? 0)),
        );
        for (const [i, { rewards }] of rollouts.entries())
          for (const [j, reward] of rewards.entries()) {
            const q = questionOf(i, j);
            baseline.set(q, BASELINE_DECAY * (baseline.get(q) ?? 0) + (1 - BASELINE_DECAY) * reward);
          }
        const stats = await get(replicas.map((r, i) => r.update(advantages[i]!)));
        const rewards = rollouts.flatMap((r) => r.rewards);
        console.log(
          JSON.stringify({
            step: step + 1,
            reward_mean: rewards.reduce((a, b) => a + b, 0) / rewards.length,
            tool_calls: rollouts.reduce((n, r) => n + r.toolCalls, 0),
            loss: stats[0]!.loss,
            grad_norm: stats[0]!.gradNorm,
          }),
        );
      }
      const after = await get(replicas.map((r) => r.fingerprint()));
      console.log(JSON.stringify({ backends, fingerprint_before: before, fingerprints_after: after }));
    } finally {
      await group.destroy();
    }
  } finally {
    await Promise.allSettled(replicas.map((r) => r.close()));
    await shutdown();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [modelDir, steps = "5"] = process.argv.slice(2);
  if (!modelDir) {
    console.error("usage: node --import tsx algorithm.ts <model-dir> [steps]");
    process.exitCode = 2;
  } else {
    main(modelDir, Number(steps)).catch((error) => {
      console.error(error);
      process.exitCode = 1;
    });
  }
}
