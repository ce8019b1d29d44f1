/**
 * veRL's generation dumps: trainer.rollout_data_dir and trainer.validation_data_dir get one JSONL file per
 * step, `<dir>/<step>.jsonl`, a line per generation: {input, output, gts, score, step, acc}. And
 * trainer.log_val_generations: a fixed-seed sample of a validation's generations, printed.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { mulberry32 } from "../random.js";

export interface GenerationRecord {
  /** The prompt as the model saw it (decoded, special tokens skipped). */
  input: string;
  output: string;
  /** The ground truth. */
  gts: string | null;
  /** The sequence score. */
  score: number;
  step: number;
  acc: boolean;
}

/** Writes `<dir>/<step>.jsonl` (replacing an earlier one of the same step); returns its path. */
export function dumpGenerations(dir: string, step: number, records: GenerationRecord[]): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${step}.jsonl`);
  writeFileSync(file, records.map((r) => `${JSON.stringify(r)}\n`).join(""));
  return file;
}

/** `count` generations to show: sorted by input, then shuffled with a fixed seed (veRL's choice). */
export function pickGenerationsToLog(records: GenerationRecord[], count: number): GenerationRecord[] {
  if (count <= 0) return [];
  const sorted = [...records].sort((a, b) => (a.input < b.input ? -1 : a.input > b.input ? 1 : 0));
  const rng = mulberry32(42);
  for (let i = sorted.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [sorted[i], sorted[j]] = [sorted[j]!, sorted[i]!];
  }
  return sorted.slice(0, count);
}

/** The printed form of logged generations: a header line, then input / output / score per sample. */
export function formatGenerations(step: number, records: GenerationRecord[]): string[] {
  const lines = [`[validation] step ${step}: ${records.length} generations`];
  records.forEach((r, i) => {
    lines.push(`  #${i + 1} score ${r.score}`);
    lines.push(`    input:  ${JSON.stringify(r.input)}`);
    lines.push(`    output: ${JSON.stringify(r.output)}`);
  });
  return lines;
}
