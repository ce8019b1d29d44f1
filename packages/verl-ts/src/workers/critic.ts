/**
 * veRL's CriticWorker, FSDP-style: a value model sharded over the ranks exactly like the actor
 * (fsdp.ts). The model is the Qwen2 backbone of critic.model.path (default: the actor's model) with a
 * linear value head on the final hidden states, as HF's Qwen2ForTokenClassification with one label
 * (`score.weight`, `score.bias`; the head starts at normal(0, 0.02) and 0, the same on every rank). The
 * language-model head is not part of it.
 *
 * The value of response token t is read at the position before it (the state it was generated from),
 * as veRL slices `values[:, -R - 1 : -1]`; values line up with old_log_probs and advantages.
 *
 * Colocate it with the actor (`WorkerGroup.createColocated(pool, {actor_rollout_ref, critic})`) so both
 * share one process and collective group per bundle; the trainer does that when adv_estimator is gae.
 */
import * as tf from "@tensorflow/tfjs";
import { computeValueLoss } from "../algorithms/policy-loss.js";
import { valueLossTf } from "../algorithms/tf-ops.js";
import type { TrainerConfig } from "../config/types.js";
import { selectBackend } from "../models/backend.js";
import { loadModel } from "../models/pretrained.js";
import type { Qwen2Model } from "../models/qwen2.js";
import type { TokenBatch } from "../models/token-batch.js";
import { uid } from "../models/variable-names.js";
import { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { gaussian, mulberry32 } from "../random.js";
import { Dispatch, register } from "../single-controller/decorator.js";
import {
  byMicroBatch,
  microBatches,
  padColumns,
  perWorkerRows,
  responseTokenBatch,
  ShardedParameters,
  ShardedWorker,
  type ShardInfo,
  WorkerStateError,
} from "./fsdp.js";
import type { OptimSettings } from "./optim.js";

export interface CriticOptions {
  config: TrainerConfig;
}

/** Seed of the value head's initial weights (every rank draws the same). */
const HEAD_SEED = 0x5c0e;

/** The critic's part of the config, with the defaults veRL derives filled in. */
interface CriticSettings {
  path: string;
  optim: OptimSettings;
  miniRows: number;
  micro: number | null;
  forwardMicro: number;
  /** Token budgets of a micro-batch (use_dynamic_bsz), else null. */
  maxTokens: number | null;
  forwardMaxTokens: number | null;
  epochs: number;
  gradClip: number;
  cliprange: number;
  lossAggMode: string;
}

export function criticSettings(cfg: TrainerConfig, worldSize: number): CriticSettings {
  const c = cfg.critic as TrainerConfig["critic"] & {
    model: { path: string | null };
    ppo_micro_batch_size: number | null;
    ppo_micro_batch_size_per_gpu: number | null;
    forward_micro_batch_size: number | null;
    forward_micro_batch_size_per_gpu: number | null;
    use_dynamic_bsz: boolean;
    ppo_max_token_len_per_gpu: number;
    forward_max_token_len_per_gpu: number;
    ppo_epochs: number;
    grad_clip: number;
    loss_agg_mode: string;
    rollout_n: number;
  };
  const path = c.model.path ?? cfg.actor_rollout_ref.model.path;
  if (!path) throw new WorkerStateError("critic.model.path (or actor_rollout_ref.model.path) is not set");
  const micro = perWorkerRows(c.ppo_micro_batch_size_per_gpu, c.ppo_micro_batch_size, worldSize);
  return {
    path,
    optim: c.optim as OptimSettings,
    miniRows: c.ppo_mini_batch_size * c.rollout_n,
    micro,
    forwardMicro:
      perWorkerRows(c.forward_micro_batch_size_per_gpu, c.forward_micro_batch_size, worldSize) ?? micro ?? 8,
    maxTokens: c.use_dynamic_bsz ? c.ppo_max_token_len_per_gpu : null,
    forwardMaxTokens: c.use_dynamic_bsz ? c.forward_max_token_len_per_gpu : null,
    epochs: c.ppo_epochs,
    gradClip: c.grad_clip,
    cliprange: c.cliprange_value,
    lossAggMode: c.loss_agg_mode,
  };
}

export class CriticWorker extends ShardedWorker {
  private readonly cfg: TrainerConfig;
  private settings?: CriticSettings;
  private model?: Qwen2Model;
  private head?: { weight: tf.Variable; bias: tf.Variable };

  constructor(options: CriticOptions) {
    super();
    this.cfg = options.config;
  }

  /** Loads the backbone, adds the value head, shards the parameters and sets up AdamW. */
  @register({ dispatchMode: Dispatch.ONE_TO_ALL })
  async initModel(): Promise<ShardInfo> {
    this.backendName = (await selectBackend({ log: null })).name;
    const s = criticSettings(this.cfg, this.worldSize);
    this.settings = s;
    this.model = loadModel(s.path, { trainable: true });
    const h = this.model.config.hiddenSize;
    const rng = mulberry32(HEAD_SEED);
    const w = new Float32Array(h);
    for (let i = 0; i < h; i++) w[i] = gaussian(rng) * 0.02;
    this.head = {
      weight: tf.variable(tf.tensor2d(w, [h, 1]), true, `score.weight#${uid()}`),
      bias: tf.variable(tf.zeros([1]), true, `score.bias#${uid()}`),
    };
    this.sharded = new ShardedParameters(await this.parameters(), this.ctx, s.optim);
    return this.shardInfo();
  }

  private need(): { model: Qwen2Model; head: { weight: tf.Variable; bias: tf.Variable }; s: CriticSettings } {
    if (!this.model || !this.head || !this.settings)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before using the critic`);
    return { model: this.model, head: this.head, s: this.settings };
  }

  /** The trained parameters by name: the backbone (without an untied lm_head) and the value head. */
  private async parameters(): Promise<Map<string, Float32Array>> {
    const { model, head } = this.need();
    const [backbone, weight, bias] = await Promise.all([
      model.getParameters(),
      head.weight.data() as Promise<Float32Array>,
      head.bias.data() as Promise<Float32Array>,
    ]);
    const out = new Map([...backbone].filter(([name]) => name !== "lm_head.weight"));
    out.set("score.weight", weight);
    out.set("score.bias", bias);
    return out;
  }

  private setParameters(values: Map<string, Float32Array>): void {
    const { model, head } = this.need();
    const backbone = new Map([...values].filter(([name]) => !name.startsWith("score.")));
    model.setParameters(backbone);
    tf.tidy(() => {
      head.weight.assign(tf.tensor2d(values.get("score.weight")!, head.weight.shape as [number, number]));
      head.bias.assign(tf.tensor1d(values.get("score.bias")!));
    });
  }

  /**
   * Values of the response tokens [B, R] of a trimmed token batch (`kept` response columns, zeros
   * after): the head on the hidden state one position earlier.
   */
  private responseValues(tb: TokenBatch, P: number, kept: number, R: number): tf.Tensor2D {
    const { model, head } = this.need();
    if (P < 1) throw new WorkerStateError("the critic needs at least one prompt token per row");
    const B = tb.batch;
    const L = tb.length;
    const h = model.config.hiddenSize;
    const hidden = model.forward(tb, { hidden: true }) as tf.Tensor3D;
    const v = tf.add(tf.matMul(tf.reshape(hidden, [B * L, h]), head.weight), head.bias);
    return padColumns(tf.slice(tf.reshape(v, [B, L]), [0, P - 1], [B, kept]) as tf.Tensor2D, R);
  }

  /** Critic values of the responses (no gradient): values [B, R]. */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_PROTO })
  async computeValues(data: DataProto): Promise<DataProto> {
    const { s } = this.need();
    const R = data.tensor("responses").shape[1]!;
    const groups = microBatches(data, s.forwardMicro, s.forwardMaxTokens);
    const [values] = await byMicroBatch(data, groups, R, async (part) => {
      const { tb, P, kept } = responseTokenBatch(part);
      const v = tf.tidy(() => this.responseValues(tb, P, kept, R));
      try {
        return [(await v.data()) as Float32Array];
      } finally {
        v.dispose();
      }
    });
    return DataProto.fromDict({ values: { data: values!, shape: [data.length, R] } });
  }

  /**
   * Value-loss update on this rank's rows (laid out with layoutForMiniBatches for critic mini-batches).
   * Needs input_ids, attention_mask, responses, values (from computeValues), returns and a loss mask
   * (loss_mask, else response_mask). Returns veRL's critic metrics (identical on every rank).
   */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_METRIC })
  async updateCritic(data: DataProto): Promise<Record<string, number>> {
    this.injectFault("updateCritic");
    const { head, model, s } = this.need();
    const vars = model.variables().filter((_, i) => model.specs[i]!.name !== "lm_head.weight");
    const nameOf = new Map(model.variables().map((v, i) => [v.name, model.specs[i]!.name]));
    vars.push(head.weight, head.bias);
    nameOf.set(head.weight.name, "score.weight");
    nameOf.set(head.bias.name, "score.bias");
    // per mini-batch sums: vf loss, clipped tokens, vpred sum, tokens
    const run = await this.updateEpochs(
      data,
      {
        what: "critic.ppo_mini_batch_size x rollout.n",
        globalMiniRows: s.miniRows,
        micro: s.micro,
        maxTokens: s.maxTokens,
        epochs: s.epochs,
        lossAggMode: s.lossAggMode,
        optim: s.optim,
        gradClip: s.gradClip,
        sums: 4,
      },
      vars,
      nameOf,
      (step) => {
        const { part, tokens, weights, sums: mb } = step;
        const { tb, P, R, kept } = tokens;
        const old = part.tensor("values");
        const returns = part.tensor("returns");
        const vpreds = this.responseValues(tb, P, kept, R);
        // the weights carry the global aggregation: sum-norm times R is the weighted sum
        const loss = tf.mul(
          valueLossTf(vpreds, old, returns, weights, s.cliprange, "seq-mean-token-sum-norm"),
          R,
        );
        // token-level metrics with the plain mask (host side), once the backward pass has run
        const mask = part.batch.loss_mask ?? part.tensor("response_mask");
        const f = (t: BatchTensor) => ({
          data: Float32Array.from(t.data as ArrayLike<number>),
          shape: t.shape,
        });
        step.afterBackward([loss, vpreds], ([lossHost, vpredsHost]) => {
          mb[0]! += lossHost![0]!;
          const host = { data: vpredsHost!, shape: [part.length, R] };
          const m = computeValueLoss(host, f(returns), f(old), f(mask), s.cliprange);
          let tok = 0;
          for (let i = 0; i < host.data.length; i++) {
            if (Number(mask.data[i]) === 0) continue;
            mb[2]! += host.data[i]!;
            tok++;
          }
          mb[1]! += m.vfClipfrac * tok;
          mb[3]! += tok;
        });
        return loss as tf.Scalar;
      },
    );
    const tok = Math.max(1, run.sums[3]!);
    const metrics: Record<string, number> = {
      "critic/vf_loss": run.sums[0]! / run.miniBatches,
      "critic/vf_clipfrac": run.sums[1]! / tok,
      "critic/vpred_mean": run.sums[2]! / tok,
      "critic/grad_norm": run.gradNorm,
      "critic/lr": run.lr,
    };
    if (run.skipped) metrics["critic/skipped_updates"] = run.skipped;
    return metrics;
  }

  protected currentParameters(): Promise<Map<string, Float32Array>> {
    return this.parameters();
  }

  protected applyParameters(values: Map<string, Float32Array>): void {
    this.setParameters(values);
  }
}
