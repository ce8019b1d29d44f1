/**
 * The SFT trainer's worker: the FSDP actor worker (ActorRolloutRefWorker: the same model loading,
 * sharding at rest, AdamW on the shard, checkpoints) with two more methods, the supervised update and
 * the validation loss. Its config is the PPO trainer config sftWorkerConfig builds from the SFT keys.
 *
 * The loss of a step is the negative log-likelihood of the trained tokens (loss_mask), averaged over
 * every trained token of the step's global batch, whatever the ranks and micro-batches: each token
 * weighs 1 / (trained tokens of the global batch) (loss-weights.ts), so accumulating micro-batches gives
 * the gradient of one large batch. (veRL's SFT trainer averages per micro-batch, then over the
 * micro-batches; it matches this when every micro-batch has as many trained tokens.)
 */
import * as tf from "@tensorflow/tfjs";
import { asTfTensor } from "../algorithms/tf-ops.js";
import type { TrainerConfig } from "../config/types.js";
import { computeLogProbs, tokenLogProbs } from "../models/logprobs.js";
import { bitsOnlyVariables, type Qwen2Model } from "../models/qwen2.js";
import { DataProto } from "../protocol/data-proto.js";
import { Dispatch, type Registrations } from "../single-controller/registration.js";
import { ActorRolloutRefWorker } from "./actor-rollout-ref.js";
import { byMicroBatch, microBatches } from "./micro-batches.js";
import type { OptimSettings } from "./optim.js";
import { padColumns, responseTokenBatch, rowColumns } from "./rows.js";

export interface SftWorkerOptions {
  /** The workers' config (sftWorkerConfig): the model, the optimizer, actor.ppo_mini_batch_size as the
   * global batch of a step and actor.ppo_micro_batch_size_per_gpu as the micro-batch. */
  config: TrainerConfig;
}

export class SftWorker extends ActorRolloutRefWorker {
  static override readonly registered = {
    ...ActorRolloutRefWorker.registered,
    updateSft: Dispatch.DP_COMPUTE_METRIC,
    sftLoss: Dispatch.DP_COMPUTE_PROTO,
  } satisfies Registrations<SftWorker>;

  private readonly sftConfig: TrainerConfig;

  constructor(options: SftWorkerOptions) {
    super({ config: options.config, role: "actor_rollout" });
    this.sftConfig = options.config;
  }

  /**
   * One optimizer step on this rank's rows of the global batch (input_ids, attention_mask, responses,
   * loss_mask: sftBatch's layout), in micro-batches whose gradients are accumulated. Returns
   * train/loss (the global token-mean NLL before the step), train/grad_norm, train/lr and
   * train/loss_tokens, identical on every rank.
   */
  async updateSft(data: DataProto): Promise<Record<string, number>> {
    this.injectFault("updateSft");
    return this.inUpdatePhase((model) => this.sftStep(model, data));
  }

  private async sftStep(model: Qwen2Model, data: DataProto): Promise<Record<string, number>> {
    const a = this.sftConfig.actor_rollout_ref.actor;
    // the trained parameters: every weight, or with LoRA the adapters (the base is frozen)
    const held = model.trainedSpecs.filter((s) => model.holdsWeight(s.name)).map((s) => s.name);
    // layer by layer every use of a bf16 matrix reads its bits: its tensor needs no float32 values
    const vars = model.gradientCheckpointing ? bitsOnlyVariables(model, held) : model.variables(held);
    const nameOf = new Map(vars.map((v, i) => [v.name, held[i]!]));
    const run = await this.updateEpochs(
      data,
      {
        what: "data.train_batch_size",
        globalMiniRows: a.ppo_mini_batch_size,
        micro: a.ppo_micro_batch_size_per_gpu,
        maxTokens: null,
        epochs: 1,
        lossAggMode: "token-mean",
        optim: a.optim as OptimSettings,
        gradClip: a.grad_clip,
        sums: 2,
      },
      model,
      vars,
      nameOf,
      (step) => {
        const { part, tokens, weights, sums } = step;
        const { tb, P, R, kept } = tokens;
        const sc = tokenLogProbs(model, tb);
        const logp = padColumns(tf.slice(sc.logProbs, [0, P], [part.length, kept]) as tf.Tensor2D, R);
        // the weights hold the global token mean: the ranks' losses add up to the batch's mean NLL
        const loss = tf.neg(tf.sum(tf.mul(logp, asTfTensor(weights)))) as tf.Scalar;
        const mask = part.tensor("loss_mask").data;
        for (let i = 0; i < mask.length; i++) sums[1]! += Number(mask[i]);
        step.afterBackward([loss], (host) => {
          sums[0]! += host[0]![0]!;
        });
        return loss;
      },
    );
    const metrics: Record<string, number> = {
      "train/loss": run.sums[0]!,
      "train/grad_norm": run.gradNorm,
      "train/lr": run.lr,
      "train/loss_tokens": run.sums[1]!,
    };
    if (run.skipped) metrics["train/skipped_updates"] = run.skipped;
    return metrics;
  }

  /**
   * The summed NLL of each row's trained tokens and their count, without gradients: nll, tokens [B]
   * (the driver divides the sums for val/loss).
   */
  async sftLoss(data: DataProto): Promise<DataProto> {
    const model = this.needModel();
    await this.actorPhaseBegins(model);
    const micro = this.sftConfig.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu ?? data.length;
    try {
      const [nll, tokens] = await byMicroBatch(data, microBatches(data, micro), 1, async (part) => {
        const { tb, P, R, kept } = responseTokenBatch(part);
        const r = await computeLogProbs(model, tb, { microBatchSize: tb.batch });
        const lp = rowColumns(r.logProbs, tb.batch, tb.length, P, kept, R);
        const mask = part.tensor("loss_mask").data;
        const sum = new Float32Array(part.length);
        const count = new Float32Array(part.length);
        for (let b = 0; b < part.length; b++)
          for (let t = 0; t < R; t++) {
            const m = Number(mask[b * R + t]);
            sum[b]! -= m * lp[b * R + t]!;
            count[b]! += m;
          }
        return [sum, count];
      });
      return DataProto.fromDict({
        nll: { data: nll!, shape: [data.length] },
        tokens: { data: tokens!, shape: [data.length] },
      });
    } finally {
      model.releaseComputeWeights();
      this.actorPhaseEnded(model);
    }
  }
}
