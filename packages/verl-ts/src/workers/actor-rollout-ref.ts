/**
 * veRL's ActorRolloutRefWorker, FSDP-style, for the hybrid engine: one process per bundle holds the actor
 * (trained), the rollout (generation on the actor's gathered weights, colocated in the same process) and
 * the reference policy (a frozen copy).
 *
 * Sharding and the global loss aggregation: see fsdp.ts (shared with the critic).
 */
import * as tf from "@tensorflow/tfjs";
import type { Tool } from "@torl-ts/sandbox";
import { computePolicyLoss } from "../algorithms/policy-loss.js";
import { aggLossTf, getPolicyLoss, klLossTf } from "../algorithms/tf-ops.js";
import type { TrainerConfig } from "../config/types.js";
import { selectBackend } from "../models/backend.js";
import { computeLogProbs, tokenLogProbs } from "../models/logprobs.js";
import { loadPretrained } from "../models/pretrained.js";
import type { Qwen2Model } from "../models/qwen2.js";
import type { Tokenizer } from "../models/tokenizer.js";
import { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { rolloutTrainingBatch } from "../rollout/batch.js";
import { tirRollout } from "../rollout/tir.js";
import { Dispatch, register } from "../single-controller/decorator.js";
import {
  asFloat32,
  byMicroBatch,
  microBatches,
  padColumns,
  responseTokenBatch,
  rowColumns,
  ShardedParameters,
  ShardedWorker,
  type ShardInfo,
  WorkerStateError,
} from "./fsdp.js";
import type { OptimSettings } from "./optim.js";

/**
 * Where a worker process finds the rollout's tool: a module URL and an export that is either a class
 * (constructed with `args`) or a function (called with `args`, may be async) returning a Tool.
 */
export interface ToolSpec {
  module: string;
  exportName?: string;
  args?: unknown[];
}

export interface ActorRolloutRefOptions {
  /** The trainer config (plain object, as loaded). */
  config: TrainerConfig;
  /** Which parts this worker holds: actor + rollout + ref (default), actor + rollout, or ref only. */
  role?: "actor_rollout_ref" | "actor_rollout" | "ref";
  /** The rollout's tool; null or absent for plain generation. */
  tool?: ToolSpec | null;
}

export class ActorRolloutRefWorker extends ShardedWorker {
  private readonly cfg: TrainerConfig;
  private readonly role: NonNullable<ActorRolloutRefOptions["role"]>;
  private readonly toolSpec: ToolSpec | null;
  private model?: Qwen2Model;
  private ref?: Qwen2Model;
  private tokenizer?: Tokenizer;
  private tool?: Tool;

  constructor(options: ActorRolloutRefOptions) {
    super();
    this.cfg = options.config;
    this.role = options.role ?? "actor_rollout_ref";
    this.toolSpec = options.tool ?? null;
  }

  private get isActor(): boolean {
    return this.role !== "ref";
  }
  private get hasRef(): boolean {
    return this.role !== "actor_rollout";
  }

  /** Loads the model (every rank from the same directory), shards it and sets up the optimizer. */
  @register({ dispatchMode: Dispatch.ONE_TO_ALL })
  async initModel(): Promise<ShardInfo> {
    const backend = await selectBackend({ log: null });
    this.backendName = backend.name;
    const path = this.cfg.actor_rollout_ref.model.path;
    if (!path)
      throw new WorkerStateError("actor_rollout_ref.model.path is not set (an HF model directory is needed)");
    const loaded = loadPretrained(path, { trainable: this.isActor });
    this.tokenizer = loaded.tokenizer;
    if (this.isActor) {
      this.model = loaded.model;
      this.sharded = new ShardedParameters(
        await this.model.getParameters(),
        this.ctx,
        this.cfg.actor_rollout_ref.actor.optim as OptimSettings,
      );
      if (this.hasRef) this.ref = loadPretrained(path, { trainable: false }).model;
    } else {
      this.ref = loaded.model;
    }
    return this.shardInfo();
  }

  protected override numParameters(): number {
    return this.sharded?.layout.total ?? this.ref?.numParameters() ?? 0;
  }

  private needModel(): Qwen2Model {
    if (!this.model || !this.tokenizer)
      throw new WorkerStateError(`rank ${this.rank}: call initModel before using the actor`);
    return this.model;
  }

  private async getTool(): Promise<Tool | undefined> {
    if (!this.toolSpec) return undefined;
    if (!this.tool) {
      const mod = (await import(this.toolSpec.module)) as Record<string, unknown>;
      const name = this.toolSpec.exportName ?? "default";
      const exp = mod[name];
      if (typeof exp !== "function")
        throw new WorkerStateError(`tool module ${this.toolSpec.module} has no export "${name}"`);
      const args = this.toolSpec.args ?? [];
      const isClass = /^class[\s{]/.test(Function.prototype.toString.call(exp));
      this.tool = isClass
        ? (new (exp as new (...a: unknown[]) => Tool)(...args) as Tool)
        : await (exp as (...a: unknown[]) => Tool | Promise<Tool>)(...args);
    }
    return this.tool;
  }

  /**
   * Rollout on the gathered weights (ToRL's TIR generation; plain generation when C = 0 or without a
   * tool). In: input_ids / attention_mask [B, P] left-padded prompts. metaInfo: `seed` (this rank
   * samples with seed + rank * 1_000_003), `validate` (use rollout.val_kwargs: greedy by default).
   * Out: `rolloutTrainingBatch` of the samples (prompts, responses, input_ids, attention_mask,
   * position_ids, response_mask, tool_output_mask, loss_mask = response_mask & tool_output_mask when
   * actor.mask_tool_output, execution_passes, num_tool_calls, num_tool_passes; non-tensor
   * response_text, finish_reason, tool_observations).
   */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_PROTO })
  async generateSequences(prompts: DataProto): Promise<DataProto> {
    this.injectFault("generateSequences");
    const model = this.needModel();
    const tok = this.tokenizer!;
    const ro = this.cfg.actor_rollout_ref.rollout;
    const ids = prompts.tensor("input_ids");
    const attn = prompts.tensor("attention_mask");
    const [B, P] = ids.shape as [number, number];
    const rows: number[][] = [];
    for (let b = 0; b < B; b++) {
      const r: number[] = [];
      for (let t = 0; t < P; t++) if (Number(attn.data[b * P + t]) !== 0) r.push(Number(ids.data[b * P + t]));
      rows.push(r);
    }
    const validate = prompts.metaInfo.validate === true;
    const kw = validate ? ro.val_kwargs : ro;
    const greedy = validate ? !ro.val_kwargs.do_sample : !ro.do_sample;
    const seedBase = Number(prompts.metaInfo.seed ?? ro.seed) >>> 0;
    const tool = ro.num_llm_calls_available > 0 ? await this.getTool() : undefined;
    const R = ro.response_length;
    const out = await tirRollout(model, tok, rows, {
      tool,
      numLlmCallsAvailable: tool ? ro.num_llm_calls_available : 0,
      maxResponseLength: R,
      temperature: greedy ? 0 : kw.temperature,
      topP: kw.top_p,
      topK: Math.max(kw.top_k, 0),
      seed: (seedBase + this.rank * 1_000_003) >>> 0,
      maxBatchSize: Math.max(1, ro.max_num_seqs as number),
    });
    return rolloutTrainingBatch(out.samples, {
      padTokenId: tok.padTokenId,
      promptLength: P,
      responseLength: R,
      maskToolOutput: this.cfg.actor_rollout_ref.actor.mask_tool_output,
    });
  }

  /** Micro-batches of a log-prob pass: log_prob_micro_batch_size_per_gpu rows, or a token budget. */
  private logProbGroups(key: "rollout" | "ref", data: DataProto): number[][] {
    const ar = this.cfg.actor_rollout_ref;
    const section = ar[key] as {
      log_prob_micro_batch_size_per_gpu: number | null;
      log_prob_use_dynamic_bsz?: boolean;
      log_prob_max_token_len_per_gpu?: number;
    };
    const rows = section.log_prob_micro_batch_size_per_gpu ?? ar.actor.ppo_micro_batch_size_per_gpu ?? 8;
    return microBatches(
      data,
      rows,
      section.log_prob_use_dynamic_bsz ? section.log_prob_max_token_len_per_gpu : null,
    );
  }

  /** Log-probs (and entropy) of the responses under `model`, [B, R] each, micro-batched. */
  private responseLogProbs(model: Qwen2Model, data: DataProto, key: "rollout" | "ref", withEntropy: boolean) {
    const R = data.tensor("responses").shape[1]!;
    const temperature = this.cfg.actor_rollout_ref.rollout.temperature || 1;
    return byMicroBatch(data, this.logProbGroups(key, data), R, async (part) => {
      const { tb, P, kept } = responseTokenBatch(part);
      const r = await computeLogProbs(model, tb, { temperature, withEntropy, microBatchSize: tb.batch });
      const cols = (full: Float32Array) => rowColumns(full, tb.batch, tb.length, P, kept, R);
      return withEntropy ? [cols(r.logProbs), cols(r.entropy!)] : [cols(r.logProbs)];
    });
  }

  /** Old log-probs and entropy of the responses under the current actor: old_log_probs, entropys [B, R]. */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_PROTO })
  async computeLogProb(data: DataProto): Promise<DataProto> {
    const [logProbs, entropy] = await this.responseLogProbs(this.needModel(), data, "rollout", true);
    const shape = [data.length, data.tensor("responses").shape[1]!];
    return DataProto.fromDict({
      old_log_probs: { data: logProbs!, shape },
      entropys: { data: entropy!, shape },
    });
  }

  /** Log-probs of the responses under the frozen reference policy: ref_log_prob [B, R]. */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_PROTO })
  async computeRefLogProb(data: DataProto): Promise<DataProto> {
    if (!this.ref) throw new WorkerStateError(`rank ${this.rank}: this worker holds no reference model`);
    const [logProbs] = await this.responseLogProbs(this.ref, data, "ref", false);
    return DataProto.fromDict({
      ref_log_prob: { data: logProbs!, shape: [data.length, data.tensor("responses").shape[1]!] },
    });
  }

  /**
   * PPO update of the actor on this rank's rows (see the file comment for the global aggregation). The
   * driver lays rows out with `layoutForMiniBatches` so that every rank's mini-batch j is its part of
   * global mini-batch j. Needs input_ids, attention_mask, responses, old_log_probs, advantages and a
   * loss mask (loss_mask, else response_mask); ref_log_prob when actor.use_kl_loss. Returns the metrics
   * (identical on every rank).
   */
  @register({ dispatchMode: Dispatch.DP_COMPUTE_METRIC })
  async updateActor(data: DataProto): Promise<Record<string, number>> {
    this.injectFault("updateActor");
    const model = this.needModel();
    const ar = this.cfg.actor_rollout_ref;
    const a = ar.actor;
    const W = this.worldSize;
    const lossFn = getPolicyLoss(String((a.policy_loss as { loss_mode?: string })?.loss_mode ?? "vanilla"));
    const temperature = ar.rollout.temperature || 1;
    const vars = model.variables();
    const nameOf = new Map(vars.map((v, i) => [v.name, model.specs[i]!.name]));
    const useKl = a.use_kl_loss;
    const entCoef = a.entropy_coeff;
    const clip = {
      clipRatio: a.clip_ratio,
      clipRatioLow: a.clip_ratio_low,
      clipRatioHigh: a.clip_ratio_high,
      clipRatioC: a.clip_ratio_c,
    };
    // Per-mini-batch sums: pg loss, kl loss, entropy loss, clipfrac*tok, ppo_kl*tok, clipfrac_lower*tok, tokens.
    const run = await this.updateEpochs(
      data,
      {
        what: "actor.ppo_mini_batch_size x rollout.n",
        globalMiniRows: a.ppo_mini_batch_size * ar.rollout.n,
        micro:
          a.ppo_micro_batch_size_per_gpu ??
          (a.ppo_micro_batch_size ? Math.max(1, Math.floor(a.ppo_micro_batch_size / W)) : null),
        maxTokens: a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : null,
        epochs: a.ppo_epochs,
        lossAggMode: a.loss_agg_mode,
        optim: a.optim as OptimSettings,
        gradClip: a.grad_clip,
        sums: 7,
      },
      vars,
      nameOf,
      (step) => {
        const { part, tokens, weights: w, sums: mb } = step;
        const { tb, P, R, kept } = tokens;
        const b = part.length;
        const old = part.tensor("old_log_probs");
        const adv = part.tensor("advantages");
        const sc = tokenLogProbs(model, tb, { temperature, withEntropy: entCoef !== 0 });
        const logp = padColumns(tf.slice(sc.logProbs, [0, P], [b, kept]) as tf.Tensor2D, R);
        const pl = lossFn(old, logp, adv, w, { ...clip, lossAggMode: "seq-mean-token-sum-norm" });
        // sum-norm divides the weighted sum by R; undo it: the weights carry the normalisation.
        const pg = tf.mul(pl.pgLoss, R);
        let loss: tf.Tensor = pg;
        // Read after the backward pass: pg, then entropy and kl losses when present, then logp.
        const scalars: [number, tf.Tensor][] = [[0, pg]];
        if (entCoef !== 0 && sc.entropy) {
          const ent = padColumns(tf.slice(sc.entropy, [0, P], [b, kept]) as tf.Tensor2D, R);
          const el = tf.mul(aggLossTf(ent, w, "seq-mean-token-sum-norm"), R);
          scalars.push([2, el]);
          loss = tf.sub(loss, tf.mul(el, entCoef));
        }
        if (useKl) {
          const refLp = part.tensor("ref_log_prob");
          const kl = tf.mul(klLossTf(logp, refLp, w, a.kl_loss_type, "seq-mean-token-sum-norm"), R);
          scalars.push([1, kl]);
          loss = tf.add(loss, tf.mul(kl, a.kl_loss_coef));
        }
        // token-level metrics with the plain mask (host side)
        const pmask = part.batch.loss_mask ?? part.tensor("response_mask");
        const mf: BatchTensor<Float32Array> = {
          data: Float32Array.from(pmask.data as ArrayLike<number>),
          shape: [b, R],
        };
        let tok = 0;
        for (const x of mf.data) tok += x;
        step.afterBackward([...scalars.map(([, t]) => t), logp], (host) => {
          scalars.forEach(([at], i) => {
            mb[at]! += host[i]![0]!;
          });
          const m = computePolicyLoss(
            { data: asFloat32(old), shape: [b, R] },
            { data: host[scalars.length]!, shape: [b, R] },
            { data: asFloat32(adv), shape: [b, R] },
            mf,
            clip,
          );
          mb[3]! += m.pgClipfrac * tok;
          mb[4]! += m.ppoKl * tok;
          mb[5]! += m.pgClipfracLower * tok;
          mb[6]! += tok;
        });
        return loss as tf.Scalar;
      },
    );
    const { sums, miniBatches: minis } = run;
    const tok = Math.max(1, sums[6]!);
    const metrics: Record<string, number> = {
      "actor/pg_loss": sums[0]! / minis,
      "actor/pg_clipfrac": sums[3]! / tok,
      "actor/ppo_kl": sums[4]! / tok,
      "actor/pg_clipfrac_lower": sums[5]! / tok,
      "actor/grad_norm": run.gradNorm,
      "actor/lr": run.lr,
    };
    if (entCoef !== 0) metrics["actor/entropy_loss"] = sums[2]! / minis;
    if (useKl) {
      metrics["actor/kl_loss"] = sums[1]! / minis;
      metrics["actor/kl_coef"] = a.kl_loss_coef;
    }
    if (run.skipped) metrics["actor/skipped_updates"] = run.skipped;
    return metrics;
  }

  protected currentParameters(): Promise<Map<string, Float32Array>> {
    return this.needModel().getParameters();
  }

  protected applyParameters(values: Map<string, Float32Array>): void {
    this.needModel().setParameters(values);
  }
}

/**
 * Reorders a batch so that DP_COMPUTE_PROTO's contiguous chunking gives rank r, as its local mini-batch
 * j, the r-th slice of global mini-batch j (rows [j M, (j+1) M) of the batch, M = miniBatchRows).
 * With this layout the set of global mini-batches, and so the update, does not depend on worldSize.
 */
export function layoutForMiniBatches(data: DataProto, worldSize: number, miniBatchRows: number): DataProto {
  const B = data.length;
  if (worldSize === 1) return data;
  if (miniBatchRows % worldSize !== 0 || B % miniBatchRows !== 0) {
    throw new WorkerStateError(
      `cannot lay out ${B} rows in mini-batches of ${miniBatchRows} over ${worldSize} ranks`,
    );
  }
  const per = miniBatchRows / worldSize;
  const minis = B / miniBatchRows;
  const idx: number[] = [];
  for (let r = 0; r < worldSize; r++)
    for (let j = 0; j < minis; j++) for (let i = 0; i < per; i++) idx.push(j * miniBatchRows + r * per + i);
  return data.selectRows(idx);
}
