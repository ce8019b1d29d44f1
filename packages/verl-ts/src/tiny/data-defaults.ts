/** The tiny recipe's data splits, as `torl data tiny` writes them by default. */
import { RECIPE_SPLIT_SEED } from "../data/index.js";

/** The tiny recipe's splits (the main job's torl.train_problems, val_problems, hard_fraction, split_seed). */
export const TINY_DATA_DEFAULTS = {
  trainProblems: 4000,
  valProblems: 200,
  hardFraction: 0.5,
  splitSeed: RECIPE_SPLIT_SEED,
} as const;
