/**
 * veRL's one-step-off-policy and fully asynchronous trainers (trainer.mode one_step_off / fully_async):
 * the trained actor (trainer.nnodes x trainer.n_gpus_per_node workers, as in sync mode) and rollout
 * workers of their own (rollout.nnodes x rollout.n_gpus_per_node, full weights, not trained), joined by a
 * bounded queue of scored batches (rollout-queue.ts).
 *
 *   const trainer = createTrainer(config, options); // an AsyncPPOTrainer unless trainer.mode is sync
 *   await trainer.fit();
 *
 * A producer loop on the driver takes the next prompts (in the loader's order, each batch with the
 * driver's next seed, as the sync trainer draws them), generates them on the rollout workers, scores
 * them and queues them tagged with the version of the weights that made them (the number of actor
 * updates in them). Each training step takes the oldest batch; after every trigger_parameter_sync_step
 * steps (every step in one_step_off) the actor's new weights go to the rollout workers: each trainer
 * rank broadcasts its FSDP shard over a collective group of the trainer and rollout ranks. A weight
 * update waits for the batch in generation to finish. So in one_step_off, batch t+1 is generated on the
 * weights after update t-1 while the actor trains on batch t: every batch after the first is one step
 * stale (async/staleness), and with a learning rate of 0 the run equals the sync run.
 *
 * Metrics per step: async/staleness (updates between the weights that made the batch and the actor's),
 * async/rollout_version, async/queue_size and async/queue_max (the most ever queued), async/gen_s (the
 * batch's generation, overlapped with training), timing_s/wait_samples (what the trainer waited for it),
 * timing_s/sync_weights, async/rollout_restarts. With algorithm.rollout_is_threshold the rollout workers
 * also compute rollout_log_probs for veRL's rollout IS correction (rollout-correction.ts).
 *
 * A rollout worker that dies is replaced: the rollout group is started again, gets the actor's current
 * weights and generates the lost batch again (same prompts, same seed); after 3 failures in a row the
 * run fails. A resumed run starts the rollout from the checkpoint's weights; batches that were queued
 * when the checkpoint was written are not generated again (the loader had moved past them).
 */
import {
  ActorDiedError,
  clusterResources,
  createCollectiveGroup,
  destroyCollectiveGroup,
} from "@torl-ts/actors";
import { rolloutWorldSize } from "../config/derived.js";
import { TrainerConfigError } from "../config/schema.js";
import type { TrainerConfig } from "../config/types.js";
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { ResourcePool } from "../single-controller/resource-pool.js";
import { type BoundGroup, WorkerGroup, workerRole } from "../single-controller/worker-group.js";
import { ActorRolloutRefWorker } from "../workers/actor-rollout-ref.js";
import {
  RayPPOTrainer,
  type RoundPrompts,
  type ScoredRound,
  type StepTimer,
  type TrainerOptions,
  WORKER_MODULE,
} from "./ppo-trainer.js";
import { FifoLock, RolloutQueue, rolloutQueueCapacity } from "./rollout-queue.js";
import type { StepMetrics } from "./run-log.js";

type RolloutGroup = BoundGroup<typeof ActorRolloutRefWorker>;

/** A scored batch in the queue, with the version of the weights that generated it. */
interface QueuedBatch extends ScoredRound {
  version: number;
  genSeconds: number;
}

/** Rollout failures in a row after which the run fails instead of replacing the workers again. */
const MAX_ROLLOUT_RESTARTS = 3;

let groups = 0;
const uniqueId = () => `${Date.now().toString(36)}${(groups++).toString(36)}`;

export class AsyncPPOTrainer extends RayPPOTrainer {
  private rolloutWg?: RolloutGroup;
  private rolloutPool?: ResourcePool;
  private syncGroup?: string;
  private queue?: RolloutQueue<QueuedBatch>;
  private producer?: Promise<void>;
  /** Held by a training step from taking its batch to its weight update; a rollout replacement takes it too. */
  private readonly trainerLock = new FifoLock();
  /** Held by the rollout's generation of a batch and by a weight update of the rollout. */
  private readonly rolloutLock = new FifoLock();
  private releaseStep?: () => void;
  /** Actor updates done, and in the rollout workers' weights. */
  private updatesDone = 0;
  private rolloutVersion = 0;
  private rolloutBroken = false;
  private restarts = 0;
  private stopping = false;

  constructor(config: TrainerConfig, options: TrainerOptions = {}) {
    super(config, options);
    const mode = config.trainer.mode;
    if (mode === "sync")
      throw new TrainerConfigError([
        {
          key: "trainer.mode",
          message: "trainer.mode is sync: that is RayPPOTrainer's (createTrainer picks it)",
        },
      ]);
    const rolloutWorkers = rolloutWorldSize(config);
    const rows = config.data.train_batch_size * config.actor_rollout_ref.rollout.n;
    if (rows % rolloutWorkers !== 0)
      throw new TrainerConfigError([
        {
          key: "rollout.n_gpus_per_node",
          message: `data.train_batch_size x rollout.n = ${rows} rows must divide evenly over the ${rolloutWorkers} rollout workers (rollout.nnodes x rollout.n_gpus_per_node)`,
        },
      ]);
  }

  /** Training steps per weight update of the rollout. */
  get syncEvery(): number {
    return this.config.trainer.mode === "one_step_off"
      ? 1
      : this.config.async_training.trigger_parameter_sync_step;
  }

  /** Batches queued or in generation at most (rollout-queue.ts). */
  get queueCapacity(): number {
    return this.config.trainer.mode === "one_step_off"
      ? 2
      : rolloutQueueCapacity(this.config.async_training.staleness_threshold, this.syncEvery);
  }

  /** The rollout workers' group (after init). */
  get rolloutGroup(): RolloutGroup {
    if (!this.rolloutWg) throw new Error("call init() first");
    return this.rolloutWg;
  }

  override async init(): Promise<void> {
    await super.init();
    await this.startRollout();
  }

  /** The rollout workers, their model loaded, and the collective group that carries weight updates. */
  private async startRollout(): Promise<void> {
    const cfg = this.config;
    const id = uniqueId();
    const W = rolloutWorldSize(cfg);
    const useGpu = this.opts.useGpu ?? ((await clusterResources()).GPU ?? 0) >= W + this.worldSize;
    this.currentStage = "spawning rollout workers";
    const pool = new ResourcePool({
      processOnNodes: Array.from({ length: cfg.rollout.nnodes }, () => cfg.rollout.n_gpus_per_node),
      useGpu,
      namePrefix: `${cfg.trainer.experiment_name}-rollout-pool-${id}`,
    });
    this.rolloutPool = pool;
    const role = workerRole(
      ActorRolloutRefWorker,
      { module: WORKER_MODULE },
      { config: cfg, role: "rollout", tool: this.toolSpec ?? null },
    );
    this.rolloutWg = await WorkerGroup.create(pool, role, {
      name: `rollout-${id}`,
      env: this.opts.workerEnv,
      readyTimeoutMs: cfg.trainer.ray_wait_register_center_timeout * 1000,
    });
    await this.rolloutWg.initModel();
    const name = `weight-sync-${id}`;
    await createCollectiveGroup([...this.actorRolloutWg.handles, ...this.rolloutWg.handles], { name });
    this.syncGroup = name;
  }

  private async stopRollout(): Promise<void> {
    const wg = this.rolloutWg;
    const pool = this.rolloutPool;
    const group = this.syncGroup;
    this.rolloutWg = undefined;
    this.rolloutPool = undefined;
    this.syncGroup = undefined;
    if (group) await destroyCollectiveGroup(group).catch(() => false);
    if (wg) await wg.shutdown().catch(() => undefined);
    if (pool) await pool.release().catch(() => undefined);
  }

  /** The actor's weights to the rollout workers (every trainer rank's shard, over the collective group). */
  private async pushWeights(): Promise<void> {
    const group = this.syncGroup!;
    await Promise.all([
      this.actorRolloutWg.sendWeights(group),
      this.rolloutGroup.receiveWeights(group, this.worldSize),
    ]);
    this.rolloutVersion = this.updatesDone;
  }

  /** The first step starts the producer, after the actor's weights (a checkpoint's, on resume) went to the rollout. */
  private async startProducer(): Promise<void> {
    this.updatesDone = this.globalStep - 1;
    await this.rolloutLock.run(() => this.pushWeights());
    const queue = new RolloutQueue<QueuedBatch>(this.queueCapacity, this.syncEvery);
    this.queue = queue;
    this.producer = this.produce(this.globalStep - 1, queue).catch((e: Error) => queue.close(e));
  }

  /** Generates, scores and queues the batches of steps firstStep+1 .. totalSteps, in order. */
  private async produce(firstStep: number, queue: RolloutQueue<QueuedBatch>): Promise<void> {
    for (let step = firstStep + 1; step <= this.totalSteps; step++) {
      await queue.admit();
      if (this.stopping) return;
      const prompts = this.nextPrompts(`${step}`, 0);
      const start = performance.now();
      const { gen, version, rolloutLogProbs } = await this.generateOnRollout(prompts);
      const genSeconds = (performance.now() - start) / 1000;
      const timed: StepTimer = (_name, f) => f();
      const round = await this.scoreRound(timed, prompts, gen);
      if (rolloutLogProbs) round.batch.batch.rollout_log_probs = rolloutLogProbs;
      queue.put({ ...round, version, genSeconds });
    }
  }

  /** One batch on the rollout workers (and its rollout log-probs when the IS correction is on); a lost worker is replaced and the batch generated again. */
  private async generateOnRollout(
    p: RoundPrompts,
  ): Promise<{ gen: DataProto; version: number; rolloutLogProbs?: BatchTensor }> {
    let failures = 0;
    for (;;) {
      try {
        return await this.rolloutLock.run(async () => {
          const version = this.rolloutVersion;
          const wg = this.rolloutGroup;
          const gen = await wg.generateSequences(p.genBatch);
          if (this.config.algorithm.rollout_is_threshold === null) return { gen, version };
          const lp = await wg.computeLogProb(gen);
          return { gen, version, rolloutLogProbs: lp.tensor("old_log_probs") };
        });
      } catch (e) {
        if (this.stopping || !this.rolloutWorkerLost(e) || ++failures > MAX_ROLLOUT_RESTARTS) throw e;
        this.rolloutBroken = true;
        this.restarts++;
        this.print(
          `[trainer] a rollout worker was lost (${(e as Error).message.split("\n")[0]}); starting new rollout workers (${failures} of ${MAX_ROLLOUT_RESTARTS} in a row)`,
        );
        // between training steps (the actor's weights are whole), and with no weight update in flight
        await this.trainerLock.run(() =>
          this.rolloutLock.run(async () => {
            await this.stopRollout();
            await this.startRollout();
            await this.pushWeights();
            this.rolloutBroken = false;
          }),
        );
      }
    }
  }

  /** A rollout worker's process died (a call's error, not an exception its method threw). */
  private rolloutWorkerLost(e: unknown): boolean {
    return e instanceof ActorDiedError;
  }

  /** The step's batch: the oldest queued one (waiting for it when none is ready). */
  protected override async generateAndScore(
    timed: StepTimer,
  ): Promise<ScoredRound & { sampling: StepMetrics }> {
    if (!this.queue) await this.startProducer();
    const queue = this.queue!;
    const start = performance.now();
    const item = await timed("wait_samples", () => queue.take());
    const waited = (performance.now() - start) / 1000;
    this.releaseStep = await this.trainerLock.acquire();
    const staleness = this.updatesDone - item.version;
    const { version, genSeconds, ...round } = item;
    return {
      ...round,
      sampling: {
        "async/staleness": staleness,
        "async/rollout_version": version,
        "async/queue_size": queue.size,
        "async/queue_max": queue.maxSize,
        "async/queue_capacity": queue.capacity,
        "async/gen_s": genSeconds,
        "async/wait_samples_s": waited,
        "async/rollout_restarts": this.restarts,
      },
    };
  }

  /** A training step; after every syncEvery-th, the new weights go to the rollout workers. */
  override async trainStep(): Promise<StepMetrics> {
    try {
      const metrics = await super.trainStep();
      this.updatesDone++;
      if (this.globalStep % this.syncEvery === 0 && this.globalStep < this.totalSteps) {
        const start = performance.now();
        this.currentStage = "weight update of the rollout";
        // a broken rollout gets the current weights when it is replaced
        if (!this.rolloutBroken) await this.rolloutLock.run(() => this.pushWeights());
        this.queue!.synced();
        metrics["timing_s/sync_weights"] = (performance.now() - start) / 1000;
      }
      return metrics;
    } finally {
      this.releaseStep?.();
      this.releaseStep = undefined;
    }
  }

  override async close(): Promise<void> {
    this.stopping = true;
    this.queue?.close();
    await this.stopRollout();
    await this.producer?.catch(() => undefined);
    await super.close();
  }
}

/** The trainer of config's trainer.mode: RayPPOTrainer for sync, AsyncPPOTrainer for one_step_off / fully_async. */
export function createTrainer(config: TrainerConfig, options: TrainerOptions = {}): RayPPOTrainer {
  return config.trainer.mode === "sync"
    ? new RayPPOTrainer(config, options)
    : new AsyncPPOTrainer(config, options);
}
