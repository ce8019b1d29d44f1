/**
 * One line of `torl verify`: a JSON object {"solution", "ground_truth"} (optional "has_code",
 * "execution_passed") graded into {"line", "correct", "extracted", "score"}.
 */
import { computeMathScore, type MathScoreOptions } from "./score.js";

/** Verifies input line `lineNo`; returns the output line, or throws an Error naming the problem. */
export function verifyLine(line: string, options: MathScoreOptions, lineNo = 1): string {
  if (line.trim() === "") throw new Error("empty line; expected a JSON object");
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
  return JSON.stringify({ line: lineNo, correct: r.correct, extracted: r.extracted, score: r.score });
}
