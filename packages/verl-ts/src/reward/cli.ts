/**
 * `pnpm torl verify`: JSONL {"solution", "ground_truth"} on stdin -> one JSONL {"correct", "extracted",
 * "score"} per input line, in order. A malformed line is reported on stderr with its line number and
 * answered on stdout with {"line", "error"} so the output stays aligned; the exit code is then 1.
 * Blank lines are skipped.
 */
import { createInterface } from "node:readline";
import { type CliCommand, UsageError } from "@torl-ts/core";
import { checkRewardType, computeMathScore, MATH_REWARD_TYPES, type MathScoreOptions } from "./score.js";

const VERIFY_USAGE = `usage: pnpm torl verify [--reward-type default|v2.wformat|accuracy] < answers.jsonl

Reads JSON lines {"solution": <response text>, "ground_truth": <answer>} from stdin and writes one line
{"correct": bool, "extracted": string|null, "score": number} per input line, in order. The answer is the
last \\boxed{...} (or \\fbox{...}) in the solution; none means no answer.
Optional per-line fields: "has_code" and "execution_passed" (booleans) apply the execution penalty when
--execution-penalty is given.

options:
  --reward-type T        default (+1/-1, the default), v2.wformat (-0.5 wrong boxed, -1 none), accuracy (1/0)
  --execution-penalty    subtract 0.5 when a line has "has_code": true and "execution_passed": false`;

/** Flags of `verify`; throws UsageError on anything unknown. */
function parseVerifyArgs(args: string[]): MathScoreOptions {
  const options: MathScoreOptions = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--reward-type" || a.startsWith("--reward-type=")) {
      const v = a.includes("=") ? a.slice(a.indexOf("=") + 1) : args[++i];
      if (!v) throw new UsageError("--reward-type needs a value");
      if (!(MATH_REWARD_TYPES as readonly string[]).includes(v)) {
        throw new UsageError(`unknown reward type '${v}'; one of: ${MATH_REWARD_TYPES.join(", ")}`);
      }
      options.rewardType = checkRewardType(v);
    } else if (a === "--execution-penalty") options.executionErrorPenalty = true;
    else throw new UsageError(`unknown option '${a}'`);
  }
  return options;
}

/** Verifies one JSONL line; returns the output line, or throws an Error naming the problem. */
export function verifyLine(line: string, options: MathScoreOptions): string {
  let rec: unknown;
  try {
    rec = JSON.parse(line);
  } catch (e) {
    throw new Error(`not valid JSON (${(e as Error).message})`);
  }
  if (typeof rec !== "object" || rec === null || Array.isArray(rec))
    throw new Error("expected a JSON object");
  const { solution, ground_truth, has_code, execution_passed } = rec as Record<string, unknown>;
  if (typeof solution !== "string") throw new Error('"solution" must be a string');
  if (typeof ground_truth !== "string" && typeof ground_truth !== "number") {
    throw new Error('"ground_truth" must be a string (or number)');
  }
  const execution =
    typeof has_code === "boolean" ? { hadCode: has_code, passed: execution_passed === true } : undefined;
  const r = computeMathScore(solution, String(ground_truth), options, execution);
  return JSON.stringify({ correct: r.correct, extracted: r.extracted, score: r.score });
}

export const verifyCommand: CliCommand = {
  summary: "grade JSONL {solution, ground_truth} from stdin: one {correct, extracted, score} per line",
  usage: VERIFY_USAGE,
  async run(args) {
    const options = parseVerifyArgs(args);
    const rl = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
    let lineNo = 0;
    let bad = 0;
    let out: string[] = [];
    const flush = async () => {
      if (out.length === 0) return;
      const text = `${out.join("\n")}\n`;
      out = [];
      if (!process.stdout.write(text))
        await new Promise<void>((r) => process.stdout.once("drain", () => r()));
    };
    for await (const line of rl) {
      lineNo++;
      if (line.trim() === "") continue;
      try {
        out.push(verifyLine(line, options));
      } catch (e) {
        bad++;
        const msg = `line ${lineNo}: ${(e as Error).message}`;
        process.stderr.write(`verify: ${msg}\n`);
        out.push(JSON.stringify({ line: lineNo, error: msg }));
      }
      if (out.length >= 256) await flush();
    }
    await flush();
    if (bad > 0) process.stderr.write(`verify: ${bad} malformed line(s) of ${lineNo}\n`);
    return bad > 0 ? 1 : 0;
  },
};
