/**
 * A run directory as the report reads it: metrics.jsonl (one line per step), summary.json and
 * samples.jsonl (trajectories). Each bad input names its file and line.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { InputError } from "@torl-ts/core";
import type { TrajectorySample } from "../evaluation/index.js";

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
  if (rows.length === 0)
    throw new ReportInputError(file, "is empty: the run recorded no step, so there is nothing to report");
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
