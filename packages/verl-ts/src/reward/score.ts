/**
 * compute_score for math answers, with ToRL's reward types:
 *  - `default`     +1 correct, -1 wrong or no \boxed{} answer (the paper's R_ans);
 *  - `v2.wformat`  +1 correct, -0.5 wrong boxed answer, -1 no boxed answer;
 *  - `accuracy`    1 correct, 0 otherwise.
 * Execution penalty (the paper's R_exec, veRL key `data.execution_error_penalty`): -0.5 when the
 * response ran code and the code failed. Unlike the released ToRL code, which subtracts whenever
 * `execution_passes == 0` and so also penalises responses that never wrote code, a response without
 * code is not penalised here: the penalty is about broken tool use, not about not using the tool.
 */

import { InputError } from "@torl-ts/core";
import { isEquivalentAnswer } from "./equivalence.js";
import { extractBoxedAnswer, groundTruthAnswer } from "./extract.js";

export const MATH_REWARD_TYPES = ["default", "v2.wformat", "accuracy"] as const;
export type MathRewardType = (typeof MATH_REWARD_TYPES)[number];

/** Thrown for an unknown reward type; names the value and the accepted ones. */
export class RewardTypeError extends InputError {
  override name = "RewardTypeError";
  constructor(readonly rewardType: string) {
    super(`unknown reward type '${rewardType}'; one of: ${MATH_REWARD_TYPES.join(", ")}`);
  }
}

/**
 * What the rollout recorded about tool use for one response; `executionInfoFromRollout` builds it
 * from a rollout row. Only the execution penalty reads it.
 */
export interface ExecutionInfo {
  /** The response made at least one tool call (ran code). */
  hadCode: boolean;
  /** Every call succeeded (ToRL's execution_passes = 1). Meaningless when hadCode is false. */
  passed: boolean;
}

/** A rollout row's tool columns: `execution_passes` and, when the batch has it, `num_tool_calls`. */
export interface RolloutExecution {
  /** 1 when every tool call of the row passed, also when it made none (the TIR rollout's rule); else 0. */
  executionPasses: number;
  /** Tool calls the row made. */
  numToolCalls?: number;
}

/**
 * ExecutionInfo of a rollout row (a `TirSample`, or the `execution_passes` / `num_tool_calls` columns
 * of a rollout batch): `hadCode` = numToolCalls > 0, `passed` = executionPasses >= 1. Without
 * numToolCalls (a batch from elsewhere), a row counts as having run code when executionPasses < 1,
 * since a row without calls has executionPasses 1.
 */
export function executionInfoFromRollout(row: RolloutExecution): ExecutionInfo {
  const passed = row.executionPasses >= 1;
  return { hadCode: row.numToolCalls === undefined ? !passed : row.numToolCalls > 0, passed };
}

export interface MathScoreOptions {
  rewardType?: MathRewardType;
  /** Subtract `executionPenaltyValue` when code was present and failed. Default false (as released). */
  executionErrorPenalty?: boolean;
  /** Default 0.5. */
  executionPenaltyValue?: number;
}

export interface MathScoreResult {
  score: number;
  correct: boolean;
  /** The extracted final answer, or null when the response has none. */
  extracted: string | null;
}

export function checkRewardType(rewardType: string): MathRewardType {
  if (!(MATH_REWARD_TYPES as readonly string[]).includes(rewardType)) throw new RewardTypeError(rewardType);
  return rewardType as MathRewardType;
}

/**
 * Answer reward alone, from the verdict and whether a \boxed{} answer was found:
 * `default` +1 / -1 / -1, `v2.wformat` +1 / -0.5 / -1, `accuracy` 1 / 0 / 0 (correct / wrong boxed
 * answer / no boxed answer).
 */
export function answerReward(rewardType: MathRewardType, correct: boolean, answered: boolean): number {
  switch (rewardType) {
    case "default":
      return correct ? 1 : -1;
    case "v2.wformat":
      return correct ? 1 : answered ? -0.5 : -1;
    case "accuracy":
      return correct ? 1 : 0;
  }
}

/**
 * Scores one response against its ground truth (veRL's `compute_score(solution_str, ground_truth)`):
 * the last \boxed{} answer is compared with the ground truth (`isEquivalentAnswer`), `answerReward`
 * gives the score for the reward type (default `default`), and with `executionErrorPenalty` the
 * penalty (default 0.5) is subtracted when `execution` says code ran and failed. `extracted` is null
 * when the response has no \boxed{} answer.
 */
export function computeMathScore(
  solution: string,
  groundTruth: string,
  options: MathScoreOptions = {},
  execution?: ExecutionInfo,
): MathScoreResult {
  const rewardType = checkRewardType(options.rewardType ?? "default");
  const extracted = extractBoxedAnswer(solution);
  const correct = extracted !== null && isEquivalentAnswer(extracted, groundTruthAnswer(groundTruth));
  let score = answerReward(rewardType, correct, extracted !== null);
  if (options.executionErrorPenalty && execution?.hadCode && !execution.passed) {
    score -= options.executionPenaltyValue ?? 0.5;
  }
  return { score, correct, extracted };
}
