/**
 * Scorers chosen by `data_source`, pluggable: `registerRewardScorer("my_source", fn)` (or a RegExp).
 * Anything unregistered is scored as a math answer (the ToRL data sources aime24, aime25, math500,
 * numina, ... all are). The last registration that matches wins, so a user can override the default.
 */
import { InputError } from "@torl-ts/core";
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

/**
 * What a scorer returns: a finite score, or the score with the verdict (`correct`, default score > 0)
 * and the extracted answer (`extracted`, default null), as custom_reward_function may.
 */
export type RewardScorerResult = number | { score: number; correct?: boolean; extracted?: string | null };

/** A scorer returns the score and, where it has them, the verdict and extracted answer. */
export type RewardScorer = (
  input: RewardScorerInput,
  options: RewardScorerOptions,
) => RewardScorerResult | Promise<RewardScorerResult>;

/** A scorer that cannot be registered, or whose result is not a score: names the scorer and data source. */
export class RewardScorerError extends InputError {
  override name = "RewardScorerError";
}

/** The built-in scorer: last \boxed{} answer against the ground truth, with the reward type and penalty. */
export const mathRewardScorer = (input: RewardScorerInput, options: RewardScorerOptions): MathScoreResult =>
  computeMathScore(input.solution, input.groundTruth, options, input.execution);

interface Entry {
  match: string | RegExp;
  scorer: RewardScorer;
}

const entries: Entry[] = [];

/** How a registration is named in messages: registerRewardScorer("name") or registerRewardScorer(/re/). */
export function describeRewardScorerMatch(match: string | RegExp): string {
  return `registerRewardScorer(${typeof match === "string" ? JSON.stringify(match) : String(match)})`;
}

/** Registers a scorer for a data source name (exact) or pattern; returns a function that removes it. */
export function registerRewardScorer(match: string | RegExp, scorer: RewardScorer): () => void {
  if (!(typeof match === "string" && match !== "") && !(match instanceof RegExp))
    throw new RewardScorerError(
      `registerRewardScorer: the data source must be a non-empty string or a RegExp, got ${shownValue(match)}`,
    );
  // a g or y RegExp keeps lastIndex between test() calls, so it would match only every other row
  if (match instanceof RegExp && (match.global || match.sticky))
    throw new RewardScorerError(
      `registerRewardScorer(${String(match)}): a RegExp with the g or y flag matches only every other data source (test() keeps lastIndex); drop the flag`,
    );
  if (typeof scorer !== "function")
    throw new RewardScorerError(
      `${describeRewardScorerMatch(match)}: the scorer must be a function (input, options) => score, got ${shownValue(scorer)}`,
    );
  const entry = { match, scorer };
  entries.push(entry);
  return () => {
    const i = entries.indexOf(entry);
    if (i >= 0) entries.splice(i, 1);
  };
}

/** The registration for a data source (the last matching one), or null when the math scorer applies. */
export function rewardScorerEntryFor(
  dataSource: string,
): { match: string | RegExp; scorer: RewardScorer } | null {
  for (let i = entries.length - 1; i >= 0; i--) {
    const { match, scorer } = entries[i]!;
    if (typeof match === "string" ? match === dataSource : match.test(dataSource)) return { match, scorer };
  }
  return null;
}

/** The scorer for a data source: the last matching registration, else the math scorer. */
export function rewardScorerFor(dataSource: string): RewardScorer {
  return rewardScorerEntryFor(dataSource)?.scorer ?? mathRewardScorer;
}

/**
 * A scorer's result as a MathScoreResult, or a RewardScorerError naming `who` (the scorer) and the data
 * source: the score must be a finite number (a NaN or a string would reach the advantages as NaN or
 * as something else), `correct` a boolean and `extracted` a string or null when given.
 */
export function checkRewardScorerResult(r: unknown, who: string, dataSource: string): MathScoreResult {
  const bad = (why: string) =>
    new RewardScorerError(
      `${who} returned ${shownValue(r)} for data source ${JSON.stringify(dataSource)}: ${why}; expected a finite number or {score: number, correct?: boolean, extracted?: string | null}`,
    );
  if (typeof r === "number") {
    if (!Number.isFinite(r)) throw bad("the score is not finite");
    return { score: r, correct: r > 0, extracted: null };
  }
  if (r === null || typeof r !== "object") throw bad("not a score");
  const o = r as { score?: unknown; correct?: unknown; extracted?: unknown };
  if (typeof o.score !== "number") throw bad("score is not a number");
  if (!Number.isFinite(o.score)) throw bad("the score is not finite");
  if (o.correct !== undefined && typeof o.correct !== "boolean") throw bad("correct is not a boolean");
  if (o.extracted !== undefined && o.extracted !== null && typeof o.extracted !== "string")
    throw bad("extracted is not a string or null");
  return {
    score: o.score,
    correct: o.correct ?? o.score > 0,
    extracted: (o.extracted as string | null | undefined) ?? null,
  };
}

function shownValue(v: unknown): string {
  if (typeof v === "function") return "a function";
  if (typeof v === "number" || v === undefined || typeof v === "bigint") return String(v);
  if (v instanceof Promise) return "a Promise";
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
