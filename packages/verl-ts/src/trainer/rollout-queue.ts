/**
 * The bounded queue between the rollout and the trainer of trainer.mode one_step_off / fully_async, with
 * the admission rule that bounds staleness (AReaL's, in veRL's terms). The rollout starts batch n (0-based
 * count of batches started) only while
 *
 *   n < syncs x trigger_parameter_sync_step + capacity,   capacity = ceil((1 + staleness_threshold) x trigger_parameter_sync_step)
 *
 * where `syncs` counts the weight updates the rollout workers got. The trainer takes one batch per step and
 * updates the rollout's weights after every trigger_parameter_sync_step steps, so at most `capacity`
 * batches are ever queued or in generation, and a batch is trained on at most capacity - 1 steps after the
 * weights that made it (its staleness). one_step_off is the case trigger_parameter_sync_step = 1,
 * capacity = 2.
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
  private takers: { resolve: (item: T) => void; reject: (e: Error) => void }[] = [];
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
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1))
      throw new RangeError(`capacity must be >= 1, got ${capacity}`);
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

  /** A finished batch; a taker waiting gets it at once. */
  put(item: T): void {
    if (this.closedWith) throw this.closedWith;
    const taker = this.takers.shift();
    if (taker) {
      taker.resolve(item);
      return;
    }
    if (this.items.length >= this.capacity)
      throw new RolloutQueueOverflowError(
        `the rollout queue holds ${this.items.length} of ${this.capacity} batches`,
      );
    this.items.push(item);
    this.maxSize = Math.max(this.maxSize, this.items.length);
  }

  /** The oldest batch, waiting for one when the queue is empty. */
  take(): Promise<T> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve(item);
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise((resolve, reject) => this.takers.push({ resolve, reject }));
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
