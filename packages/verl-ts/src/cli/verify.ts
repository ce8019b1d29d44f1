/**
 * `pnpm torl verify`: JSONL {"solution", "ground_truth"} on stdin -> one JSONL {"line", "correct",
 * "extracted", "score"} per input line, in order. A line that cannot be graded (empty, not JSON, wrong
 * fields) is reported on stderr with its line number and answered on stdout with {"line", "error"}, so
 * output line k always answers input line k; the exit code is then 1. A UTF-8 byte order mark is ignored.
 */
import { createInterface } from "node:readline";
import { defineCommand, InputError } from "@torl-ts/core";
import { CHECKED_DIGITS, MIN_SIGNIFICANT_DIGITS } from "../reward/decimal-precision.js";
import { checkRewardType, MATH_REWARD_TYPES, type MathScoreOptions } from "../reward/score.js";
import { verifyLine } from "../reward/verify-line.js";

const VERIFY_USAGE = `usage: pnpm torl verify [--reward-type default|v2.wformat|accuracy] < answers.jsonl

Reads JSON lines {"solution": <response text>, "ground_truth": <answer>} from stdin (UTF-8, a byte order
mark is ignored) and writes one line {"line": n, "correct": bool, "extracted": string|null, "score": number}
per input line, in order. A line that cannot be graded, an empty one included, is answered with
{"line": n, "error": <why>} (also printed on stderr) and the exit code is 1.
Optional per-line fields: "has_code" and "execution_passed" (booleans) apply the execution penalty when
--execution-penalty is given.

The answer is the last \\boxed{...} (or \\fbox{...}, or \\boxed 5 up to $ or the end of the line) in the
solution; \\boxed named in prose after it ("put it in \\boxed{}") does not count; none means no answer.

How numbers compare:
  - fractions, integers, radicals, pi, repeating decimals (0.\\overline{3}): equal values only
    (rationals exactly: 2/4 = 0.5 = 1/2; others to 1e-9 relative);
  - two decimals: the same number only (2.50 = 2.5; 3.14 is not 3.1416);
  - a decimal against an exact value that terminates (5/4, 7, cos(pi/3)): only that decimal
    (1.25 = 5/4; 1.2 and 1.3 are not 5/4);
  - a decimal against a value that does not terminate (1/3, sqrt 2, pi): it needs at least
    ${MIN_SIGNIFICANT_DIGITS} significant digits and must be the value rounded or truncated at its own
    places (0.33333333, 0.6666666666666666, 3.1415927 match; 0.333, 0.3333333, 3.14, 0.33333334 do not);
    past ${CHECKED_DIGITS} significant digits only ${CHECKED_DIGITS} are checked (printed doubles end in noise).
  A question that asks for a rounded decimal has that decimal as its ground truth: then pi is not 3.14.
  Sets ignore order and repeats ({1,2,2} = {2,1}); tuples keep both; bare lists ignore order only.

options:
  --reward-type T        default (+1/-1, the default), v2.wformat (-0.5 wrong boxed, -1 none), accuracy (1/0)
  --execution-penalty    subtract 0.5 when a line has "has_code": true and "execution_passed": false`;

export const verifyCommand = defineCommand({
  summary: "grade JSONL {solution, ground_truth} from stdin: one {line, correct, extracted, score} per line",
  usage: VERIFY_USAGE,
  flags: {
    "reward-type": { type: "string", choices: MATH_REWARD_TYPES },
    "execution-penalty": { type: "boolean" },
  },
  async run(flags) {
    const options: MathScoreOptions = {};
    if (flags["reward-type"] !== undefined) options.rewardType = checkRewardType(flags["reward-type"]);
    if (flags["execution-penalty"]) options.executionErrorPenalty = true;
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
    for await (const raw of rl) {
      lineNo++;
      const line = lineNo === 1 && raw.startsWith("\uFEFF") ? raw.slice(1) : raw;
      try {
        out.push(verifyLine(line, options, lineNo));
      } catch (e) {
        bad++;
        const msg = `line ${lineNo}: ${(e as Error).message}`;
        process.stderr.write(`verify: ${msg}\n`);
        out.push(JSON.stringify({ line: lineNo, error: msg }));
      }
      if (out.length >= 256) await flush();
    }
    await flush();
    if (lineNo === 0)
      throw new InputError(
        'stdin was empty: nothing to grade (give JSON lines {"solution": ..., "ground_truth": ...}, one per answer)',
      );
    if (bad > 0) process.stderr.write(`verify: ${bad} line(s) of ${lineNo} could not be graded\n`);
    return bad > 0 ? 1 : 0;
  },
});
