/**
 * The pretraining corpus of the tiny base model: solutions in two styles, like Qwen2.5-Math's base
 * model has seen. About 40% reason with a Python block and its output; the rest reason in plain text.
 * A share of the code solutions carry a bug (a missing import, a typo), so their output is an error
 * and the answer that follows is a guess: the base model starts out writing code that sometimes fails,
 * which gives RL a pass ratio to improve.
 */
import { type Problem, seededRandom } from "../data/index.js";

export type SolutionStyle = "code" | "code_error" | "plain";

export interface CorpusOptions {
  seed: number;
  /** Fraction of solutions that use code (including the buggy ones). */
  codeFraction?: number;
  /** Fraction of code solutions whose code fails. */
  codeErrorFraction?: number;
}

export interface CorpusDocument {
  problem: Problem;
  style: SolutionStyle;
  /** The response text after the prompt (no end-of-text marker). */
  response: string;
}

/** The observation block ToRL appends after a tool call (wrapObservation in packages/verl-ts/src/rollout/code-interpreter.ts). */
export function observationBlock(observation: string): string {
  return "```output\n" + observation + "\n```\n";
}

function breakCode(code: string, random: () => number): { code: string; error: string } {
  if (code.startsWith("import math\n")) {
    return { code: code.slice("import math\n".length), error: "NameError: name 'math' is not defined" };
  }
  if (random() < 0.5) {
    return { code: code.replace("print(", "prnt("), error: "NameError: name 'prnt' is not defined" };
  }
  return { code: code.replace(/\)$/, ""), error: "SyntaxError: '(' was never closed" };
}

/** A wrong but plausible answer: what "mental arithmetic" gets when it slips. */
export function plausibleWrongAnswer(answer: string, random: () => number): string {
  const value = BigInt(answer);
  const digits = answer.replace("-", "").length;
  const delta = BigInt(1 + Math.floor(random() * Math.max(1, 10 ** Math.max(0, digits - 2))));
  const wrong = random() < 0.5 ? value + delta : value - delta;
  return (wrong === value ? value + 1n : wrong).toString();
}

export function writeSolution(problem: Problem, style: SolutionStyle, random: () => number): string {
  const boxed = (answer: string) => `The answer is \\boxed{${answer}}.`;
  if (style === "plain") {
    return `We compute ${problem.work} = ${problem.answer}.\n${boxed(problem.answer)}`;
  }
  if (style === "code") {
    return (
      "Let me compute it with Python.\n```python\n" +
      problem.code +
      "\n```\n" +
      observationBlock(problem.answer) +
      boxed(problem.answer)
    );
  }
  const broken = breakCode(problem.code, random);
  const guess = plausibleWrongAnswer(problem.answer, random);
  return (
    "Let me compute it with Python.\n```python\n" +
    broken.code +
    "\n```\n" +
    observationBlock(broken.error) +
    `The code failed, so we estimate ${problem.work} = ${guess}.\n` +
    boxed(guess)
  );
}

/** One document per problem, style drawn with the given fractions. */
export function buildCorpus(problems: readonly Problem[], options: CorpusOptions): CorpusDocument[] {
  const { seed, codeFraction = 0.4, codeErrorFraction = 0.25 } = options;
  const random = seededRandom(seed);
  return problems.map((problem) => {
    let style: SolutionStyle = "plain";
    if (random() < codeFraction) style = random() < codeErrorFraction ? "code_error" : "code";
    return { problem, style, response: writeSolution(problem, style, random) };
  });
}
