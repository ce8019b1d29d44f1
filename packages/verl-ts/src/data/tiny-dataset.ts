/**
 * The tiny recipe's data as veRL dataset rows: generated problems (tiny-problems.ts) with a held-out
 * split that is the one the tiny base model was evaluated on (`heldOutProblems`), and a train split
 * that never contains a held-out question.
 *
 * Row schema (veRL's RL dataset): data_source "tiny/<kind>", prompt [{role: "user", content: question}]
 * (the tir_base_0309 template renders it), ability "math", reward_model {ground_truth, style: "rule"},
 * extra_info {split, index, id, kind, hard, question}.
 */
import type { RlDatasetRow } from "./rows.js";
import { generateProblems, type Problem, TinyDatasetError } from "./tiny-problems.js";

/**
 * The held-out split the recipe evaluates on: `trainTestSplit({ seed: RECIPE_SPLIT_SEED, testCount <= HELD_OUT_RESERVE })`.
 * Its hard questions never appear in the tiny base model's pretraining corpus.
 */
export const RECIPE_SPLIT_SEED = 1;
export const HELD_OUT_RESERVE = 2000;

/** The held-out problems of a split seed (the same list trainTestSplit's `test` starts with). */
export function heldOutProblems(count: number, splitSeed = RECIPE_SPLIT_SEED): Problem[] {
  return generateProblems({ count, seed: splitSeed ^ 0x5eed, split: "test" });
}

/**
 * Questions the pretraining corpus must not contain: the hard held-out ones. The easy kinds are small
 * fact tables (81 sums, 90 differences, 64 products) that a base model knows whole, like a real base
 * model knows its times tables, so they may appear; the hard ones would otherwise be memorised answers.
 */
export function pretrainExclusions(splitSeed = RECIPE_SPLIT_SEED, reserve = HELD_OUT_RESERVE): Set<string> {
  return new Set(
    heldOutProblems(reserve, splitSeed)
      .filter((p) => p.hard)
      .map((p) => p.question),
  );
}

/** Prefix of the tiny recipe's data sources: `tiny/<kind>`. */
export const TINY_SOURCE_PREFIX = "tiny/";

export function problemRow(problem: Problem, split: "train" | "val", index: number): RlDatasetRow {
  return {
    data_source: `${TINY_SOURCE_PREFIX}${problem.kind}`,
    prompt: [{ role: "user", content: problem.question }],
    ability: "math",
    reward_model: { ground_truth: problem.answer, style: "rule" },
    extra_info: {
      split,
      index,
      id: problem.id,
      kind: problem.kind,
      hard: problem.hard,
      question: problem.question,
    },
  };
}

export interface TinyDatasetOptions {
  trainCount: number;
  valCount: number;
  /** The split seed (the base model's held-out set is made with RECIPE_SPLIT_SEED). */
  splitSeed?: number;
  /** Share of hard problems in the train split (the held-out split is 50/50 as the base was measured). */
  hardFraction?: number;
}

/** The train and held-out rows of the tiny recipe; deterministic for the options. */
export function tinyDataset(options: TinyDatasetOptions): { train: RlDatasetRow[]; val: RlDatasetRow[] } {
  const { train, val } = tinySplitProblems(options);
  return {
    train: train.map((p, i) => problemRow(p, "train", i)),
    val: val.map((p, i) => problemRow(p, "val", i)),
  };
}

/** The problems of tinyDataset's rows (with their programs and answers), in the same order. */
export function tinySplitProblems(options: TinyDatasetOptions): { train: Problem[]; val: Problem[] } {
  const { trainCount, valCount, splitSeed = RECIPE_SPLIT_SEED, hardFraction = 0.5 } = options;
  if (!(Number.isInteger(trainCount) && trainCount > 0))
    throw new TinyDatasetError(`train problem count must be a positive integer, got ${trainCount}`);
  if (!(Number.isInteger(valCount) && valCount >= 0))
    throw new TinyDatasetError(`held-out problem count must be an integer >= 0, got ${valCount}`);
  if (!(hardFraction >= 0 && hardFraction <= 1))
    throw new TinyDatasetError(`hard fraction must be in [0, 1], got ${hardFraction}`);
  const heldOut = heldOutProblems(valCount, splitSeed);
  const exclude = pretrainExclusions(splitSeed);
  for (const p of heldOut) exclude.add(p.question);
  const train = generateProblems({
    count: trainCount,
    seed: splitSeed,
    hardFraction,
    split: "train",
    exclude,
  });
  return { train, val: heldOut };
}
