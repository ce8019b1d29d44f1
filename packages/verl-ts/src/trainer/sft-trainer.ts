/**
 * veRL's FSDP SFT trainer: supervised fine-tuning of a chat model on conversations, the loss on the
 * assistant turns only (data/sft-dataset.ts), on the PPO trainer's FSDP actor workers (SftWorker).
 *
 *   const summary = await new FSDPSFTTrainer(loadSftConfig({ files: ["sft.yaml"] })).fit();
 *
 * fit() reads and tokenizes every conversation first (a bad file, row or template stops it before
 * anything starts), then runs trainer.total_training_steps steps (or total_epochs epochs) of
 * data.train_batch_size conversations each, shuffled per epoch with trainer.seed; each step accumulates
 * the gradients of its micro-batches and takes one AdamW step with optim.lr under the warmup and
 * schedule of optim.*. It writes what the PPO trainer writes: runs/<name>/metrics.jsonl (train/loss,
 * train/lr, train/grad_norm, val/loss ...), a console line per step, the trainer.logger sinks,
 * config.yaml and summary.json, and checkpoints in veRL's layout every trainer.save_freq steps, from
 * which trainer.resume_mode=auto continues exactly where the run stopped (`torl export` turns one into
 * a model directory).
 */
import { join } from "node:path";
import { configToYaml, loadTrainerConfig } from "../config/load.js";
import { type ConfigNode, TrainerConfigError } from "../config/schema.js";
import type { SftConfig } from "../config/sft.js";
import type { TrainerConfig } from "../config/types.js";
import { PromptLoader } from "../data/loader.js";
import {
  readSftDataset,
  type SftConversation,
  type SftExample,
  sftBatch,
  tokenizeConversation,
  truncateExample,
} from "../data/sft-dataset.js";
import { loadTokenizer, type Tokenizer } from "../models/tokenizer.js";
import { ChatTemplate } from "../rollout/chat-template.js";
import type { ResourcePool } from "../single-controller/resource-pool.js";
import { type BoundGroup, WorkerGroup, workerRole } from "../single-controller/worker-group.js";
import { layoutForMiniBatches } from "../workers/actor-rollout-ref.js";
import { importExternalLib } from "../workers/external-lib.js";
import { SftWorker } from "../workers/sft-worker.js";
import type { ShardInfo } from "../workers/sharded-worker.js";
import { CheckpointManager, checkpointToResume } from "./checkpoint.js";
import { saveHfMetadata } from "./export.js";
import { computeThroughputMetrics } from "./metrics.js";
import { openRunLog, type RunLog, type RunOptions, type StepMetrics } from "./run-log.js";
import { endTrainerWorkers, startRuntime, trainerResourcePool } from "./trainer-workers.js";

export interface SftTrainerOptions extends RunOptions {
  /** Conversations instead of reading data.train_files. */
  trainConversations?: SftConversation[];
  /** Conversations instead of reading data.val_files (an empty list: no validation). */
  valConversations?: SftConversation[];
}

/** summary.json of an SFT run. */
export interface SftSummary {
  name: string;
  run_dir: string;
  steps: number;
  total_steps: number;
  wall_seconds: number;
  train_examples: number;
  train_loss_initial: number | null;
  train_loss_final: number | null;
  val_loss_final: number | null;
  resumed_from_step: number | null;
  world_size: number;
  /** The latest checkpoint directory (null when none was saved). */
  checkpoint: string | null;
}

const SFT_WORKER_MODULE = new URL(
  `../workers/sft-worker${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`,
  import.meta.url,
).href;

type SftGroup = BoundGroup<typeof SftWorker>;

const DTYPES = { fp32: "float32", bf16: "bfloat16", fp16: "float16" } as const;

/**
 * The PPO trainer config the SFT trainer's workers are built from: the model, its dtype and gradient
 * checkpointing, the optimizer (AdamW with the schedule of optim.*, its total steps `totalSteps`),
 * gradient clipping, the batch and micro-batch, and the LoRA keys when the workers have them.
 */
export function sftWorkerConfig(cfg: SftConfig, totalSteps: number): TrainerConfig {
  const o = cfg.optim;
  const model: ConfigNode = {
    path: cfg.model.partial_pretrain,
    external_lib: cfg.model.external_lib,
    enable_gradient_checkpointing: cfg.model.enable_gradient_checkpointing,
    dtype: DTYPES[cfg.model.fsdp_config.model_dtype],
    // LoRA is a model setting of the workers
    lora_rank: cfg.model.lora_rank,
    lora_alpha: cfg.model.lora_alpha,
    target_modules: cfg.model.target_modules,
  };
  return loadTrainerConfig({
    values: {
      actor_rollout_ref: {
        model,
        actor: {
          // the update's global batch and micro-batch (SftWorker reads them here)
          ppo_mini_batch_size: cfg.data.train_batch_size,
          ppo_micro_batch_size_per_gpu: cfg.data.micro_batch_size_per_gpu,
          grad_clip: o.clip_grad,
          optim: {
            lr: o.lr,
            betas: o.betas,
            weight_decay: o.weight_decay,
            lr_warmup_steps: -1,
            lr_warmup_steps_ratio: o.lr_warmup_steps_ratio,
            warmup_style: o.lr_scheduler,
            min_lr_ratio: 0,
            total_training_steps: totalSteps,
          },
        },
      },
      trainer: {
        nnodes: cfg.trainer.nnodes,
        n_gpus_per_node: cfg.trainer.n_gpus_per_node,
        seed: cfg.trainer.seed,
        ray_wait_register_center_timeout: cfg.trainer.ray_wait_register_center_timeout,
      },
    },
  });
}

export class FSDPSFTTrainer {
  readonly config: SftConfig;
  private readonly opts: SftTrainerOptions;
  private readonly print: (line: string) => void;
  private readonly ckpt: CheckpointManager;
  private group?: SftGroup;
  private pool?: ResourcePool;
  private startedRuntime = false;
  private tokenizer!: Tokenizer;
  private loader!: PromptLoader<SftExample>;
  private valExamples: SftExample[] = [];
  private runLog?: RunLog;
  private summaryAcc: Record<string, number | null> = {};
  private wallBefore = 0;
  private resumedFrom: number | null = null;
  globalStep = 0;
  totalSteps = 0;

  constructor(config: SftConfig, options: SftTrainerOptions = {}) {
    this.config = structuredClone(config);
    this.opts = options;
    this.print = options.log ?? ((line) => console.log(line));
    this.ckpt = new CheckpointManager(config.trainer.default_local_dir);
  }

  get worldSize(): number {
    return this.config.trainer.nnodes * this.config.trainer.n_gpus_per_node;
  }

  /** The worker group (after fit started it). */
  get workerGroup(): SftGroup {
    if (!this.group) throw new Error("the workers start in fit()");
    return this.group;
  }

  /** Reads and tokenizes the conversations (every problem stops here, before any worker). */
  private async loadData(): Promise<void> {
    const cfg = this.config;
    const d = cfg.data;
    this.tokenizer = loadTokenizer(cfg.model.partial_pretrain!);
    const template = ChatTemplate.fromTokenizer(this.tokenizer);
    const options = {
      promptKey: d.prompt_key,
      responseKey: d.response_key,
      multiturn: d.multiturn,
    };
    const examples = (convs: SftConversation[]) =>
      convs.map((c) =>
        truncateExample(
          tokenizeConversation(c, template, this.tokenizer),
          d.max_length,
          d.truncation,
          `${c.file} (row ${c.row})`,
        ),
      );
    const train = examples(this.opts.trainConversations ?? (await readSftDataset(d.train_files!, options)));
    this.valExamples = examples(
      this.opts.valConversations ?? (d.val_files ? await readSftDataset(d.val_files, options) : []),
    );
    if (train.length < d.train_batch_size)
      throw new TrainerConfigError([
        {
          key: "data.train_batch_size",
          message: `data.train_batch_size is ${d.train_batch_size} but the training data has only ${train.length} conversations`,
        },
      ]);
    this.loader = new PromptLoader(train, {
      batchSize: d.train_batch_size,
      shuffle: true,
      seed: cfg.trainer.seed,
    });
    this.totalSteps =
      cfg.trainer.total_training_steps ?? this.loader.batchesPerEpoch * cfg.trainer.total_epochs;
    const tokens = train.reduce((s, e) => s + e.lossMask.reduce((a, b) => a + b, 0), 0);
    this.print(
      `[sft] ${train.length} training conversations (${tokens} trained tokens), ${this.valExamples.length} validation; ${this.totalSteps} steps`,
    );
  }

  /** The runtime and the workers, the model loaded and sharded. */
  private async startWorkers(): Promise<void> {
    const cfg = this.config;
    const workerCfg = sftWorkerConfig(cfg, this.totalSteps);
    const lib = workerCfg.actor_rollout_ref.model.external_lib;
    if (lib) await importExternalLib(lib);
    if (await startRuntime()) this.startedRuntime = true;
    this.pool = await trainerResourcePool(
      cfg.trainer,
      this.worldSize,
      this.opts.useGpu,
      `${cfg.trainer.experiment_name}-sft-pool`,
    );
    this.group = await WorkerGroup.create(
      this.pool,
      workerRole(SftWorker, { module: SFT_WORKER_MODULE }, { config: workerCfg }),
      {
        name: `sft-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
        collective: true,
        env: this.opts.workerEnv,
        readyTimeoutMs: cfg.trainer.ray_wait_register_center_timeout * 1000,
      },
    );
    const shards = (await this.group.initModel()) as ShardInfo[];
    for (const line of new Set(shards.map((s) => s.backendLine))) this.print(line);
  }

  /** Loads the checkpoint trainer.resume_mode asks for; returns its step (undefined: fresh start). */
  private async loadCheckpoint(): Promise<number | undefined> {
    const resume = checkpointToResume(this.ckpt, this.config.trainer);
    if (!resume) return undefined;
    const { dir, state } = resume;
    await this.workerGroup.loadCheckpoint(join(dir, "actor"));
    this.loader.loadState(state.loader);
    this.globalStep = state.globalStep;
    this.summaryAcc = { ...state.summary };
    this.wallBefore = state.wallSeconds;
    this.resumedFrom = state.globalStep;
    this.print(`[sft] resumed from ${dir} (step ${state.globalStep})`);
    return state.globalStep;
  }

  private async saveCheckpoint(wallSeconds: number): Promise<void> {
    const dir = this.ckpt.begin(this.globalStep);
    await this.workerGroup.saveCheckpoint(join(dir, "actor"));
    // config and tokenizer beside the shards (with LoRA, PEFT's adapter config), for `torl export`
    saveHfMetadata(this.config.model.partial_pretrain!, join(dir, "actor"), this.config.model);
    this.ckpt.commit(
      this.globalStep,
      {
        globalStep: this.globalStep,
        loader: this.loader.state(),
        rng: 0,
        summary: this.summaryAcc,
        wallSeconds,
      },
      this.config.trainer.max_ckpt_to_keep,
    );
  }

  /** One SFT step on the next batch: its metrics. */
  async trainStep(): Promise<StepMetrics> {
    const group = this.workerGroup;
    const { rows, epoch } = this.loader.next();
    const batch = sftBatch(rows, this.tokenizer.padTokenId);
    const t0 = performance.now();
    const out = await group.updateSft(layoutForMiniBatches(batch, group.worldSize, batch.length));
    const seconds = (performance.now() - t0) / 1000;
    const tokens = rows.reduce((s, e) => s + e.ids.length, 0);
    return {
      ...out[0]!,
      "training/epoch": epoch,
      "training/global_step": this.globalStep,
      "timing_s/update": seconds,
      "perf/total_num_tokens": tokens,
    };
  }

  /** val/loss: the token-mean NLL of the validation conversations' trained tokens. */
  async validate(): Promise<StepMetrics> {
    const group = this.workerGroup;
    const size = this.config.data.train_batch_size;
    let nll = 0;
    let tokens = 0;
    for (let s = 0; s < this.valExamples.length; s += size) {
      const out = await group.sftLoss(
        sftBatch(this.valExamples.slice(s, s + size), this.tokenizer.padTokenId),
      );
      const n = out.tensor("nll").data;
      const k = out.tensor("tokens").data;
      for (let i = 0; i < n.length; i++) {
        nll += Number(n[i]);
        tokens += Number(k[i]);
      }
    }
    return { "val/loss": nll / Math.max(1, tokens) };
  }

  /** Runs the whole training; returns the summary (also written to runs/<name>/summary.json). */
  async fit(): Promise<SftSummary> {
    const t0 = performance.now();
    const cfg = this.config;
    try {
      await this.loadData();
      this.runLog = await openRunLog(
        this.opts,
        cfg.trainer,
        cfg,
        configToYaml(cfg as unknown as ConfigNode),
        this.print,
      );
      await this.startWorkers();
      const resumed = await this.loadCheckpoint();
      this.runLog.start(resumed);
      const wall = () => this.wallBefore + (performance.now() - t0) / 1000;
      const validating = this.valExamples.length > 0;
      while (this.globalStep < this.totalSteps) {
        this.globalStep++;
        const stepStart = performance.now();
        const metrics = await this.trainStep();
        const last = this.globalStep === this.totalSteps;
        const tf = cfg.trainer.test_freq;
        if (validating && (last || (tf > 0 && this.globalStep % tf === 0))) {
          const ts = performance.now();
          Object.assign(metrics, await this.validate(), {
            "timing_s/testing": (performance.now() - ts) / 1000,
          });
          this.summaryAcc.val_loss_final = metrics["val/loss"]!;
        }
        metrics["timing_s/step"] = (performance.now() - stepStart) / 1000;
        Object.assign(
          metrics,
          computeThroughputMetrics(
            metrics["perf/total_num_tokens"]!,
            metrics["timing_s/step"],
            this.worldSize,
          ),
        );
        this.summaryAcc.train_loss_initial ??= metrics["train/loss"]!;
        this.summaryAcc.train_loss_final = metrics["train/loss"]!;
        await this.runLog.log(this.globalStep, this.totalSteps, metrics);
        const sf = cfg.trainer.save_freq;
        if (sf > 0 && (last || this.globalStep % sf === 0)) await this.saveCheckpoint(wall());
        await this.opts.onStep?.(this.globalStep, metrics);
      }
      const latest = this.ckpt.latestStep();
      const s = this.summaryAcc;
      const summary: SftSummary = {
        name: this.opts.runName ?? cfg.trainer.experiment_name,
        run_dir: this.runLog.dir,
        steps: this.globalStep,
        total_steps: this.totalSteps,
        wall_seconds: wall(),
        train_examples: this.loader.rows.length,
        train_loss_initial: s.train_loss_initial ?? null,
        train_loss_final: s.train_loss_final ?? null,
        val_loss_final: s.val_loss_final ?? null,
        resumed_from_step: this.resumedFrom,
        world_size: this.worldSize,
        checkpoint: latest === undefined ? null : this.ckpt.stepDir(latest),
      };
      this.runLog.writeFile("summary.json", `${JSON.stringify(summary, null, 2)}\n`);
      await this.runLog.close();
      await this.close();
      this.print(this.runLog.dir);
      return summary;
    } catch (e) {
      await this.runLog?.close().catch(() => {});
      await this.close().catch(() => {});
      throw e;
    }
  }

  /** Stops the workers (and the runtime when this trainer started it). */
  async close(): Promise<void> {
    const parts = { group: this.group, pool: this.pool, runtime: this.startedRuntime };
    this.group = undefined;
    this.pool = undefined;
    this.startedRuntime = false;
    await endTrainerWorkers(parts);
  }
}
