/** The task MathScorePool's threads run: grades one chunk of a batch with the math scorer. */
import { verifierErrors } from "./equivalence.js";
import type { RewardScorerInput, RewardScorerOptions } from "./registry.js";
import { computeMathScore, type MathScoreResult } from "./score.js";

export interface ScoreChunk {
  inputs: RewardScorerInput[];
  options: RewardScorerOptions;
}

export interface ScoredChunk {
  results: MathScoreResult[];
  /** Comparator failures in this chunk (see verifierErrors), and the first one seen in this thread. */
  verifierErrors: number;
  firstError: string | null;
}

export function scoreChunk({ inputs, options }: ScoreChunk): ScoredChunk {
  const before = verifierErrors.count;
  const results = inputs.map((x) => computeMathScore(x.solution, x.groundTruth, options, x.execution));
  return { results, verifierErrors: verifierErrors.count - before, firstError: verifierErrors.first };
}
