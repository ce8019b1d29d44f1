/**
 * Scorers chosen by `data_source`, pluggable: `registerRewardScorer("my_source", fn)` (or a RegExp).
 * Anything unregistered is scored as a math answer (the ToRL data sources aime24, aime25, math500,
 * numina, ... all are). The last registration that matches wins, so a user can override the default.
 */
import { computeMathScore, type ExecutionInfo, type MathRewardType, type MathScoreResult } from "./score.js";

export interface RewardScorerInput {
  solution: string;
  groundTruth: string;
  dataSource: string;
  execution?: ExecutionInfo;
  extraInfo?: unknown;
}

export interface RewardScorerOptions {
  rewardType: MathRewardType;
  executionErrorPenalty: boolean;
  executionPenaltyValue: number;
}

/** A scorer returns the score and, where it has them, the verdict and extracted answer. */
export type RewardScorer = (
  input: RewardScorerInput,
  options: RewardScorerOptions,
) => MathScoreResult | Promise<MathScoreResult>;

/** The built-in scorer: last \boxed{} answer against the ground truth, with the reward type and penalty. */
export const mathRewardScorer: RewardScorer = (input, options) =>
  computeMathScore(input.solution, input.groundTruth, options, input.execution);

interface Entry {
  match: string | RegExp;
  scorer: RewardScorer;
}

const entries: Entry[] = [];

/** Registers a scorer for a data source name (exact) or pattern; returns a function that removes it. */
export function registerRewardScorer(match: string | RegExp, scorer: RewardScorer): () => void {
  const entry = { match, scorer };
  entries.push(entry);
  return () => {
    const i = entries.indexOf(entry);
    if (i >= 0) entries.splice(i, 1);
  };
}

/** The scorer for a data source: the last matching registration, else the math scorer. */
export function rewardScorerFor(dataSource: string): RewardScorer {
  for (let i = entries.length - 1; i >= 0; i--) {
    const { match, scorer } = entries[i]!;
    if (typeof match === "string" ? match === dataSource : match.test(dataSource)) return scorer;
  }
  return mathRewardScorer;
}
