/**
 * A run directory as the report reads it: metrics.jsonl (one line per step), summary.json and
 * samples.jsonl (trajectories). Each bad input names its file and line.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { InputError } from "@torl-ts/core";

/**
 * One line of `runs/<name>/samples.jsonl`: one trajectory (a training rollout or a validation
 * generation), written by the trainer (or by `pnpm torl eval --samples`). Only `step`, `prompt`,
 * `response` and `score` are required.
 *
 * ```json
 * {"step": 4, "split": "val", "data_source": "math", "prompt": "A conversation ... Assistant:\n",
 *  "response": "...```python\nprint(12*34)\n```\n```output\n408\n```\nThe answer is \\boxed{408}.",
 *  "ground_truth": "408", "extracted": "408", "correct": true, "score": 1,
 *  "observation_ranges": [[31, 50]],
 *  "tool_calls": [{"code": "print(12*34)\n", "observation": "408", "success": true, "range": [31, 50]}]}
 * ```
 *
 * - `response`: the whole response text as the model saw it: generated text and the text appended by
 *   the tool (TirSample.text).
 * - `observation_ranges`: [start, end) character ranges of `response` that the tool appended
 *   (TirCallRecord.textRange, one per call). `tool_calls[i].range` is the same per call; either may be
 *   given. Without both, "```output ... ```" blocks are found by their fences.
 * - `tool_calls`: each call's code, observation and whether it passed (TirCallRecord: call.arguments.code,
 *   observation, success, textRange).
 * - `split`: "train" or "val" (default "train").
 */
export interface TrajectorySample {
  step: number;
  prompt: string;
  response: string;
  score: number;
  split?: "train" | "val";
  data_source?: string;
  ground_truth?: string;
  extracted?: string | null;
  correct?: boolean;
  observation_ranges?: [number, number][];
  tool_calls?: { code: string; observation: string; success: boolean; range?: [number, number] }[];
}

/** A report input that cannot be read: names the file and, where it applies, the line. */
export class ReportInputError extends InputError {
  override name = "ReportInputError";
  constructor(
    readonly file: string,
    message: string,
    readonly line?: number,
  ) {
    super(`${file}${line !== undefined ? `:${line}` : ""}: ${message}`);
  }
}

/** The sample record for one TIR rollout sample (the shape of @torl-ts/verl's TirSample). */
export function trajectoryFromTir(
  sample: {
    text: string;
    calls: {
      call: { arguments: Record<string, unknown> };
      observation: string;
      success: boolean;
      textRange: [number, number];
    }[];
  },
  fields: Omit<TrajectorySample, "response" | "observation_ranges" | "tool_calls">,
): TrajectorySample {
  return {
    ...fields,
    response: sample.text,
    observation_ranges: sample.calls.map((c) => [c.textRange[0], c.textRange[1]]),
    tool_calls: sample.calls.map((c) => ({
      code: String(c.call.arguments.code ?? JSON.stringify(c.call.arguments)),
      observation: c.observation,
      success: c.success,
      range: [c.textRange[0], c.textRange[1]],
    })),
  };
}

export type Row = { step: number } & Record<string, number>;

function readJsonl<T>(file: string): T[] {
  const lines = readFileSync(file, "utf8").split("\n");
  let last = lines.length - 1;
  while (last >= 0 && !lines[last]!.trim()) last--;
  const out: T[] = [];
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    try {
      out.push(JSON.parse(line) as T);
    } catch (e) {
      // A torn last line (a killed run) is skipped; a bad line elsewhere is an error.
      if (i !== last) throw new ReportInputError(file, `not valid JSON (${(e as Error).message})`, i + 1);
    }
  });
  return out;
}

/** The run's metrics, sorted by step; lines without a numeric step are an error. */
export function readRunMetrics(runDir: string): Row[] {
  const file = join(runDir, "metrics.jsonl");
  if (!existsSync(file)) throw new ReportInputError(file, "not found (is this a run directory?)");
  const rows = readJsonl<Row>(file);
  rows.forEach((r, i) => {
    if (typeof r?.step !== "number") throw new ReportInputError(file, `line has no numeric "step"`, i + 1);
  });
  return rows.sort((a, b) => a.step - b.step);
}

export function readSummary(runDir: string): Record<string, unknown> | undefined {
  const file = join(runDir, "summary.json");
  if (!existsSync(file)) return undefined;
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new ReportInputError(file, `not valid JSON (${(e as Error).message})`);
  }
}

export function readSamples(runDir: string): TrajectorySample[] {
  const file = join(runDir, "samples.jsonl");
  if (!existsSync(file)) return [];
  const samples = readJsonl<TrajectorySample>(file);
  samples.forEach((s, i) => {
    if (typeof s?.response !== "string" || typeof s.prompt !== "string")
      throw new ReportInputError(file, `sample needs string "prompt" and "response"`, i + 1);
  });
  return samples;
}

/** A run as the report draws it: its directory, a short label, its metrics and its summary. */
export interface RunData {
  dir: string;
  label: string;
  metrics: Row[];
  summary?: Record<string, unknown>;
}

export function loadRun(dir: string): RunData {
  // runs/<experiment>-<yyyymmdd>-<hhmmss>: the experiment name alone keeps legends short
  const label = basename(resolve(dir)).replace(/-\d{8}-\d{6}$/, "");
  const summary = readSummary(dir);
  // A run known only by its summary (metrics.jsonl not kept) still gets its table, without charts.
  const metrics = summary && !existsSync(join(dir, "metrics.jsonl")) ? [] : readRunMetrics(dir);
  return { dir, label, metrics, summary };
}
