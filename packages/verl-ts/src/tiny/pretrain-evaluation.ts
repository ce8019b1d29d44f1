/**
 * Measuring the base model the way the recipe will use it: the TIR rollout with at most one call
 * (ToRL's C=1) of the sandboxed Python interpreter, on held-out problems, greedy and at temperature 1.
 */
import { heldOutProblems, type Problem, RECIPE_SPLIT_SEED } from "../data/index.js";
import { loadPretrained, type Qwen2Model, type Tokenizer } from "../models/index.js";
import { extractBoxedAnswer } from "../reward/index.js";
import { createCodeInterpreterTool, type Tool, tirRollout } from "../rollout/index.js";
import { tinyPrompt } from "./tiny-model.js";

export interface RolloutRecord {
  problem: Problem;
  response: string;
  extracted: string | null;
  correct: boolean;
  usedCode: boolean;
  /** Whether the code ran without error (only meaningful when usedCode). */
  passed: boolean;
}

export interface TirFigures {
  n: number;
  accuracy: number;
  boxedRatio: number;
  codeRatio: number;
  /** Of the responses with code: the share whose code ran without error. */
  passRatio: number;
  accuracyHard: number;
  accuracyEasy: number;
  codeRatioHard: number;
  codeRatioEasy: number;
  /** Accuracy of responses that used code / that did not (null when there were none). */
  accuracyWithCode: number | null;
  accuracyWithoutCode: number | null;
  /** Of the passing code calls: the share whose boxed answer equals the printed output. */
  copiedOutputRatio: number | null;
}

export interface TirRolloutsOptions {
  /** 0 = greedy. */
  temperature: number;
  seed?: number;
  /** Response tokens, tool output included; default 192 (two generation rounds of 96). */
  maxResponseLength?: number;
  /** The Python tool; default a sandbox started (and closed) for this call. */
  tool?: Tool;
}

/** Seconds a measured code run may take. */
const RUN_TIMEOUT_S = 5;

/** Runs `use` with the sandboxed Python interpreter, closing the sandbox after. */
async function withSandboxedPython<T>(use: (tool: Tool) => Promise<T>): Promise<T> {
  const tool = await createCodeInterpreterTool({
    sandbox_actors: 0,
    sandbox_workers: 2,
    run_timeout: RUN_TIMEOUT_S,
  });
  try {
    return await use(tool);
  } finally {
    await tool.close();
  }
}

/**
 * Rollouts of `problems` with at most one sandboxed Python call: generate until "```output", run the
 * round's last ```python block in the sandbox, append its output, generate to the end.
 */
export async function tirRollouts(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  problems: readonly Problem[],
  options: TirRolloutsOptions,
): Promise<RolloutRecord[]> {
  const { tool } = options;
  if (!tool)
    return withSandboxedPython((sandboxed) =>
      tirRollouts(model, tokenizer, problems, { ...options, tool: sandboxed }),
    );
  const prompts = problems.map((p) => tokenizer.encode(tinyPrompt(p.question)));
  const { samples } = await tirRollout(model, tokenizer, prompts, {
    tool,
    numLlmCallsAvailable: 1,
    maxResponseLength: options.maxResponseLength ?? 192,
    temperature: options.temperature,
    seed: options.seed ?? 0,
  });
  return problems.map((problem, i) => {
    const s = samples[i]!;
    const extracted = extractBoxedAnswer(s.text);
    return {
      problem,
      response: s.text,
      extracted,
      correct: extracted === problem.answer,
      usedCode: s.numToolCalls > 0,
      passed: s.numToolCalls > 0 && s.numToolPasses === s.numToolCalls,
    };
  });
}

const ratio = (num: number, den: number): number => (den === 0 ? 0 : num / den);
const ratioOrNull = (num: number, den: number): number | null => (den === 0 ? null : num / den);

export function tirFigures(records: readonly RolloutRecord[]): TirFigures {
  const hard = records.filter((r) => r.problem.hard);
  const easy = records.filter((r) => !r.problem.hard);
  const code = records.filter((r) => r.usedCode);
  const plain = records.filter((r) => !r.usedCode);
  const passing = code.filter((r) => r.passed);
  const correct = (r: RolloutRecord) => r.correct;
  const usedCode = (r: RolloutRecord) => r.usedCode;
  /** The share of `xs` for which `f` holds (0 of none). */
  const share = (xs: readonly RolloutRecord[], f: (r: RolloutRecord) => boolean) =>
    ratio(xs.filter(f).length, xs.length);
  /** The same, null of none. */
  const shareOrNull = (xs: readonly RolloutRecord[], f: (r: RolloutRecord) => boolean) =>
    ratioOrNull(xs.filter(f).length, xs.length);
  return {
    n: records.length,
    accuracy: share(records, correct),
    boxedRatio: share(records, (r) => r.extracted !== null),
    codeRatio: share(records, usedCode),
    passRatio: share(code, (r) => r.passed),
    accuracyHard: share(hard, correct),
    accuracyEasy: share(easy, correct),
    codeRatioHard: share(hard, usedCode),
    codeRatioEasy: share(easy, usedCode),
    accuracyWithCode: shareOrNull(code, correct),
    accuracyWithoutCode: shareOrNull(plain, correct),
    copiedOutputRatio: shareOrNull(passing, (r) => {
      const m = /```output\n([\s\S]*?)\n```\n/.exec(r.response);
      return m !== null && r.extracted === m[1]!.trim();
    }),
  };
}

export interface BaseEvaluation {
  model: string;
  heldOut: { splitSeed: number; count: number };
  greedy: TirFigures;
  /** Temperature-1 sampling, `samples` per problem. */
  sampled: TirFigures & { samples: number };
  examples: { question: string; answer: string; greedy: string; correct: boolean }[];
}

/** Greedy and temperature-1 figures of a model directory on the first `count` held-out problems. */
export async function evaluateBase(
  dir: string,
  count: number,
  options: { splitSeed?: number; samples?: number; seed?: number } = {},
): Promise<BaseEvaluation> {
  const { model, tokenizer } = loadPretrained(dir, { trainable: false });
  try {
    const problems = heldOutProblems(count, options.splitSeed ?? RECIPE_SPLIT_SEED);
    const samples = options.samples ?? 2;
    const repeated = problems.flatMap((p) => Array.from({ length: samples }, () => p));
    const [greedy, sampled] = await withSandboxedPython(async (tool) => [
      await tirRollouts(model, tokenizer, problems, { temperature: 0, tool }),
      await tirRollouts(model, tokenizer, repeated, { temperature: 1, seed: options.seed ?? 1, tool }),
    ]);
    return {
      model: dir,
      heldOut: { splitSeed: options.splitSeed ?? RECIPE_SPLIT_SEED, count },
      greedy: tirFigures(greedy),
      sampled: { ...tirFigures(sampled), samples },
      examples: greedy.slice(0, 12).map((r) => ({
        question: r.problem.question,
        answer: r.problem.answer,
        greedy: r.response,
        correct: r.correct,
      })),
    };
  } finally {
    model.dispose();
  }
}

function pct(x: number | null): string {
  return x === null ? "-" : `${(x * 100).toFixed(1)}%`;
}

export function describeFigures(name: string, f: TirFigures): string {
  return (
    `${name}: acc ${pct(f.accuracy)} (hard ${pct(f.accuracyHard)}, easy ${pct(f.accuracyEasy)}), boxed ${pct(f.boxedRatio)}, ` +
    `code ratio ${pct(f.codeRatio)} (hard ${pct(f.codeRatioHard)}, easy ${pct(f.codeRatioEasy)}), pass ${pct(f.passRatio)}, ` +
    `acc with code ${pct(f.accuracyWithCode)} / without ${pct(f.accuracyWithoutCode)}, output copied ${pct(f.copiedOutputRatio)}`
  );
}
