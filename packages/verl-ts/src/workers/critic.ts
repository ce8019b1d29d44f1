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
 * Its backbone is sharded at rest, as FSDP keeps a model between passes: each phase (values, update)
 * all-gathers the weights unit by unit when it begins (only those around the layers for an update
 * with gradient checkpointing, which gathers each layer for itself) and frees them when it ends, so
 * between phases a rank holds its float32 shard, the AdamW state and the value head (h + 1 values).
 *
 * With LoRA (critic.model.lora_rank > 0, veRL's keys, checked by the actor's rules) the backbone is
 * frozen, sharded at rest in float32 like the actor's base (frozen-shards.ts), and the trained, sharded
 * parameters are the adapters and the value head (trained in full: it is new, h + 1 values). The
 * checkpoint then holds the adapters and the head.
 *
 * Colocate it with the actor (`WorkerGroup.createColocated(pool, {actor_rollout_ref, critic})`) so both
 * share one process and collective group per bundle; the trainer does that when adv_estimator is gae.
 */
import * as tf from "@tensorflow/tfjs";
import type { LossAggMode } from "../algorithms/loss-aggregation.js";
import { computeValueLoss } from "../algorithms/policy-loss.js";
import { valueLossTf } from "../algorithms/tf-ops.js";
import { miniBatchRows } from "../config/derived.js";
import type { TrainerConfig } from "../config/types.js";
import { selectBackend } from "../models/backend.js";
import { initialAdapterValues, type LoraConfig, loraConfigOf } from "../models/lora.js";
import { loadModelValues } from "../models/pretrained.js";
import { Qwen2Model } from "../models/qwen2.js";
import type { TokenBatch } from "../models/token-batch.js";
import { uid } from "../models/variable-names.js";
import { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { gaussian, mulberry32 } from "../random.js";
import { Dispatch, type Registrations } from "../single-controller/registration.js";
import { FrozenShards } from "./frozen-shards.js";
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
import { isLayerUnit } from "./layer-sharding.js";
import type { OptimSettings } from "./optim.js";
import type { FlatUnit } from "./sharded-parameters.js";

export interface CriticOptions {
  config: TrainerConfig;
}

/** A critic's memory as memoryInfo reports it (bytes). */
export interface CriticMemory {
  rank: number;
  /** tf.memory().numBytes: every tensor of the process. */
  tensorBytes: number;
  /** The backbone's full weights held now (0 between phases: sharded at rest). */
  weightBytes: number;
  /** The FSDP state on this rank (host arrays): float32 parameter shard + AdamW moments. */
  shardBytes: number;
  /** With LoRA: the frozen backbone's shard on this rank (float32); else 0. */
  baseShardBytes: number;
  /** Of baseShardBytes, the bytes in /dev/shm (shared memory, outside the resident set; FrozenShards). */
  publishedShardBytes: number;
  /** With LoRA: the adapters' parameters (trained with the value head); else 0. */
  adapterParameters: number;
  /** Peak resident set of the process so far. */
  peakRssBytes: number;
}

/** Seed of the value head's initial weights (every rank draws the same). */
const HEAD_SEED = 0x5c0e;
/** Seed of the LoRA adapters' initial A (every rank draws the same). */
const ADAPTER_SEED = 0x5c0f;
/** The language-model head: not part of the value model. */
const LM_HEAD = "lm_head.weight";

/** Whether a parameter is the value head's (score.weight, score.bias). */
const isHead = (name: string) => name.startsWith("score.");

/** The critic's part of the config, with the defaults veRL derives filled in. */
interface CriticSettings {
  path: string;
  /** critic.model.enable_gradient_checkpointing: recompute each layer's activations in the backward. */
  gradientCheckpointing: boolean;
  /** critic.model.lora_rank / lora_alpha / target_modules; null: full fine-tuning. */
  lora: LoraConfig | null;
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
  lossAggMode: LossAggMode;
}

export function criticSettings(cfg: TrainerConfig, worldSize: number): CriticSettings {
  const c = cfg.critic;
  const path = c.model.path ?? cfg.actor_rollout_ref.model.path;
  if (!path) throw new WorkerStateError("critic.model.path (or actor_rollout_ref.model.path) is not set");
  const micro = perWorkerRows(c.ppo_micro_batch_size_per_gpu, c.ppo_micro_batch_size, worldSize);
  return {
    path,
    gradientCheckpointing: c.model.enable_gradient_checkpointing,
    lora: loraConfigOf(c.model, "critic.model"),
    optim: c.optim as OptimSettings,
    miniRows: miniBatchRows(cfg, "critic"),
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
  static override readonly registered = {
    ...ShardedWorker.registered,
    initModel: Dispatch.ONE_TO_ALL,
    computeValues: Dispatch.DP_COMPUTE_PROTO,
    updateCritic: Dispatch.DP_COMPUTE_METRIC,
    memoryInfo: Dispatch.ONE_TO_ALL,
  } satisfies Registrations<CriticWorker>;

  private readonly cfg: TrainerConfig;
  private settings?: CriticSettings;
  private model?: Qwen2Model;
  private head?: { weight: tf.Variable; bias: tf.Variable };
  /** With LoRA: the frozen backbone, sharded at rest; `sharded` then holds the adapters and the head. */
  private baseShards?: FrozenShards;

  constructor(options: CriticOptions) {
    super();
    this.cfg = options.config;
  }

  /**
   * Loads the backbone (with LoRA: frozen, with adapters), adds the value head, shards the trained
   * parameters and sets up AdamW.
   */
  async initModel(): Promise<ShardInfo> {
    await this.loadModel();
    // every rank read the whole model's values to keep its shard: their memory goes back to the kernel
    this.releaseTransients();
    return this.shardInfo();
  }

  private async loadModel(): Promise<void> {
    const backend = await selectBackend({ log: null });
    this.backendName = backend.name;
    this.backendLine = backend.line;
    const s = criticSettings(this.cfg, this.worldSize);
    this.settings = s;
    const { config, values } = loadModelValues(s.path);
    if (s.lora) {
      const adapters = initialAdapterValues(config, s.lora, ADAPTER_SEED);
      this.model = new Qwen2Model(config, values, { lora: { config: s.lora, values: adapters } });
      this.baseShards = new FrozenShards(
        new Map([...values].filter(([name]) => name !== LM_HEAD)),
        this.ctx,
        "float32",
      );
    } else this.model = new Qwen2Model(config, values, { trainable: true });
    this.model.gradientCheckpointing = s.gradientCheckpointing;
    const h = this.model.config.hiddenSize;
    const rng = mulberry32(HEAD_SEED);
    const w = new Float32Array(h);
    for (let i = 0; i < h; i++) w[i] = gaussian(rng) * 0.02;
    this.head = {
      weight: tf.variable(tf.tensor2d(w, [h, 1]), true, `score.weight#${uid()}`),
      bias: tf.variable(tf.zeros([1]), true, `score.bias#${uid()}`),
    };
    this.sharded = new ShardedParameters(await this.parameters(), this.ctx, s.optim);
    this.model.evictWeights();
  }

  /** What this process holds now (see CriticMemory). */
  memoryInfo(): CriticMemory {
    return {
      rank: this.rank,
      tensorBytes: tf.memory().numBytes,
      weightBytes: this.model?.weightBytes() ?? 0,
      shardBytes: (this.sharded?.params.byteLength ?? 0) + (this.sharded?.optim.stateBytes ?? 0),
      baseShardBytes: this.baseShards?.bytes ?? 0,
      publishedShardBytes: this.baseShards?.publishedBytes ?? 0,
      adapterParameters: this.model?.lora?.numParameters() ?? 0,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
    };
  }

  /** Whether a trained parameter is held now (the value head always is). */
  private holds(name: string): boolean {
    return isHead(name) || this.need().model.holdsWeight(name);
  }

  /**
   * A phase begins: the units `which` selects are all-gathered from the shards (those held already are
   * skipped). Every rank calls it at the same point.
   */
  private async phaseBegins(which: (unit: FlatUnit) => boolean = () => true): Promise<void> {
    const { model } = this.need();
    // LoRA: the frozen backbone first (all of it: FSDP per layer gathers the adapters only)
    if (
      this.baseShards &&
      !model.specs.every((spec) => spec.name === LM_HEAD || model.holdsWeight(spec.name))
    )
      await this.baseShards.gatherInto(model);
    await this.gatherWeightsInto(
      model,
      // the head's variables always exist but miss the update's last step (afterOptimizerStep): its
      // unit is gathered at every phase (with LoRA it is a unit of its own, h + 1 values)
      (u) => which(u) && u.entries.some((e) => isHead(e.name) || !this.holds(e.name)),
      (values) => this.setParameters(values),
    );
  }

  /** A phase ended: the backbone's weights are freed (the shards hold them). */
  private phaseEnded(): void {
    this.need().model.evictWeights();
  }

  private need(): { model: Qwen2Model; head: { weight: tf.Variable; bias: tf.Variable }; s: CriticSettings } {
    if (!this.model || !this.head || !this.settings)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before using the critic`);
    return { model: this.model, head: this.head, s: this.settings };
  }

  /**
   * The names of the trained backbone parameters: its weights without an untied lm_head, or with LoRA
   * the adapters.
   */
  private backboneNames(): string[] {
    return this.need()
      .model.trainedSpecs.map((spec) => spec.name)
      .filter((name) => name !== LM_HEAD);
  }

  /** The trained parameters by name: the backbone's (backboneNames) and the value head. */
  private async parameters(): Promise<Map<string, Float32Array>> {
    const { model, head } = this.need();
    const names = this.backboneNames();
    const [out, weight, bias] = await Promise.all([
      model.getParameters(names),
      head.weight.data() as Promise<Float32Array>,
      head.bias.data() as Promise<Float32Array>,
    ]);
    out.set("score.weight", weight);
    out.set("score.bias", bias);
    return out;
  }

  /** Puts parameters by name into the backbone and the value head (those given; others keep theirs). */
  private setParameters(values: Map<string, Float32Array>): void {
    const { model, head } = this.need();
    const backbone = new Map([...values].filter(([name]) => !isHead(name)));
    model.setParameters(backbone);
    const weight = values.get("score.weight");
    const bias = values.get("score.bias");
    tf.tidy(() => {
      if (weight) head.weight.assign(tf.tensor2d(weight, head.weight.shape as [number, number]));
      if (bias) head.bias.assign(tf.tensor1d(bias));
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
  async computeValues(data: DataProto): Promise<DataProto> {
    const { s } = this.need();
    const R = data.tensor("responses").shape[1]!;
    const groups = microBatches(data, s.forwardMicro, s.forwardMaxTokens);
    await this.phaseBegins();
    let values: Float32Array | undefined;
    try {
      [values] = await byMicroBatch(data, groups, R, async (part) => {
        const { tb, P, kept } = responseTokenBatch(part);
        const v = tf.tidy(() => this.responseValues(tb, P, kept, R));
        try {
          return [(await v.data()) as Float32Array];
        } finally {
          v.dispose();
        }
      });
    } finally {
      this.phaseEnded();
    }
    return DataProto.fromDict({ values: { data: values!, shape: [data.length, R] } });
  }

  /**
   * Value-loss update on this rank's rows (laid out with layoutForMiniBatches for critic mini-batches).
   * Needs input_ids, attention_mask, responses, values (from computeValues), returns and a loss mask
   * (loss_mask, else response_mask). Returns veRL's critic metrics (identical on every rank).
   */
  async updateCritic(data: DataProto): Promise<Record<string, number>> {
    this.injectFault("updateCritic");
    const { model } = this.need();
    // FSDP per layer (gradient checkpointing) gathers each decoder layer for itself
    await this.phaseBegins(model.gradientCheckpointing ? (u) => !isLayerUnit(u) : undefined);
    try {
      return await this.updateWith(data);
    } finally {
      this.phaseEnded();
    }
  }

  /** updateCritic on the gathered weights. */
  private async updateWith(data: DataProto): Promise<Record<string, number>> {
    const { head, model, s } = this.need();
    const held = this.backboneNames().filter((name) => model.holdsWeight(name));
    const vars = model.variables(held);
    const nameOf = new Map(vars.map((v, i) => [v.name, held[i]!]));
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
      model,
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

  protected async currentParameters(): Promise<Map<string, Float32Array>> {
    await this.phaseBegins();
    try {
      return await this.parameters();
    } finally {
      this.phaseEnded();
    }
  }

  /** Sharded at rest the shards are all there is (a checkpoint loaded into them): nothing to put in the model. */
  protected applyParameters(_values: Map<string, Float32Array>): void {}

  /** The new parameters into the units the model holds (none after the update's last step). */
  protected override numParameters(): number {
    // with LoRA the value model computes with its backbone (no lm_head), the adapters and the head
    const model = this.model;
    if (!model?.lora) return super.numParameters();
    const lmHead = model.specs.find((spec) => spec.name === LM_HEAD);
    const head = model.config.hiddenSize + 1;
    return (
      model.numParameters() -
      (lmHead ? lmHead.shape[0]! * lmHead.shape[1]! : 0) +
      model.lora.numParameters() +
      head
    );
  }

  protected override async afterOptimizerStep(model: Qwen2Model, more: boolean): Promise<void> {
    if (!more) return;
    await this.gatherWeightsInto(
      model,
      (u) => u.entries.every((e) => this.holds(e.name)),
      (values) => this.setParameters(values),
    );
  }
}
