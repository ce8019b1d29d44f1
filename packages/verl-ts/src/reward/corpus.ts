/**
 * The labeled verification corpus (corpus.jsonl next to this file): hand-written pairs of a model
 * response and a ground truth with the verdict a careful grader gives, grouped by answer category,
 * each category holding equal and unequal cases. Used by the tests and by `pnpm torl bench reward`.
 */
import { readFileSync } from "node:fs";

export interface RewardCorpusPair {
  category: string;
  /** A whole response; its answer is the last box given as one (see extract.ts). */
  solution: string;
  ground_truth: string;
  /** The grader's verdict. */
  equal: boolean;
}

/** Thrown when a corpus line is malformed; names the file and line. */
export class RewardCorpusError extends Error {
  override name = "RewardCorpusError";
}

export const REWARD_CORPUS_PATH = new URL("./corpus.jsonl", import.meta.url);

export function loadRewardCorpus(path: URL | string = REWARD_CORPUS_PATH): RewardCorpusPair[] {
  const lines = readFileSync(path, "utf8").split("\n");
  const out: RewardCorpusPair[] = [];
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    let rec: RewardCorpusPair;
    try {
      rec = JSON.parse(line);
    } catch (e) {
      throw new RewardCorpusError(`${String(path)} line ${i + 1}: ${(e as Error).message}`);
    }
    if (
      typeof rec.category !== "string" ||
      typeof rec.solution !== "string" ||
      typeof rec.ground_truth !== "string" ||
      typeof rec.equal !== "boolean"
    ) {
      throw new RewardCorpusError(
        `${String(path)} line ${i + 1}: needs category, solution, ground_truth, equal`,
      );
    }
    out.push(rec);
  });
  return out;
}
