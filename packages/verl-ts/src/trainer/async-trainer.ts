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
 * fully_async streams instead (produceGroups): the unit of admission is a training step's worth of
 * prompts (async_training.require_batches x actor.ppo_mini_batch_size groups, cut from the loader's batch in
 * order, each unit with its own sampling seed); the rollout workers stream each unit's responses as they
 * finish (generateSequencesStream), a group enters the queue when its n responses are in, and a step takes
 * the groups that finished first and scores them. With async_training.partial_rollout a weight update is not
 * held back by the unit in generation: the rollout workers take the weights at the next token boundary and
 * the responses continue under them (weight-swap.ts); each response carries param_version_start / _end.
 *
 * Metrics per step: async/staleness (updates between the weights that made the batch and the actor's),
 * async/rollout_version, async/queue_size and async/queue_max (the most ever queued), async/gen_s (the
 * batch's generation, overlapped with training), timing_s/wait_samples (what the trainer waited for it),
 * timing_s/sync_weights, async/rollout_restarts. With algorithm.rollout_is_threshold the rollout workers
 * also compute rollout_log_probs for veRL's rollout IS correction (rollout-correction.ts).
 *
 * A rollout worker that dies is replaced: the rollout group is started again, gets the actor's current
 * weights and generates the lost batch again (same prompts, same seed); after 3 failures in a row the
 * run fails.
 *
 * Checkpoints and resume: the producer draws prompts ahead of training, so a checkpoint does not record
 * the loader where the producer left it. It records the loader and the seed RNG before the oldest loader
 * batch not wholly trained, and which prompt groups of it (and of the batches drawn after it) a step
 * already took (trainer_state.json `async`, trained-ledger.ts). A resumed run starts the rollout from the
 * checkpoint's weights and draws those batches again: the same prompts, with the same seeds and uids, in
 * the same order. one_step_off trains whole batches, so it generates them again as they were;
 * fully_async packs the groups not trained before the checkpoint into units of groupsPerStep and
 * generates each part of a loader batch they come from whole, as it was first cut, so every group samples
 * from the streams it had in the run without the stop; the part's groups trained before are not queued.
 * Every prompt a run without the stop would have trained is trained once. A checkpoint taken in the middle of a
 * fully_async loader batch resumes only with trainer.mode=fully_async (another mode is refused).
 */
import {
  ActorDiedError,
  cancel,
  clusterResources,
  createCollectiveGroup,
  destroyCollectiveGroup,
  type ObjectRef,
} from "@torl-ts/actors";
import { rolloutWorldSize } from "../config/derived.js";
import { TrainerConfigError } from "../config/schema.js";
import type { TrainerConfig } from "../config/types.js";
import { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { ResourcePool } from "../single-controller/resource-pool.js";
import { type BoundGroup, WorkerGroup, workerRole } from "../single-controller/worker-group.js";
import { ActorRolloutRefWorker } from "../workers/actor-rollout-ref.js";
import type { AsyncDataState, TrainerState } from "./checkpoint.js";
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
import { TrainedLedger } from "./trained-ledger.js";

type RolloutGroup = BoundGroup<typeof ActorRolloutRefWorker>;

/** A scored batch in the queue, with the version of the weights that generated it. */
interface QueuedBatch extends ScoredRound {
  version: number;
  genSeconds: number;
  /** Its loader batch's number (TrainedLedger). */
  seq: number;
}

/** A loader batch drawn by the producer, with its number. */
interface DrawnPrompts extends RoundPrompts {
  seq: number;
}

/** A prompt group of a fully_async unit: group `group` (its row) of a drawn loader batch. */
interface UnitGroup {
  drawn: DrawnPrompts;
  group: number;
}

/**
 * A prompt group in fully_async's queue: one prompt's row, its prompt part and its rollout.n responses
 * (with param_version_start / _end per response), not scored yet.
 */
interface QueuedGroup {
  batch: DataProto;
  prompts: DataProto;
  gen: DataProto;
  epoch: number;
  /** The training step's worth of prompts it was generated in, and its place there. */
  unit: number;
  index: number;
  /** Its loader batch's number and its row there. */
  seq: number;
  group: number;
  versionStart: number;
  versionEnd: number;
  /** Queued while other groups of its unit were still in generation. */
  early: boolean;
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
  /** fully_async: the queue of prompt groups, streamed from the rollout workers as they finish. */
  private groupQueue?: RolloutQueue<QueuedGroup>;
  /** The generation streams in flight (cancelled when the run closes). */
  private readonly streams = new Set<ObjectRef<unknown>>();
  /** Counts rollout groups started: a failed stream replaces the rollout only if its group is still the current one. */
  private rolloutEpoch = 0;
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
  /** What of the loader batches drawn was trained, for checkpoints (from the producer's start). */
  private ledger?: TrainedLedger;
  /** The checkpoint's data position past its loader state, on resume. */
  private resumed?: AsyncDataState;

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

  /** fully_async: the prompt groups a training step takes (require_batches x actor.ppo_mini_batch_size). */
  get groupsPerStep(): number {
    return (
      this.config.async_training.require_batches * this.config.actor_rollout_ref.actor.ppo_mini_batch_size
    );
  }

  private get streaming(): boolean {
    return this.config.trainer.mode === "fully_async";
  }

  protected override stepsPerPromptBatch(): number {
    return this.streaming ? this.config.data.train_batch_size / this.groupsPerStep : 1;
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
      // fully_async: the generation streams of the admitted units (run one at a time by the worker) and a
      // weight update at once
      ...(this.streaming ? { maxConcurrency: this.queueCapacity + 2 } : {}),
      readyTimeoutMs: cfg.trainer.ray_wait_register_center_timeout * 1000,
    });
    await this.rolloutWg.initModel();
    const name = `weight-sync-${id}`;
    await createCollectiveGroup([...this.actorRolloutWg.handles, ...this.rolloutWg.handles], { name });
    this.syncGroup = name;
    this.rolloutEpoch++;
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
      this.rolloutGroup.receiveWeights(group, this.worldSize, this.updatesDone),
    ]);
    this.rolloutVersion = this.updatesDone;
  }

  protected override resumeData(state: TrainerState, dir: string): void {
    super.resumeData(state, dir);
    this.resumed = state.async;
  }

  /** The loader and RNG before the oldest batch not wholly trained, and what of it was (batches drawn ahead are drawn again on resume). */
  protected override dataPosition(): Pick<TrainerState, "loader" | "rng" | "async"> {
    return this.ledger?.point() ?? super.dataPosition();
  }

  /**
   * The next loader batch, numbered; each row's uid is tagged with the first step its batch was cut for
   * in a run without a stop (stepsPerPromptBatch steps per batch). `trained`: its groups a step took
   * before the checkpoint this run resumed from.
   */
  private draw(trained: readonly number[] = []): DrawnPrompts {
    const at = () => ({ loader: this.loader.state(), rng: this.rng.state });
    const before = at();
    const ledger = this.ledger!;
    const p = this.nextPrompts(`${ledger.nextBatch * this.stepsPerPromptBatch() + 1}`, 0);
    return { ...p, seq: ledger.drew(before, at(), p.batch.length, trained) };
  }

  /** The first step starts the producer, after the actor's weights (a checkpoint's, on resume) went to the rollout. */
  private async startProducer(): Promise<void> {
    this.updatesDone = this.globalStep - 1;
    // a checkpoint of the sync trainer stands after the batch of its last step
    const seq = this.resumed?.batch ?? Math.ceil((this.globalStep - 1) / this.stepsPerPromptBatch());
    this.ledger = new TrainedLedger({ loader: this.loader.state(), rng: this.rng.state }, seq);
    await this.rolloutLock.run(() => this.pushWeights());
    if (this.streaming) {
      const queue = new RolloutQueue<QueuedGroup>(this.queueCapacity, this.syncEvery, this.groupsPerStep);
      this.groupQueue = queue;
      this.producer = this.produceGroups(this.globalStep - 1, queue).catch((e: Error) => queue.close(e));
      return;
    }
    const queue = new RolloutQueue<QueuedBatch>(this.queueCapacity, this.syncEvery);
    this.queue = queue;
    this.producer = this.produce(this.globalStep - 1, queue).catch((e: Error) => queue.close(e));
  }

  /**
   * fully_async's producer: each admitted unit (a training step's worth of prompts: groupsPerStep of the
   * loader's batch, in order) is generated on the rollout workers, which stream the responses as they
   * finish; a prompt group goes into the queue as soon as its n responses are in. Units overlap: the next
   * is admitted while the last one's long responses still generate. On resume, the batches the checkpoint
   * had drawn ahead are drawn again and their groups trained before it are left out.
   */
  private async produceGroups(firstStep: number, queue: RolloutQueue<QueuedGroup>): Promise<void> {
    const G = this.groupsPerStep;
    const trainedBefore = [...(this.resumed?.trained ?? [])];
    const ahead: UnitGroup[] = [];
    const inFlight = new Set<Promise<void>>();
    try {
      for (let step = firstStep + 1; step <= this.totalSteps; step++) {
        await queue.admit();
        if (this.stopping) return;
        while (ahead.length < G) {
          const trained = trainedBefore.shift() ?? [];
          const drawn = this.draw(trained);
          const skip = new Set(trained);
          for (let g = 0; g < drawn.batch.length; g++) if (!skip.has(g)) ahead.push({ drawn, group: g });
        }
        const p = this.generateUnit(step, ahead.splice(0, G), queue).catch((e: Error) => queue.close(e));
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p));
      }
    } finally {
      await Promise.all(inFlight);
    }
  }

  /**
   * A unit's groups streamed from the rollout workers into the queue. Group g of a loader batch samples
   * with the seed of its part (groups [part G, (part + 1) G)), whichever unit it is generated in.
   */
  private async generateUnit(
    unit: number,
    groups: UnitGroup[],
    queue: RolloutQueue<QueuedGroup>,
  ): Promise<void> {
    const n = this.config.actor_rollout_ref.rollout.n;
    const G = groups.length;
    const GP = this.groupsPerStep;
    // the unit's groups by loader batch and part: one generation request each (one, without a resume).
    // A request is the whole part, as first cut, so each row samples from the stream it had then; the
    // part's groups that are not the unit's (trained before a resume) are generated but not queued.
    const requests = new Map<string, { genBatch: DataProto; at: (number | undefined)[]; first: boolean }>();
    groups.forEach(({ drawn, group }, at) => {
      const part = Math.floor(group / GP);
      const key = `${drawn.seq}:${part}`;
      let req = requests.get(key);
      if (!req) {
        const partGroups = Math.min(GP, drawn.prompts.length - part * GP);
        const genBatch = drawn.genBatch.selectRows(
          Array.from({ length: partGroups * n }, (_, r) => part * GP * n + r),
        );
        // each part of a drawn batch samples from its own streams
        genBatch.metaInfo.seed = (Number(drawn.genBatch.metaInfo.seed) + part * 0x9e3779b1) >>> 0;
        genBatch.metaInfo.rollout_log_probs = this.config.algorithm.rollout_is_threshold !== null;
        req = { genBatch, at: new Array(partGroups).fill(undefined), first: true };
        requests.set(key, req);
      }
      req.at[group - part * GP] = at;
    });
    const rows: (DataProto | undefined)[] = new Array(G * n);
    const done = new Array<boolean>(G).fill(false);
    let queued = 0;
    /** Rows of `chunk` at unit rows `global` (undefined: not the unit's). */
    const onRows = (chunk: DataProto, global: (number | undefined)[]) => {
      const mineRows = global.flatMap((g, j) => (g === undefined ? [] : [[g, j] as const]));
      for (const [g, j] of mineRows) rows[g] = chunk.selectRows([j]);
      for (const at of new Set(mineRows.map(([g]) => Math.floor(g / n)))) {
        const mine = rows.slice(at * n, (at + 1) * n);
        if (done[at] || mine.filter(Boolean).length < n) continue;
        done[at] = true;
        queued++;
        const gen = DataProto.concat(mine as DataProto[]);
        const start = gen.column<number>("param_version_start");
        const end = gen.column<number>("param_version_end");
        const { drawn, group } = groups[at]!;
        queue.put({
          batch: drawn.batch.selectRows([group]),
          prompts: drawn.prompts.selectRows([group]),
          gen,
          epoch: drawn.epoch,
          unit,
          index: at,
          seq: drawn.seq,
          group,
          versionStart: Math.min(...start),
          versionEnd: Math.max(...end),
          early: queued < G,
        });
      }
    };
    let failures = 0;
    for (;;) {
      const todo = [...requests.values()].filter((r) => r.at.some((a) => a !== undefined && !done[a]));
      if (todo.length === 0 || this.stopping) return;
      const epoch = this.rolloutEpoch;
      try {
        for (const req of todo) {
          const { genBatch, at } = req;
          // the whole part the first time; after a lost rollout worker, the unit's groups not queued yet
          const local = at.flatMap((a, i) => (req.first || (a !== undefined && !done[a]) ? [i] : []));
          req.first = false;
          const stream = () =>
            this.streamRows(genBatch, local, n, (chunk, rowsOf) =>
              onRows(
                chunk,
                rowsOf.map((r) => {
                  const a = at[Math.floor(r / n)];
                  return a === undefined ? undefined : a * n + (r % n);
                }),
              ),
            );
          // without partial rollouts a weight update waits for the unit in generation (rolloutLock)
          if (this.config.async_training.partial_rollout) await stream();
          else await this.rolloutLock.run(stream);
        }
      } catch (e) {
        if (this.stopping) return;
        if (!this.rolloutWorkerLost(e) || ++failures > MAX_ROLLOUT_RESTARTS) throw e;
        // the groups already queued stay; the others are generated again
        if (epoch === this.rolloutEpoch) await this.replaceRollout(e, failures);
      }
    }
  }

  /** Streams the rows of groups `todo` (of genBatch) from the rollout workers, split over them in order. */
  private async streamRows(
    genBatch: DataProto,
    todo: number[],
    n: number,
    onRows: (chunk: DataProto, global: number[]) => void,
  ): Promise<void> {
    const wg = this.rolloutGroup;
    const want = todo.flatMap((g) => Array.from({ length: n }, (_, j) => g * n + j));
    const per = Math.ceil(want.length / wg.worldSize);
    await Promise.all(
      Array.from({ length: wg.worldSize }, async (_, rank) => {
        const mine = want.slice(rank * per, (rank + 1) * per);
        if (mine.length === 0) return;
        const { ref, items } = wg.streamOnRank(rank, "generateSequencesStream", genBatch.selectRows(mine));
        this.streams.add(ref);
        try {
          for await (const item of items) {
            const chunk = item as DataProto;
            const local = chunk.metaInfo.rows as number[];
            delete chunk.metaInfo.rows;
            onRows(
              chunk,
              local.map((i) => mine[i]!),
            );
          }
        } finally {
          this.streams.delete(ref);
        }
      }),
    );
  }

  /** Generates, scores and queues the batches of steps firstStep+1 .. totalSteps, in order. */
  private async produce(firstStep: number, queue: RolloutQueue<QueuedBatch>): Promise<void> {
    for (let step = firstStep + 1; step <= this.totalSteps; step++) {
      await queue.admit();
      if (this.stopping) return;
      const prompts = this.draw();
      const start = performance.now();
      const { gen, version, rolloutLogProbs } = await this.generateOnRollout(prompts);
      const genSeconds = (performance.now() - start) / 1000;
      const timed: StepTimer = (_name, f) => f();
      const round = await this.scoreRound(timed, prompts, gen);
      if (rolloutLogProbs) round.batch.batch.rollout_log_probs = rolloutLogProbs;
      queue.put({ ...round, version, genSeconds, seq: prompts.seq });
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
        await this.replaceRollout(e, failures);
      }
    }
  }

  /** New rollout workers for lost ones, with the actor's current weights. */
  private async replaceRollout(e: unknown, failures: number): Promise<void> {
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

  /** A rollout worker's process died (a call's error, not an exception its method threw). */
  private rolloutWorkerLost(e: unknown): boolean {
    return e instanceof ActorDiedError;
  }

  /** The step's batch: the oldest queued one (waiting for it when none is ready). */
  protected override async generateAndScore(
    timed: StepTimer,
  ): Promise<ScoredRound & { sampling: StepMetrics }> {
    if (!this.queue && !this.groupQueue) await this.startProducer();
    if (this.groupQueue) return this.takeGroups(timed, this.groupQueue);
    const queue = this.queue!;
    const start = performance.now();
    const item = await timed("wait_samples", () => queue.take());
    const waited = (performance.now() - start) / 1000;
    this.releaseStep = await this.trainerLock.acquire();
    this.ledger!.took(item.seq);
    const staleness = this.updatesDone - item.version;
    const { version, genSeconds, seq: _seq, ...round } = item;
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

  /**
   * fully_async: the step's batch is the groupsPerStep groups that finished first (in unit and prompt
   * order), scored. Its staleness is counted from the oldest weights that sampled a token of it.
   */
  private async takeGroups(
    timed: StepTimer,
    queue: RolloutQueue<QueuedGroup>,
  ): Promise<ScoredRound & { sampling: StepMetrics }> {
    const start = performance.now();
    const items = await timed("wait_samples", () => queue.takeMany(this.groupsPerStep));
    const waited = (performance.now() - start) / 1000;
    this.releaseStep = await this.trainerLock.acquire();
    items.sort((a, b) => a.unit - b.unit || a.index - b.index);
    for (const i of items) this.ledger!.took(i.seq, [i.group]);
    const prompts = DataProto.concat(items.map((i) => i.prompts));
    const round = await this.scoreRound(
      timed,
      {
        batch: DataProto.concat(items.map((i) => i.batch)),
        prompts,
        genBatch: prompts,
        epoch: Math.max(...items.map((i) => i.epoch)),
      },
      DataProto.concat(items.map((i) => i.gen)),
    );
    const oldest = Math.min(...items.map((i) => i.versionStart));
    return {
      ...round,
      sampling: {
        "async/staleness": this.updatesDone - oldest,
        "async/rollout_version": oldest,
        "async/rollout_version_max": Math.max(...items.map((i) => i.versionEnd)),
        "async/queue_size": queue.size,
        "async/queue_max": queue.maxSize,
        "async/queue_capacity": queue.bound,
        "async/streamed_early": items.filter((i) => i.early).length,
        "async/wait_samples_s": waited,
        "async/rollout_restarts": this.restarts,
        ...partialRolloutMetrics(round.batch),
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
        (this.queue ?? this.groupQueue)!.synced();
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
    this.groupQueue?.close();
    // the generations in flight stop at their next token boundary (and with their workers, at the latest)
    for (const ref of this.streams) cancel(ref);
    await this.stopRollout();
    await this.producer?.catch(() => undefined);
    await super.close();
  }
}

/**
 * veRL's fully_async/partial/* metrics of a batch: responses whose tokens were sampled by more than one
 * weight version (a weight update landed while they were generated, async_training.partial_rollout), their
 * share of the batch, and the largest version span of a response.
 */
export function partialRolloutMetrics(batch: DataProto): StepMetrics {
  const start = batch.column<number>("param_version_start");
  const end = batch.column<number>("param_version_end");
  const span = start.map((s, i) => end[i]! - s);
  const partial = span.filter((d) => d !== 0).length;
  return {
    "fully_async/partial/total_partial_num": partial,
    "fully_async/partial/partial_ratio": span.length ? partial / span.length : 0,
    "fully_async/partial/max_partial_span": Math.max(0, ...span),
  };
}

/** The trainer of config's trainer.mode: RayPPOTrainer for sync, AsyncPPOTrainer for one_step_off / fully_async. */
export function createTrainer(config: TrainerConfig, options: TrainerOptions = {}): RayPPOTrainer {
  return config.trainer.mode === "sync"
    ? new RayPPOTrainer(config, options)
    : new AsyncPPOTrainer(config, options);
}
