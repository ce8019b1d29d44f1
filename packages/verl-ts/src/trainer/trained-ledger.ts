/**
 * Where an asynchronous run (trainer.mode one_step_off / fully_async) stands in its data, for its
 * checkpoints. The rollout draws loader batches ahead of training, so the loader's own position (and the
 * driver's seed RNG) is past prompts that are queued or still in generation when a checkpoint is written.
 * The ledger keeps, for every batch drawn and not yet wholly trained, the loader and RNG state before and
 * after its draw and which of its prompt groups a training step took; a checkpoint records the state before
 * the oldest batch not wholly trained and the groups already trained of it and of the batches after it
 * (TrainerState.async). A resumed run draws those batches again (the same prompts, the same seeds) and
 * generates only their untrained groups.
 */
import type { PromptLoaderState } from "../data/loader.js";
import { type AsyncDataState, TrainerCheckpointError } from "./checkpoint.js";

/** The loader's and the driver RNG's state at a point between two draws. */
export interface DrawPoint {
  loader: PromptLoaderState;
  rng: number;
}

interface DrawnBatch {
  seq: number;
  before: DrawPoint;
  after: DrawPoint;
  groups: number;
  trained: Set<number>;
}

export class TrainedLedger {
  private readonly drawn: DrawnBatch[] = [];
  private base: DrawPoint;
  private baseSeq: number;
  private nextSeq: number;

  /** `start`: the state before loader batch number `seq` (0-based count of the run's batches). */
  constructor(start: DrawPoint, seq: number) {
    this.base = start;
    this.baseSeq = seq;
    this.nextSeq = seq;
  }

  /** The number the next batch drawn gets (0-based count of the run's batches, across resumes). */
  get nextBatch(): number {
    return this.nextSeq;
  }

  /**
   * A batch of `groups` prompt groups was drawn between `before` and `after`; `trained` lists those a
   * step before the checkpoint already took. Returns the batch's number.
   */
  drew(before: DrawPoint, after: DrawPoint, groups: number, trained: readonly number[] = []): number {
    const seq = this.nextSeq++;
    for (const g of trained)
      if (!(Number.isInteger(g) && g >= 0 && g < groups))
        throw new TrainerCheckpointError(
          `the checkpoint lists prompt group ${g} of loader batch ${seq} as trained, but the batch has ${groups} groups`,
        );
    this.drawn.push({ seq, before, after, groups, trained: new Set(trained) });
    this.prune();
    return seq;
  }

  /** A training step took groups `groups` of batch `seq` (all of them when omitted). */
  took(seq: number, groups?: readonly number[]): void {
    const b = this.drawn.find((d) => d.seq === seq);
    if (!b) throw new Error(`loader batch ${seq} is not one drawn and waiting to be trained`);
    for (const g of groups ?? Array.from({ length: b.groups }, (_, i) => i)) {
      if (b.trained.has(g)) throw new Error(`prompt group ${g} of loader batch ${seq} was trained twice`);
      b.trained.add(g);
    }
    this.prune();
  }

  /** The batches wholly trained from the oldest on are done with. */
  private prune(): void {
    while (this.drawn.length && this.drawn[0]!.trained.size === this.drawn[0]!.groups) {
      const done = this.drawn.shift()!;
      this.base = done.after;
      this.baseSeq = done.seq + 1;
    }
  }

  /** The checkpoint's data position: the loader and RNG at the oldest batch not wholly trained, and what of it (and after it) was. */
  point(): DrawPoint & { async: AsyncDataState } {
    const trained = this.drawn.map((d) => [...d.trained].sort((a, b) => a - b));
    while (trained.length && trained.at(-1)!.length === 0) trained.pop();
    return { ...this.base, async: { batch: this.baseSeq, trained } };
  }
}
