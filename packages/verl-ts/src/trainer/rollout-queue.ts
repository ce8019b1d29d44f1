/**
 * The bounded queue between the rollout and the trainer of trainer.mode one_step_off / fully_async, with
 * the admission rule that bounds staleness (AReaL's, in veRL's terms). The rollout starts unit n (0-based
 * count of units started; a unit is one training step's worth of prompts) only while
 *
 *   n < syncs x trigger_parameter_sync_step + capacity,   capacity = ceil((1 + staleness_threshold) x trigger_parameter_sync_step)
 *
 * where `syncs` counts the weight updates the rollout workers got. The trainer takes one unit's worth of
 * items per step and updates the rollout's weights after every trigger_parameter_sync_step steps, so at
 * most `capacity` units are ever queued or in generation, and a unit is trained on at most capacity - 1
 * steps after the weights that started it (its staleness). one_step_off is the case
 * trigger_parameter_sync_step = 1, capacity = 2, one item (a whole batch) per unit; fully_async queues
 * prompt groups as they finish (`itemsPerUnit` of them per unit), so the queue holds at most
 * capacity x itemsPerUnit items.
 */

/** The queue was closed (the run ended or failed); waiting takers and the producer get this. */
export class RolloutQueueClosedError extends Error {
  override name = "RolloutQueueClosedError";
}

/** A batch put in the queue more than its capacity: a broken admission, never expected. */
export class RolloutQueueOverflowError extends Error {
  override name = "RolloutQueueOverflowError";
}

export function rolloutQueueCapacity(stalenessThreshold: number, syncEvery: number): number {
  return Math.max(1, Math.ceil((1 + stalenessThreshold) * syncEvery - 1e-9));
}

export class RolloutQueue<T> {
  private readonly items: T[] = [];
  private takers: { count: number; resolve: (items: T[]) => void; reject: (e: Error) => void }[] = [];
  private admitters: { resolve: () => void; reject: (e: Error) => void }[] = [];
  private closedWith?: Error;
  /** Batches admitted (started) so far. */
  started = 0;
  /** Weight updates of the rollout so far. */
  syncs = 0;
  /** The most batches ever queued at once. */
  maxSize = 0;

  constructor(
    readonly capacity: number,
    readonly syncEvery: number,
    readonly itemsPerUnit = 1,
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1))
      throw new RangeError(`capacity must be >= 1, got ${capacity}`);
    if (!(Number.isInteger(itemsPerUnit) && itemsPerUnit >= 1))
      throw new RangeError(`itemsPerUnit must be >= 1, got ${itemsPerUnit}`);
  }

  /** The most items the queue may hold. */
  get bound(): number {
    return this.capacity * this.itemsPerUnit;
  }

  get size(): number {
    return this.items.length;
  }

  private get allowed(): number {
    return this.syncs * this.syncEvery + this.capacity;
  }

  /** Waits until the rule above lets the rollout start another batch, and counts it started. */
  admit(): Promise<void> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (this.started < this.allowed) {
      this.started++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => this.admitters.push({ resolve, reject }));
  }

  /** A finished item; a taker waiting for it gets it at once. */
  put(item: T): void {
    if (this.closedWith) throw this.closedWith;
    const taker = this.takers[0];
    if (taker?.count === 1 && this.items.length === 0) {
      this.takers.shift();
      taker.resolve([item]);
      return;
    }
    if (this.items.length >= this.bound)
      throw new RolloutQueueOverflowError(
        `the rollout queue holds ${this.items.length} of ${this.bound} items`,
      );
    this.items.push(item);
    this.maxSize = Math.max(this.maxSize, this.items.length);
    this.serveTakers();
  }

  private serveTakers(): void {
    while (this.takers.length && this.items.length >= this.takers[0]!.count) {
      const t = this.takers.shift()!;
      t.resolve(this.items.splice(0, t.count));
    }
  }

  /** The oldest item, waiting for one when the queue is empty. */
  async take(): Promise<T> {
    return (await this.takeMany(1))[0]!;
  }

  /** The `count` oldest items, waiting until there are that many. */
  takeMany(count: number): Promise<T[]> {
    if (count > this.bound)
      return Promise.reject(
        new RangeError(`cannot take ${count} items from a queue bounded at ${this.bound}`),
      );
    if (this.takers.length === 0 && this.items.length >= count)
      return Promise.resolve(this.items.splice(0, count));
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise((resolve, reject) => this.takers.push({ count, resolve, reject }));
  }

  /** The rollout's weights were updated: more batches may start. */
  synced(): void {
    this.syncs++;
    while (this.admitters.length && this.started < this.allowed) {
      this.started++;
      this.admitters.shift()!.resolve();
    }
  }

  /** Ends the queue: every waiter (and later call) is rejected with `error`. */
  close(error: Error = new RolloutQueueClosedError("the rollout queue is closed")): void {
    if (this.closedWith) return;
    this.closedWith = error;
    for (const w of [...this.takers, ...this.admitters]) w.reject(error);
    this.takers = [];
    this.admitters = [];
  }
}

/** A first-in first-out lock: `acquire()` resolves, in call order, to the release of the holder. */
export class FifoLock {
  private tail: Promise<void> = Promise.resolve();

  acquire(): Promise<() => void> {
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const ready = this.tail.then(() => release);
    this.tail = this.tail.then(() => held);
    return ready;
  }

  /** Runs `f` holding the lock. */
  async run<T>(f: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await f();
    } finally {
      release();
    }
  }
}
