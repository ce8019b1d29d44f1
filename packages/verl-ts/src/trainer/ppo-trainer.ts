/**
 * veRL's RayPPOTrainer for the hybrid engine: a single driver that owns the data, the reward and the
 * advantage computation, and one colocated worker group (actor + rollout + ref per process, FSDP-style;
 * with an advantage estimator that requires a critic, gae, the critic joins the same processes).
 *
 *   const trainer = new RayPPOTrainer(config, { tool, reward, trainRows, valRows });
 *   const summary = await trainer.fit();
 *
 * fit() runs veRL's step order (see trainStep) with greedy validation every trainer.test_freq steps,
 * metrics in runs/<name>/metrics.jsonl, a checkpoint every trainer.save_freq steps, and resume from the
 * latest checkpoint (trainer.resume_mode=auto) that continues exactly where the run stopped.
 */
import { join } from "node:path";
import { InputError, TimelineWriter } from "@torl-ts/core";
import { computeAdvantage } from "../algorithms/advantage.js";
import { applyKlPenalty, createKlController, type KlController } from "../algorithms/kl.js";
import { aggLoss } from "../algorithms/loss-aggregation.js";
import type { MaskMatrix, ScoreMatrix } from "../algorithms/masked.js";
import { miniBatchRows, trainerWorldSize } from "../config/derived.js";
import { configToYaml } from "../config/load.js";
import { TrainerConfigError } from "../config/schema.js";
import { checkPolicyLossRequirements, checkTrainerSetup, runRequirements } from "../config/setup.js";
import type { TrainerConfig } from "../config/types.js";
import { collatePrompts, filterOverlongPrompts, PromptLoader } from "../data/loader.js";
import { type RlDatasetRow, readRlDataset } from "../data/rows.js";
import type { PromptTemplate } from "../data/templates.js";
import { loadTokenizer, type Tokenizer } from "../models/tokenizer.js";
import { DataProto, type DataProtoWire, isDataProtoWire } from "../protocol/data-proto.js";
import { loadCustomRewardFunction } from "../reward/custom-function.js";
import { RewardManager, RewardScoreTimeoutError } from "../reward/manager.js";
import { applyOverlongPenalty } from "../reward/overlong.js";
import { computeMultiTurnMetrics, modelPromptRenderer } from "../rollout/multi-turn.js";
import { checkToolSpec, describeRolloutTool, rolloutToolSpec } from "../rollout/rollout-tool.js";
import { applyVoidTurnFilter } from "../rollout/void-turn.js";
import { settleWithin } from "../settle-within.js";
import type { ResourcePool } from "../single-controller/resource-pool.js";
import { type BoundGroup, WorkerGroup, workerRole } from "../single-controller/worker-group.js";
import { ActorRolloutRefWorker, layoutForMiniBatches, type ToolSpec } from "../workers/actor-rollout-ref.js";
import { CriticWorker } from "../workers/critic.js";
import { externalLibSpecifier, importExternalLib } from "../workers/external-lib.js";
import type { ShardInfo } from "../workers/sharded-worker.js";
import { balanceBatch } from "./balance.js";
import {
  CheckpointManager,
  checkpointToResume,
  DriverRng,
  TrainerCheckpointError,
  type TrainerState,
} from "./checkpoint.js";
import { DynamicSamplingError, filterInformativeGroups, filterMetricValues } from "./dynamic-sampling.js";
import { describeWorkerFailure, WorkerFailureError } from "./errors.js";
import { saveHfMetadata } from "./export.js";
import {
  dumpGenerations,
  formatGenerations,
  type GenerationRecord,
  pickGenerationsToLog,
} from "./generation-dump.js";
import {
  computeDataMetrics,
  computeThroughputMetrics,
  computeTimingPerTokenMetrics,
  computeToolMetrics,
  computeValidationMetrics,
  tokenCounts,
} from "./metrics.js";
import { PhaseTracker } from "./phase-tracker.js";
import { applyRolloutCorrection } from "./rollout-correction.js";
import { openRunLog, type RunLog, type RunOptions, type StepMetrics } from "./run-log.js";
import { endTrainerWorkers, startRuntime, trainerResourcePool } from "./trainer-workers.js";
import { computeMultiSampleValidationMetrics, type ValidationSample } from "./validation-metrics.js";

/**
 * Scores a batch: RewardManager (in this process) or a RewardManagerActor handle (its ObjectRef is
 * awaited). Gets the wire form of a DataProto with the response text and ground truth columns; returns a
 * DataProto (or wire form) with token_level_scores [B, R] and non-tensor score, acc, extracted_answer.
 */
export interface RewardScorerLike {
  scoreDataProto(batch: DataProtoWire): PromiseLike<DataProto | DataProtoWire> | DataProto | DataProtoWire;
}

export interface TrainerOptions extends RunOptions {
  /**
   * The rollout tool (imported in every worker process; called with actor_rollout_ref.rollout.tool when
   * it names no `args`). Default: the Python code interpreter built from actor_rollout_ref.rollout.tool.
   * No tool runs when num_llm_calls_available is 0; null while it is above 0 is refused.
   */
  tool?: ToolSpec | null;
  /**
   * The reward; default a RewardManager in the driver with data.execution_error_penalty and
   * custom_reward_function. A reward given here must apply custom_reward_function itself (the
   * trainer still checks, before any worker starts, that the function loads).
   */
  reward?: RewardScorerLike;
  /** Training rows instead of reading data.train_files. */
  trainRows?: RlDatasetRow[];
  /** Validation rows instead of reading data.val_files (an empty list: no validation). */
  valRows?: RlDatasetRow[];
  /** The driver's tokenizer (prompt filter and collation); default read from actor_rollout_ref.model.path. */
  tokenizer?: Tokenizer;
}

/** summary.json: the keys a run's readers rely on (accuracies and ratios as fractions in [0, 1]) and a few more. */
export interface TrainingSummary {
  name: string;
  run_dir: string;
  steps: number;
  total_steps: number;
  wall_seconds: number;
  num_llm_calls_available: number;
  val_acc_initial: number | null;
  val_acc_final: number | null;
  code_ratio_initial: number | null;
  code_ratio_final: number | null;
  pass_ratio_final: number | null;
  effective_code_ratio_final: number | null;
  score_initial: number | null;
  score_final: number | null;
  resumed_from_step: number | null;
  world_size: number;
}

type ActorGroup = BoundGroup<typeof ActorRolloutRefWorker>;

/** Times a phase of a step into its timing_s/<name> metric. */
export type StepTimer = <T>(name: string, f: () => Promise<T>) => Promise<T>;

/** A generation round's prompts: the rows (uid, reward columns), the prompt part, it repeated rollout.n times (seeded). */
export interface RoundPrompts {
  batch: DataProto;
  prompts: DataProto;
  genBatch: DataProto;
  epoch: number;
}

/** A generation round, scored: the batch with responses and token_level_scores, and the reward's answer. */
export interface ScoredRound {
  batch: DataProto;
  epoch: number;
  scored: DataProto;
}
type CriticGroup = BoundGroup<typeof CriticWorker>;

const workerModule = (name: string) =>
  new URL(`../workers/${name}${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url).href;
export const WORKER_MODULE = workerModule("actor-rollout-ref");
const CRITIC_MODULE = workerModule("critic");

const PROMPT_KEYS = ["input_ids", "attention_mask", "position_ids"];

export class RayPPOTrainer {
  readonly config: TrainerConfig;
  protected readonly opts: TrainerOptions;
  protected readonly print: (line: string) => void;
  private actor?: ActorGroup;
  private critic?: CriticGroup;
  /** The workers' placement groups: released when the trainer closes, so a next trainer in the same
   * runtime gets the CPUs (and GPUs) back. */
  private pool?: ResourcePool;
  private workerPids: number[] = [];
  private startedRuntime = false;
  private tokenizer!: Tokenizer;
  /** Renders prompts for data.template_type=model (the model's chat template); else the registry does. */
  private render?: PromptTemplate;
  protected loader!: PromptLoader<RlDatasetRow>;
  private valRows: RlDatasetRow[] = [];
  private reward!: RewardScorerLike;
  private klCtrl?: KlController;
  private ckpt: CheckpointManager;
  protected rng: DriverRng;
  private runLog?: RunLog;
  globalStep = 0;
  totalSteps = 0;
  private resumedFrom: number | null = null;
  private summaryAcc: Record<string, number | null> = {};
  private wallBefore = 0;
  protected currentStage = "setup";
  /** Each phase as a timeline span, a metric and the dashboard's current step; the run's trace file (trainer.timeline). */
  protected readonly phases = new PhaseTracker();
  protected timeline?: TimelineWriter;
  /** The rollout workers' tool (rolloutToolSpec), once checked (before the run directory or any worker). */
  protected toolSpec?: ToolSpec | null;

  /** Checks the config at once (TrainerConfigError listing every problem); nothing is started here. */
  constructor(config: TrainerConfig, options: TrainerOptions = {}) {
    const issues = checkTrainerSetup(config, options);
    if (issues.length) throw new TrainerConfigError(issues);
    // a reward without scoreDataProto would fail only after the first rollout
    const reward = options.reward as unknown;
    if (
      reward !== undefined &&
      (reward === null ||
        (typeof reward !== "object" && typeof reward !== "function") ||
        typeof (reward as { scoreDataProto?: unknown }).scoreDataProto !== "function")
    )
      throw new InputError(
        `TrainerOptions.reward must be an object with a scoreDataProto(batch) method (a RewardManager, a RewardManagerActor handle or your own), got ${reward === null ? "null" : typeof reward === "object" ? `an object with keys [${Object.keys(reward as object).join(", ")}]` : String(reward)}`,
      );
    this.config = structuredClone(config);
    this.opts = options;
    this.print = options.log ?? ((line) => console.log(line));
    this.ckpt = new CheckpointManager(config.trainer.default_local_dir);
    this.rng = new DriverRng(config.trainer.seed ^ 0x5eed);
  }

  get worldSize(): number {
    return trainerWorldSize(this.config);
  }

  get runDir(): string | undefined {
    return this.runLog?.dir;
  }

  /** The worker group (after init). */
  get actorRolloutWg(): ActorGroup {
    if (!this.actor) throw new Error("call init() first");
    return this.actor;
  }

  /** The critic's worker group (after init, with an estimator that requires a critic: gae). */
  get criticWg(): CriticGroup {
    if (!this.critic) throw new Error("no critic: call init() first, with algorithm.adv_estimator=gae");
    return this.critic;
  }

  private get needRef(): boolean {
    return this.config.actor_rollout_ref.actor.use_kl_loss || this.config.algorithm.use_kl_in_reward;
  }

  /**
   * The rollout's tool: a module that does not import, a missing export, or a host without the Python the
   * code interpreter needs stops the run here, before its run directory, the runtime or any worker.
   */
  private async checkTool(): Promise<void> {
    if (this.toolSpec !== undefined) return;
    const spec = rolloutToolSpec(this.config, this.opts.tool);
    if (spec) await checkToolSpec(spec);
    this.toolSpec = spec;
    this.print(`[trainer] rollout tool: ${describeRolloutTool(this.config, spec)}`);
  }

  /** Data, tokenizer, reward, then the runtime and the workers (veRL's init_workers). */
  async init(): Promise<void> {
    const cfg = this.config;
    const d = cfg.data;
    this.tokenizer = this.opts.tokenizer ?? loadTokenizer(cfg.actor_rollout_ref.model.path!);
    if (d.template_type === "model") this.render = modelPromptRenderer(cfg, this.tokenizer);
    const tokenize = (text: string) => this.tokenizer.encode(text);
    const filter = (rows: RlDatasetRow[], what: string) => {
      if (!d.filter_overlong_prompts) return rows;
      const { kept, dropped } = filterOverlongPrompts(rows, {
        tokenize,
        maxPromptLength: d.max_prompt_length,
        margin: d.filter_overlong_prompts_margin,
        templateType: d.template_type,
        render: this.render,
      });
      if (dropped)
        this.print(`[trainer] ${what}: dropped ${dropped} of ${rows.length} prompts over the length limit`);
      return kept;
    };
    const train = filter(
      this.opts.trainRows ?? (await readRlDataset(d.train_files, { promptKey: d.prompt_key })),
      "train",
    );
    this.valRows = filter(
      this.opts.valRows ?? (d.val_files ? await readRlDataset(d.val_files, { promptKey: d.prompt_key }) : []),
      "val",
    );
    this.loader = new PromptLoader(train, {
      batchSize: d.train_batch_size,
      shuffle: d.shuffle,
      seed: d.seed,
    });
    this.totalSteps =
      cfg.trainer.total_training_steps ??
      this.loader.batchesPerEpoch * cfg.trainer.total_epochs * this.stepsPerPromptBatch();
    cfg.actor_rollout_ref.actor.optim.total_training_steps = this.totalSteps;
    cfg.critic.optim.total_training_steps = this.totalSteps;
    const custom = cfg.custom_reward_function.path
      ? { path: cfg.custom_reward_function.path, name: cfg.custom_reward_function.name }
      : null;
    // a missing export stops the run here, before the runtime or any worker starts
    if (custom) await loadCustomRewardFunction(custom);
    this.reward =
      this.opts.reward ??
      new RewardManager({
        executionErrorPenalty: d.execution_error_penalty,
        executionPenaltyValue: d.execution_error_penalty_value,
        numThreads: 0,
        customRewardFunction: custom,
        scoreTimeout: cfg.reward_model.score_timeout,
      });
    if (cfg.algorithm.use_kl_in_reward) this.klCtrl = createKlController(cfg.algorithm.kl_ctrl);

    // the user's module, by an absolute specifier so every worker process finds it too
    const lib = cfg.actor_rollout_ref.model.external_lib;
    if (lib) {
      cfg.actor_rollout_ref.model.external_lib = externalLibSpecifier(lib);
      await importExternalLib(lib);
      // a policy loss the module registers declares its needs only now
      const issues = checkPolicyLossRequirements(cfg);
      if (issues.length) throw new TrainerConfigError(issues);
    }
    await this.checkTool();
    if (await startRuntime()) this.startedRuntime = true;
    // the run's trace from before its workers start (fit finishes it)
    if (cfg.trainer.timeline && !this.timeline)
      this.timeline = await TimelineWriter.open(cfg.trainer.timeline);
    const W = this.worldSize;
    const pool = await trainerResourcePool(
      cfg.trainer,
      W,
      this.opts.useGpu,
      `${cfg.trainer.experiment_name}-pool`,
    );
    this.pool = pool;
    this.currentStage = "spawning workers";
    const actorRole = workerRole(
      ActorRolloutRefWorker,
      { module: WORKER_MODULE },
      {
        config: cfg,
        role: this.needRef ? "actor_rollout_ref" : "actor_rollout",
        tool: this.toolSpec ?? null,
      },
    );
    const groupOptions = {
      name: `actor_rollout_ref-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
      collective: true,
      env: this.opts.workerEnv,
      readyTimeoutMs: cfg.trainer.ray_wait_register_center_timeout * 1000,
    };
    if (runRequirements(cfg).critic) {
      // the critic shares each process (and its collective group) with the actor, as veRL colocates them
      const colocated = await WorkerGroup.createColocated(
        pool,
        {
          actor_rollout_ref: actorRole,
          critic: workerRole(CriticWorker, { module: CRITIC_MODULE }, { config: cfg }),
        },
        groupOptions,
      );
      const roles = colocated.spawnRoles();
      this.actor = roles.actor_rollout_ref;
      this.critic = roles.critic;
    } else {
      this.actor = await WorkerGroup.create(pool, actorRole, groupOptions);
    }
    this.workerPids = (await this.actor.workerInfo()).map((i) => i.pid);
    this.currentStage = "initModel";
    const shards = (await this.actor.initModel()) as ShardInfo[];
    if (this.critic) await this.critic.initModel();
    // the backend the ranks compute on, first thing: whether the native kernels are on, and why not
    for (const line of new Set(shards.map((s) => s.backendLine))) this.print(line);
  }

  /** Loads the checkpoint resume_mode asks for; returns its step (undefined: fresh start). */
  private async loadCheckpoint(): Promise<number | undefined> {
    const resume = checkpointToResume(this.ckpt, this.config.trainer);
    if (!resume) return undefined;
    const { dir, state } = resume;
    await this.actorRolloutWg.loadCheckpoint(join(dir, "actor"));
    if (this.critic) await this.critic.loadCheckpoint(join(dir, "critic"));
    this.loader.loadState(state.loader);
    this.rng.state = state.rng;
    this.resumeData(state, dir);
    this.globalStep = state.globalStep;
    this.summaryAcc = { ...state.summary };
    this.wallBefore = state.wallSeconds;
    this.resumedFrom = state.globalStep;
    this.print(`[trainer] resumed from ${dir} (step ${state.globalStep})`);
    return state.globalStep;
  }

  /**
   * A checkpoint's data position past its loader and RNG state (TrainerState.async). Prompt groups of a
   * loader batch trained while others were not (a fully_async run) cannot be resumed by a trainer that
   * takes whole batches.
   */
  protected resumeData(state: TrainerState, dir: string): void {
    if (state.async?.trained.some((g) => g.length > 0) && this.config.trainer.mode !== "fully_async")
      throw new TrainerCheckpointError(
        `${dir} was written by a trainer.mode=fully_async run that had trained part of loader batch ${state.async.batch}; resume it with trainer.mode=fully_async (trainer.mode is ${this.config.trainer.mode})`,
      );
  }

  /** Where the data stands for a checkpoint: the loader and the driver's RNG (the async trainers' run ahead of training). */
  protected dataPosition(): Pick<TrainerState, "loader" | "rng" | "async"> {
    return { loader: this.loader.state(), rng: this.rng.state };
  }

  private async saveCheckpoint(wallSeconds: number): Promise<void> {
    const dir = this.ckpt.begin(this.globalStep);
    await this.actorRolloutWg.saveCheckpoint(join(dir, "actor"));
    // config and tokenizer beside the shards, so `torl export` needs nothing else
    saveHfMetadata(
      this.config.actor_rollout_ref.model.path!,
      join(dir, "actor"),
      this.config.actor_rollout_ref.model,
    );
    if (this.critic) await this.critic.saveCheckpoint(join(dir, "critic"));
    const state: TrainerState = {
      globalStep: this.globalStep,
      ...this.dataPosition(),
      summary: this.summaryAcc,
      wallSeconds,
    };
    this.ckpt.commit(this.globalStep, state, this.config.trainer.max_actor_ckpt_to_keep);
  }

  /** Runs the whole training; returns the summary (also written to runs/<name>/summary.json). */
  async fit(): Promise<TrainingSummary> {
    const t0 = performance.now();
    const cfg = this.config;
    try {
      await this.checkTool();
      // the run's log and metric sinks first: a logger whose client is missing stops the run here
      // the config as given (init fills in the optimizers' step counts), so the file can be run again
      this.runLog = await openRunLog(this.opts, cfg.trainer, cfg, configToYaml(cfg), this.print);
      await this.init();
      this.currentStage = "loading checkpoint";
      const resumed = await this.loadCheckpoint();
      this.runLog.start(resumed);
      const wall = () => this.wallBefore + (performance.now() - t0) / 1000;

      const validating = cfg.trainer.test_freq > 0 && this.valRows.length > 0;
      if (validating && cfg.trainer.val_before_train && resumed === undefined) {
        const val = await this.validate();
        this.summaryAcc.val_acc_initial = val["val/acc"]!;
        this.summaryAcc.val_acc_final = val["val/acc"]!;
        await this.runLog.log(0, this.totalSteps, val);
      }
      if (!cfg.trainer.val_only) {
        while (this.globalStep < this.totalSteps) {
          this.globalStep++;
          this.phases.beginStep(this.globalStep);
          const stepStart = performance.now();
          const metrics = await this.phases.run("step", () => this.trainStep());
          const last = this.globalStep === this.totalSteps;
          if (validating && (last || this.globalStep % cfg.trainer.test_freq === 0)) {
            const ts = performance.now();
            const val = await this.phases.run("testing", () => this.validate());
            Object.assign(metrics, val, { "timing_s/testing": (performance.now() - ts) / 1000 });
            this.summaryAcc.val_acc_final = val["val/acc"]!;
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
          this.trackSummary(metrics);
          await this.runLog.log(this.globalStep, this.totalSteps, metrics);
          await this.timeline?.flush();
          if (cfg.trainer.save_freq > 0 && (last || this.globalStep % cfg.trainer.save_freq === 0)) {
            this.currentStage = "saving checkpoint";
            await this.saveCheckpoint(wall());
          }
          await this.opts.onStep?.(this.globalStep, metrics);
        }
      }
      const summary = this.summary(wall());
      this.runLog.writeFile("summary.json", `${JSON.stringify(summary, null, 2)}\n`);
      await this.runLog.close();
      await this.endTimeline();
      await this.close();
      this.print(this.runLog.dir);
      return summary;
    } catch (e) {
      const err = this.explain(e);
      await this.runLog?.close().catch(() => {});
      await this.endTimeline().catch(() => {});
      await this.close().catch(() => {});
      throw err;
    }
  }

  /** Finishes the run's trace file (before the workers go: their last events are collected). */
  private async endTimeline(): Promise<void> {
    this.phases.end();
    const t = this.timeline;
    this.timeline = undefined;
    await t?.close();
    if (t)
      this.print(
        `[trainer] timeline: ${this.config.trainer.timeline} (open it in ui.perfetto.dev or chrome://tracing)`,
      );
  }

  /**
   * One PPO step in veRL's order. Returns its metrics (validation and step timing are added by fit).
   */
  async trainStep(): Promise<StepMetrics> {
    const cfg = this.config;
    const ar = cfg.actor_rollout_ref;
    const actor = this.actorRolloutWg;
    const timing: StepMetrics = {};
    const timed = async <T>(name: string, f: () => Promise<T>): Promise<T> => {
      this.currentStage = name;
      const s = performance.now();
      const out = await this.phases.run(name, f);
      // several generation rounds (dynamic sampling) add up
      timing[`timing_s/${name}`] = (timing[`timing_s/${name}`] ?? 0) + (performance.now() - s) / 1000;
      return out;
    };

    // 1-3. Prompts (each row's uid is its GRPO group), rollout of n responses each, reward. With
    // algorithm.filter_groups (DAPO's dynamic sampling) rounds repeat until enough groups teach something.
    // (reward/ metrics then describe the last round)
    const { batch, epoch, scored, sampling } = await this.generateAndScore(timed);
    // SimpleTIR's void-turn filter: such responses stay in the batch with no loss tokens
    const voidTurns = cfg.algorithm.void_turn_filter ? applyVoidTurnFilter(batch, ar.rollout.tool.stop) : {};
    const rolloutDir = cfg.trainer.rollout_data_dir;
    if (rolloutDir) dumpGenerations(rolloutDir, this.globalStep, this.generationRecords(batch));

    // Balance the tokens over the workers before every per-worker pass (veRL's balance_batch).
    let balance: StepMetrics = {};
    if (cfg.trainer.balance_batch && actor.worldSize > 1) {
      const b = balanceBatch(batch, actor.worldSize);
      batch.reorder(b.order);
      balance = b.metrics;
    }

    // 4. Old log-probs (and entropy) under the actor that generated the responses.
    const old = await timed("old_log_prob", () => actor.computeLogProb(batch));
    const entropys = old.pop(["entropys"]).tensor("entropys");
    batch.union(old);
    // responses the rollout workers made with older weights: veRL's rollout IS correction (metrics, and
    // with algorithm.rollout_is the weights and mask mode's rejection in the loss)
    const correction = applyRolloutCorrection(batch, cfg.algorithm);
    const lossMask = batch.tensor("loss_mask") as MaskMatrix;
    const entropy = aggLoss(entropys as ScoreMatrix, lossMask, ar.actor.loss_agg_mode);

    // 5. Reference log-probs, only when a KL term uses them.
    if (this.needRef) batch.union(await timed("ref", () => actor.computeRefLogProb(batch)));

    // 6. Critic values (GAE only).
    const critic = this.critic;
    if (critic) batch.union(await timed("values", () => critic.computeValues(batch)));

    // 7. Advantages on the driver (KL penalty in the reward first, when enabled).
    const klMetrics = await timed("adv", async () => this.computeAdvantages(batch));

    // 8. Update the critic on the returns (global mini-batches laid out over the ranks).
    let criticOut: StepMetrics = {};
    if (critic) {
      const rows = miniBatchRows(cfg, "critic");
      const out = await timed("update_critic", () =>
        critic.updateCritic(layoutForMiniBatches(batch, critic.worldSize, rows)),
      );
      criticOut = out[0]!;
    }

    // 9. Update the actor, unless the critic is still warming up (veRL: from step critic_warmup on). The rollout
    // shares the actor's process and weights, so the new weights are in the rollout already.
    let actorOut: StepMetrics = {};
    if (!critic || cfg.trainer.critic_warmup <= this.globalStep) {
      const miniRows = miniBatchRows(cfg, "actor");
      const out = await timed("update_actor", () =>
        actor.updateActor(layoutForMiniBatches(batch, actor.worldSize, miniRows)),
      );
      actorOut = out[0]!;
    }

    return {
      ...actorOut,
      ...criticOut,
      "actor/entropy": entropy,
      ...klMetrics,
      ...computeDataMetrics(batch),
      ...balance,
      ...computeToolMetrics(batch),
      ...computeMultiTurnMetrics(batch),
      ...numericMetrics(scored.metaInfo.reward_metrics),
      ...sampling,
      ...voidTurns,
      ...correction,
      "training/epoch": epoch,
      "training/global_step": this.globalStep,
      ...timing,
      ...computeTimingPerTokenMetrics(batch, timing),
      "perf/total_num_tokens": ((c) => c.prompt + c.response)(tokenCounts(batch)),
    };
  }

  /** Training steps per batch of data.train_batch_size prompts the loader gives (fully_async's steps can take less). */
  protected stepsPerPromptBatch(): number {
    return 1;
  }

  /** One generation round: the next prompts, n responses each, scored (steps 1-3 of trainStep). */
  protected async generateRound(timed: StepTimer, round: number): Promise<ScoredRound> {
    const prompts = this.nextPrompts(`${this.globalStep}`, round);
    // each prompt repeated n times (interleaved), generated on the actor's own weights
    const gen = await timed("gen", () => this.actorRolloutWg.generateSequences(prompts.genBatch));
    return this.scoreRound(timed, prompts, gen);
  }

  /**
   * The next prompts of a generation round (the loader's next batch; each row's uid, its GRPO group, is
   * tagged with `step` and the round) and the prompt part to generate from: each prompt repeated
   * rollout.n times, with the round's sampling seed (the driver's next draw).
   */
  protected nextPrompts(step: string, round: number): RoundPrompts {
    const n = this.config.actor_rollout_ref.rollout.n;
    const { rows, epoch } = this.loader.next();
    const batch = this.collate(rows);
    const tag = round === 0 ? step : `${step}-g${round}`;
    batch.nonTensorBatch.uid = rows.map((_, i) => `${tag}-${i}`);
    const prompts = batch.pop(PROMPT_KEYS);
    prompts.metaInfo.seed = this.rng.nextUint32();
    return { batch, prompts, genBatch: prompts.repeat(n), epoch };
  }

  /** A round's generations joined to its prompts' rows and scored (the greedy baseline first, when needed). */
  protected async scoreRound(timed: StepTimer, p: RoundPrompts, gen: DataProto): Promise<ScoredRound> {
    const n = this.config.actor_rollout_ref.rollout.n;
    let batch = p.batch;
    const { prompts: genBatch, epoch } = p;
    // an estimator requiring a greedy baseline (ReMax): the baseline of each prompt is the score of its
    // greedy response (veRL's gen_max)
    let baselines: Float32Array | undefined;
    if (runRequirements(this.config).greedyBaseline) {
      const greedy = DataProto.fromWire(genBatch.toWire());
      greedy.metaInfo.do_sample = false;
      const base = await timed("gen_max", () => this.actorRolloutWg.generateSequences(greedy));
      const scoredBase = await this.score(
        batch.select([], Object.keys(batch.nonTensorBatch), []).union(base),
      );
      const perPrompt = scoredBase.column<number>("score");
      baselines = Float32Array.from({ length: perPrompt.length * n }, (_, i) =>
        Number(perPrompt[Math.floor(i / n)]),
      );
    }
    batch = batch.repeat(n).union(gen);
    if (baselines) batch.batch.reward_baselines = { data: baselines, shape: [baselines.length] };
    // token_level_scores (score on the last response token), score, acc
    const scored = await timed("reward", () => this.score(batch));
    batch.union(scored.select(["token_level_scores"], ["score", "acc", "extracted_answer"], []));
    return { batch, epoch, scored };
  }

  /**
   * The step's scored batch. With algorithm.filter_groups.enable, groups whose responses all have the
   * same filter metric are dropped and rounds repeat until data.train_batch_size groups are kept (the
   * surplus of the last round is cut), at most max_num_gen_batches rounds (0: no limit).
   */
  protected async generateAndScore(timed: StepTimer): Promise<ScoredRound & { sampling: StepMetrics }> {
    const fg = this.config.algorithm.filter_groups;
    const first = await this.generateRound(timed, 0);
    if (!fg.enable) return { ...first, sampling: {} as StepMetrics };
    const want = this.config.data.train_batch_size;
    const n = this.config.actor_rollout_ref.rollout.n;
    const kept: DataProto[] = [];
    let keptPrompts = 0;
    let dropped = 0;
    let round = first;
    let rounds = 0;
    for (;;) {
      const values = filterMetricValues(
        fg.metric,
        round.batch.column("acc"),
        round.batch.column<number>("score"),
      );
      const f = filterInformativeGroups(round.batch.column<string>("uid"), values);
      kept.push(round.batch.selectRows(f.rows));
      keptPrompts += f.keptGroups.length;
      dropped += f.droppedGroups;
      rounds++;
      if (keptPrompts >= want) break;
      if (fg.max_num_gen_batches > 0 && rounds >= fg.max_num_gen_batches)
        throw new DynamicSamplingError({
          numGenBatches: rounds,
          keptPrompts,
          trainBatchSize: want,
          metric: fg.metric,
        });
      round = await this.generateRound(timed, rounds);
    }
    // a group's n rows are adjacent, so the first want x n rows are the first want kept groups
    const batch = DataProto.concat(kept).slice(0, want * n);
    const sampling: StepMetrics = {
      "train/num_gen_batches": rounds,
      "train/num_kept_prompts": keptPrompts,
      "train/num_dropped_prompts": dropped,
    };
    return { batch, epoch: round.epoch, scored: round.scored, sampling };
  }

  /** The generations of a scored batch as dump records (input, output, gts, score, step, acc). */
  private generationRecords(batch: DataProto): GenerationRecord[] {
    const prompts = batch.tensor("prompts");
    const attn = batch.tensor("attention_mask");
    const [B, P] = prompts.shape as [number, number];
    const W = attn.shape[1]!;
    const text = batch.column<string>("response_text");
    const score = batch.column<number>("score");
    const acc = batch.column<boolean>("acc");
    const rm = batch.nonTensorBatch.reward_model as { ground_truth?: unknown }[] | undefined;
    return Array.from({ length: B }, (_, b) => {
      const ids: number[] = [];
      for (let t = 0; t < P; t++) if (Number(attn.data[b * W + t])) ids.push(Number(prompts.data[b * P + t]));
      const gt = rm?.[b]?.ground_truth;
      return {
        input: this.tokenizer.decode(ids, true),
        output: text[b] ?? "",
        gts: gt === undefined || gt === null ? null : String(gt),
        score: Number(score[b]),
        step: this.globalStep,
        acc: Boolean(acc[b]),
      };
    });
  }

  private collate(rows: RlDatasetRow[]): DataProto {
    const d = this.config.data;
    return collatePrompts(rows, {
      tokenize: (t) => this.tokenizer.encode(t),
      maxPromptLength: d.max_prompt_length,
      padTokenId: this.tokenizer.padTokenId,
      templateType: d.template_type,
      render: this.render,
      truncation: d.truncation,
    });
  }

  /** Sends the reward columns to the reward function and reads its answer back as a DataProto. */
  private async score(batch: DataProto): Promise<DataProto> {
    const tensors = ["responses", "response_mask", "execution_passes", "num_tool_calls"].filter(
      (k) => k in batch.batch,
    );
    const cols = ["response_text", "reward_model", "data_source", "extra_info"].filter(
      (k) => k in batch.nonTensorBatch,
    );
    const sent = batch.select(tensors, cols, []).toWire();
    const timeout = this.config.reward_model.score_timeout;
    // the stock RewardManager bounds each row itself; a reward given in TrainerOptions gets the same
    // bound for the whole batch, so a call that never settles fails the step instead of hanging it
    const out = this.opts.reward
      ? await settleWithin(
          new Promise<DataProto | DataProtoWire>((resolve) => resolve(this.reward.scoreDataProto(sent))),
          timeout * 1000,
          () =>
            new RewardScoreTimeoutError(
              `TrainerOptions.reward.scoreDataProto did not finish scoring a batch of ${batch.length} rows (data sources: ${dataSourcesOf(batch)}) within ${timeout} s; raise reward_model.score_timeout if it is only slow`,
            ),
        )
      : await this.reward.scoreDataProto(sent);
    const scored = checkScoredBatch(
      out,
      batch,
      this.opts.reward ? "TrainerOptions.reward" : "the reward manager",
    );
    const ob = this.config.reward_model.overlong_buffer;
    if (ob.enable)
      applyOverlongPenalty(batch.tensor("response_mask"), scored, {
        len: ob.len,
        penaltyFactor: ob.penalty_factor,
        maxResponseLength: this.config.data.max_response_length,
      });
    return scored;
  }

  /** token_level_rewards (scores, minus the in-reward KL penalty when enabled), advantages, returns. */
  private computeAdvantages(batch: DataProto): StepMetrics {
    const alg = this.config.algorithm;
    const mask = batch.tensor("loss_mask") as MaskMatrix;
    let rewards = batch.tensor("token_level_scores") as ScoreMatrix;
    let metrics: StepMetrics = {};
    if (alg.use_kl_in_reward) {
      const r = applyKlPenalty(
        rewards,
        batch.tensor("old_log_probs") as ScoreMatrix,
        batch.tensor("ref_log_prob") as ScoreMatrix,
        mask,
        this.klCtrl!,
        alg.kl_penalty,
      );
      rewards = r.tokenLevelRewards;
      metrics = r.metrics;
    }
    const { advantages, returns } = computeAdvantage(alg.adv_estimator, {
      tokenLevelRewards: rewards,
      responseMask: mask,
      ...(batch.batch.values ? { values: batch.tensor("values") as ScoreMatrix } : {}),
      index: batch.column<string>("uid"),
      ...(batch.batch.reward_baselines
        ? { rewardBaselines: batch.tensor("reward_baselines").data as Float32Array }
        : {}),
      gamma: alg.gamma,
      lam: alg.lam,
      normAdvByStdInGrpo: alg.norm_adv_by_std_in_grpo,
    });
    batch.batch.token_level_rewards = rewards;
    batch.batch.advantages = advantages;
    batch.batch.returns = returns;
    return metrics;
  }

  /**
   * Greedy validation (rollout.val_kwargs) over the validation rows: val/<source>/acc, val/acc, and the
   * tool metrics as val/tool/... .
   */
  async validate(): Promise<StepMetrics> {
    this.currentStage = "validation";
    const cfg = this.config;
    const actor = this.actorRolloutWg;
    const size = cfg.data.val_batch_size ?? this.valRows.length;
    const n = cfg.actor_rollout_ref.rollout.val_kwargs.n;
    const sources: string[] = [];
    const correct: boolean[] = [];
    const scores: number[] = [];
    const parts: DataProto[] = [];
    const samples: ValidationSample[] = [];
    const records: GenerationRecord[] = [];
    for (let s = 0; s < this.valRows.length; s += size) {
      let batch = this.collate(this.valRows.slice(s, s + size));
      batch.nonTensorBatch.uid = Array.from({ length: batch.length }, (_, i) => `val-${s + i}`);
      const genBatch = batch.pop(PROMPT_KEYS);
      genBatch.metaInfo.validate = true;
      genBatch.metaInfo.seed = cfg.actor_rollout_ref.rollout.seed;
      const gen = await actor.generateSequences(genBatch.repeat(n));
      batch = batch.repeat(n).union(gen);
      const scored = await this.score(batch);
      batch.union(scored.select([], ["acc", "score", "extracted_answer"], []));
      sources.push(...batch.column<string>("data_source").map(String));
      correct.push(...batch.column<boolean>("acc"));
      scores.push(...batch.column<number>("score"));
      const uids = batch.column<string>("uid");
      const preds = batch.column<string | null>("extracted_answer");
      batch.column<string>("data_source").forEach((src, i) => {
        samples.push({
          uid: uids[i]!,
          dataSource: String(src),
          acc: Boolean(batch.column<boolean>("acc")[i]),
          reward: Number(batch.column<number>("score")[i]),
          pred: preds[i] ?? null,
        });
      });
      if (cfg.trainer.log_val_generations > 0 || cfg.trainer.validation_data_dir)
        records.push(...this.generationRecords(batch));
      parts.push(
        batch.select(
          ["num_tool_calls", "num_tool_passes"],
          ["tool_observations", "extracted_answer", "acc"],
          [],
        ),
      );
    }
    const all = parts.length ? DataProto.concat(parts) : undefined;
    const t = cfg.trainer;
    if (t.log_val_generations > 0)
      for (const line of formatGenerations(
        this.globalStep,
        pickGenerationsToLog(records, t.log_val_generations),
      ))
        this.print(line);
    if (t.validation_data_dir) dumpGenerations(t.validation_data_dir, this.globalStep, records);
    return {
      ...computeValidationMetrics(sources, correct, scores),
      ...computeMultiSampleValidationMetrics(samples),
      ...(all ? computeToolMetrics(all, "val/tool") : {}),
    };
  }

  private trackSummary(m: StepMetrics): void {
    const s = this.summaryAcc;
    if ("tool/code_ratio" in m) {
      s.code_ratio_initial ??= m["tool/code_ratio"]!;
      s.code_ratio_final = m["tool/code_ratio"]!;
    }
    // Over calls or over responses with code: no value at a step without any (the metric logs 0 there).
    const withCode = (m["tool/code_ratio"] ?? 0) > 0;
    if ("tool/pass_ratio" in m) s.pass_ratio_final = withCode ? m["tool/pass_ratio"]! : null;
    if ("tool/effective_code_ratio" in m)
      s.effective_code_ratio_final = withCode ? m["tool/effective_code_ratio"]! : null;
    if ("critic/score/mean" in m) {
      s.score_initial ??= m["critic/score/mean"]!;
      s.score_final = m["critic/score/mean"]!;
    }
  }

  private summary(wallSeconds: number): TrainingSummary {
    const s = this.summaryAcc;
    return {
      name: this.opts.runName ?? this.config.trainer.experiment_name,
      run_dir: this.runLog!.dir,
      steps: this.globalStep,
      total_steps: this.totalSteps,
      wall_seconds: wallSeconds,
      num_llm_calls_available: this.config.actor_rollout_ref.rollout.num_llm_calls_available,
      val_acc_initial: s.val_acc_initial ?? null,
      val_acc_final: s.val_acc_final ?? null,
      code_ratio_initial: s.code_ratio_initial ?? null,
      code_ratio_final: s.code_ratio_final ?? null,
      pass_ratio_final: s.pass_ratio_final ?? null,
      effective_code_ratio_final: s.effective_code_ratio_final ?? null,
      score_initial: s.score_initial ?? null,
      score_final: s.score_final ?? null,
      resumed_from_step: this.resumedFrom,
      world_size: this.worldSize,
    };
  }

  /** Turns a worker failure into a WorkerFailureError naming role, rank, actor, pid and the cause. */
  private explain(e: unknown): unknown {
    const wg = this.actor;
    const f = describeWorkerFailure(e, {
      role: this.critic ? "actor_rollout_ref+critic" : "actor_rollout_ref",
      actorIds: wg?.handles.map((h) => h.actorId) ?? [],
      pids: this.workerPids,
      step: this.globalStep,
      stage: this.currentStage,
      lastCheckpoint: safeLatest(this.ckpt),
      checkpointDir: this.config.trainer.default_local_dir,
    });
    if (f) this.print(`[trainer] ${f.message}`);
    return f ?? e;
  }

  /** Stops the workers (and the runtime when this trainer started it). */
  async close(): Promise<void> {
    // the critic lives in the same processes as the actor
    const parts = { group: this.actor, pool: this.pool, runtime: this.startedRuntime };
    this.actor = undefined;
    this.critic = undefined;
    this.pool = undefined;
    this.startedRuntime = false;
    await endTrainerWorkers(parts);
  }
}

function safeLatest(ckpt: CheckpointManager): number | undefined {
  try {
    return ckpt.latestStep();
  } catch {
    return undefined;
  }
}

/** The numeric entries of a metrics record that crossed a process boundary (others are dropped). */
function numericMetrics(m: unknown): StepMetrics {
  if (!m || typeof m !== "object") return {};
  const out: StepMetrics = {};
  for (const [k, v] of Object.entries(m)) if (typeof v === "number") out[k] = v;
  return out;
}

export { WorkerFailureError };

/** The distinct data sources of a batch, for messages ("math" when it has no data_source column). */
function dataSourcesOf(batch: DataProto): string {
  const col = batch.nonTensorBatch.data_source;
  const sources = col ? [...new Set(col.map(String))] : ["math"];
  return sources
    .slice(0, 5)
    .map((s) => JSON.stringify(s))
    .join(", ")
    .concat(sources.length > 5 ? `, ... (${sources.length} in all)` : "");
}

/**
 * The reward's answer as a DataProto, checked: token_level_scores [B, R] of finite numbers and a finite
 * number per row in `score` (the advantages read both), `acc` per row. `who` names the reward.
 */
function checkScoredBatch(out: unknown, batch: DataProto, who: string): DataProto {
  const B = batch.length;
  const R = batch.tensor(batch.batch.response_mask ? "response_mask" : "responses").shape[1]!;
  const fail = (why: string) =>
    new InputError(
      `${who}: scoreDataProto ${why} (data sources: ${dataSourcesOf(batch)}); it must return a DataProto (or its wire form) with batch token_level_scores [${B}, ${R}] and non-tensor score and acc per row`,
    );
  if (!(out instanceof DataProto) && !isDataProtoWire(out))
    throw fail(
      `returned ${out === null || typeof out !== "object" ? String(out) : "an object that is not a DataProto"}`,
    );
  const scored = isDataProtoWire(out) ? DataProto.fromWire(out) : out;
  if (scored === batch) throw fail("returned the batch it was given");
  const tls = scored.batch.token_level_scores;
  if (!tls) throw fail("returned no token_level_scores");
  if (tls.shape.length !== 2 || tls.shape[0] !== B || tls.shape[1] !== R)
    throw fail(`returned token_level_scores of shape [${tls.shape.join(", ")}]`);
  for (let i = 0; i < tls.data.length; i++)
    if (!Number.isFinite(Number(tls.data[i])))
      throw fail(`returned a non-finite token_level_scores value in row ${Math.floor(i / R)}`);
  const score = scored.nonTensorBatch.score;
  if (!score || score.length !== B)
    throw fail(`returned ${score ? score.length : "no"} score values for ${B} rows`);
  score.forEach((v, i) => {
    if (typeof v !== "number" || !Number.isFinite(v)) throw fail(`returned score ${String(v)} for row ${i}`);
  });
  const acc = scored.nonTensorBatch.acc;
  if (!acc || acc.length !== B) throw fail(`returned ${acc ? acc.length : "no"} acc values for ${B} rows`);
  return scored;
}
