/**
 * Training runs as the dashboard shows them: each run directory's metrics.jsonl, read as it grows
 * (only the bytes added since the last read; a line still being written waits for its newline).
 */
import { closeSync, existsSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { InputError } from "../errors.js";

/** One metrics row: its step and its numeric values (anything else in the row is left out). */
export interface RunRow {
  step: number;
  values: Record<string, number>;
}

export interface RunView {
  name: string;
  dir: string;
  rows: RunRow[];
  last: RunRow | undefined;
  /** Lines that were not a JSON object with a numeric step, by line number (the first few). */
  badLines: { line: number; reason: string }[];
}

/** Rows kept per run; older ones are thinned out by half when the cap is reached. */
const MAX_ROWS = 20_000;
const MAX_BAD_LINES = 5;

export class RunWatcher {
  private offset = 0;
  private pending = "";
  private lineNo = 0;
  readonly view: RunView;

  constructor(dir: string) {
    const abs = resolve(dir);
    if (!existsSync(abs) || !statSync(abs).isDirectory()) {
      throw new InputError(
        `run directory ${abs} does not exist (give the directory a trainer writes metrics.jsonl into)`,
      );
    }
    this.view = { name: basename(abs), dir: abs, rows: [], last: undefined, badLines: [] };
  }

  /** Reads what was appended to metrics.jsonl since the last call. */
  refresh(): RunView {
    const file = join(this.view.dir, "metrics.jsonl");
    if (!existsSync(file)) return this.view;
    const fd = openSync(file, "r");
    try {
      const size = fstatSync(fd).size;
      if (size < this.offset) {
        // rewritten from the start (a new run in the same directory)
        this.offset = 0;
        this.pending = "";
        this.lineNo = 0;
        this.view.rows = [];
        this.view.badLines = [];
        this.view.last = undefined;
      }
      const chunk = Buffer.alloc(1 << 20);
      while (this.offset < size) {
        const n = readSync(fd, chunk, 0, Math.min(chunk.length, size - this.offset), this.offset);
        if (n <= 0) break;
        this.offset += n;
        this.take(chunk.subarray(0, n).toString("utf8"));
      }
    } finally {
      closeSync(fd);
    }
    return this.view;
  }

  private take(text: string): void {
    const lines = (this.pending + text).split("\n");
    this.pending = lines.pop() ?? "";
    for (const line of lines) {
      this.lineNo++;
      if (line.trim() === "") continue;
      const row = parseRow(line);
      if (typeof row === "string") {
        if (this.view.badLines.length < MAX_BAD_LINES)
          this.view.badLines.push({ line: this.lineNo, reason: row });
        continue;
      }
      this.view.rows.push(row);
      this.view.last = row;
      if (this.view.rows.length > MAX_ROWS) this.view.rows = this.view.rows.filter((_, i) => i % 2 === 0);
    }
  }
}

function parseRow(line: string): RunRow | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch (e) {
    return `not JSON: ${(e as Error).message}`;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return "not a JSON object";
  const { step, ...rest } = parsed as Record<string, unknown>;
  if (typeof step !== "number" || !Number.isFinite(step)) return "no numeric step";
  const values: Record<string, number> = {};
  for (const [k, v] of Object.entries(rest)) if (typeof v === "number" && Number.isFinite(v)) values[k] = v;
  return { step, values };
}
