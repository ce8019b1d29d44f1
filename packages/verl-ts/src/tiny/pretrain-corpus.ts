/**
 * What pretraining reads: the two-style corpus (the recipe's held-out hard questions left out) and the
 * order its rows are batched in.
 */
import { generateProblems, pretrainExclusions, seededRandom } from "../data/index.js";
import { buildCorpus, type CorpusDocument } from "./corpus.js";
import type { TrainingRow } from "./tiny-model.js";

export interface PretrainCorpusOptions {
  /** Documents in the corpus (cycled in shuffled epochs). */
  corpusDocs: number;
  seed: number;
  codeFraction: number;
  hardFraction: number;
  /** Seed of the recipe's train/held-out split whose hard held-out questions are kept out. */
  splitSeed: number;
}

/** The pretraining corpus: problems with the held-out hard questions left out, two solution styles. */
export function pretrainCorpus(options: PretrainCorpusOptions): CorpusDocument[] {
  const problems = generateProblems({
    count: options.corpusDocs,
    seed: options.seed * 7919 + 101,
    hardFraction: options.hardFraction,
    split: "pretrain",
    exclude: pretrainExclusions(options.splitSeed),
  });
  return buildCorpus(problems, { seed: options.seed * 7919 + 202, codeFraction: options.codeFraction });
}

/** Batches of row indices: shuffled each epoch, sorted by length inside windows of 8 batches to cut padding. */
export function* batchOrder(
  rows: readonly TrainingRow[],
  batchSize: number,
  seed: number,
): Generator<number[]> {
  const random = seededRandom(seed);
  for (;;) {
    const order = rows.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    const window = batchSize * 8;
    for (let w = 0; w + batchSize <= order.length; w += window) {
      const chunk = order.slice(w, w + window).sort((a, b) => rows[a]!.ids.length - rows[b]!.ids.length);
      const batches: number[][] = [];
      for (let s = 0; s + batchSize <= chunk.length; s += batchSize)
        batches.push(chunk.slice(s, s + batchSize));
      for (let i = batches.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [batches[i], batches[j]] = [batches[j]!, batches[i]!];
      }
      yield* batches;
    }
  }
}
