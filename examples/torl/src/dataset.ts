/**
 * The tiny recipe's data as veRL dataset rows: generated problems (problems.ts) with a held-out split
 * that is the one the tiny base model was evaluated on (tiny-model.ts: heldOutProblems), and a train
 * split that never contains a held-out question.
 *
 * Row schema (veRL's RL dataset): data_source "tiny/<kind>", prompt [{role: "user", content: question}]
 * (the tir_base_0309 template renders it), ability "math", reward_model {ground_truth, style: "rule"},
 * extra_info {split, index, id, kind, hard, question}.
 */

import { InputError } from "@torl-ts/core";
import type { RlDatasetRow } from "@torl-ts/verl";
import { generateProblems, type Problem } from "./problems.js";
import { heldOutProblems, pretrainExclusions, RECIPE_SPLIT_SEED } from "./tiny-model.js";

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

export class TinyDatasetError extends InputError {
  override name = "TinyDatasetError";
}

/** The train and held-out rows of the tiny recipe; deterministic for the options. */
export function tinyDataset(options: TinyDatasetOptions): { train: RlDatasetRow[]; val: RlDatasetRow[] } {
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
  return {
    train: train.map((p, i) => problemRow(p, "train", i)),
    val: heldOut.map((p, i) => problemRow(p, "val", i)),
  };
}
