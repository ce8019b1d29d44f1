/**
 * The task and its reward: small arithmetic questions written for this example, or the tiny ToRL
 * recipe's problems (from @torl-ts/verl, the ones the tiny base model learned to solve with Python),
 * and the reward functions, among them the project's verifier. Nothing here knows about actors or models.
 */
import {
  computeMathScore,
  type ExecutionInfo,
  generateProblems,
  renderPrompt,
  seededRandom,
} from "@torl-ts/verl";

export interface Question {
  question: string;
  /** The exact answer as a decimal integer string. */
  answer: string;
}

export { seededRandom };

/**
 * Where the questions come from: `arithmetic`, sums and products written for this example; `tiny`,
 * the tiny ToRL recipe's problems (half of them need exact multi-digit arithmetic: the Python tool pays).
 */
export type TaskName = "arithmetic" | "tiny";
export const TASKS: readonly TaskName[] = ["arithmetic", "tiny"];

/** `count` questions of a task, deterministic for a seed. */
export function makeQuestions(count: number, seed: number, task: TaskName = "arithmetic"): Question[] {
  if (task === "tiny")
    return generateProblems({ count, seed }).map((p) => ({ question: p.question, answer: p.answer }));
  return arithmeticQuestions(count, seed);
}

/**
 * `count` questions "What is a plus b?" / "What is a times b?", phrased like the tiny ToRL corpus's easy
 * problems but with larger operands (a tiny base model gets some right, not all: room to learn).
 */
function arithmeticQuestions(count: number, seed: number): Question[] {
  const random = seededRandom(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  return Array.from({ length: count }, () => {
    if (random() < 0.5) {
      const [a, b] = [int(1, 30), int(1, 30)];
      return { question: `What is ${a} plus ${b}?`, answer: String(a + b) };
    }
    const [a, b] = [int(2, 12), int(2, 12)];
    return { question: `What is ${a} times ${b}?`, answer: String(a * b) };
  });
}

/**
 * The prompt the policy continues, rendered by a registered template: tir_base_0309 is ToRL's raw-text
 * template (the one the tiny base model was trained on); chat is ChatML.
 */
export function promptFor(question: string, template: string): string {
  return renderPrompt(template, [{ role: "user", content: question }]);
}

/** The content of the last \boxed{...} (nested braces allowed), else the last integer, else null. */
export function extractAnswer(response: string): string | null {
  const start = response.lastIndexOf("\\boxed{");
  if (start >= 0) {
    let depth = 0;
    for (let i = start + "\\boxed{".length - 1; i < response.length; i++) {
      if (response[i] === "{") depth++;
      else if (response[i] === "}" && --depth === 0) return response.slice(start + 7, i).trim();
    }
  }
  const numbers = response.match(/-?\d+/g);
  return numbers ? numbers[numbers.length - 1]! : null;
}

/**
 * A reward function: the response text, the reference answer and what the rollout recorded about the
 * response's tool calls (`executionInfoFromRollout`) in, a score out.
 */
export type RewardFn = (response: string, answer: string, execution: ExecutionInfo) => number;

const rewardFunctions = {
  /** 1 when the extracted answer equals the reference exactly, else 0. */
  exact_match: (response, answer) => (extractAnswer(response) === answer ? 1 : 0),
  /**
   * The share of the response's characters that are digits. A randomly initialised model earns
   * different amounts of it, so the smoke test can watch a policy-gradient step change the model.
   */
  digit_fraction: (response) =>
    response.length ? (response.match(/\d/g)?.length ?? 0) / response.length : 0,
  /** The project's verifier with ToRL's reward: +1 when the last \boxed{} answer is equivalent, else -1. */
  verifier: (response, answer) => computeMathScore(response, answer).score,
  /** The verifier, and 0.5 less when the response ran code that failed (ToRL's execution penalty). */
  verifier_exec_penalty: (response, answer, execution) =>
    computeMathScore(response, answer, { executionErrorPenalty: true }, execution).score,
} satisfies Record<string, RewardFn>;

export type RewardName = keyof typeof rewardFunctions;

/** The rewards by name, each callable with the full RewardFn signature. */
export const REWARDS: Record<RewardName, RewardFn> = rewardFunctions;

/** Thrown for a reward name that is not in REWARDS. */
export class UnknownRewardError extends Error {
  override name = "UnknownRewardError";
  constructor(readonly reward: string) {
    super(`unknown reward "${reward}" (known: ${Object.keys(REWARDS).join(", ")})`);
  }
}

export function rewardFn(name: string): RewardFn {
  if (!Object.hasOwn(REWARDS, name)) throw new UnknownRewardError(name);
  return REWARDS[name as RewardName];
}
