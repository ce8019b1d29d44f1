import { readFileSync } from "node:fs";
import { InputError } from "@torl-ts/core";
import { parquetMetadata, parquetReadObjects, parquetSchema } from "hyparquet";

/** One chat message of a prompt. */
export interface ChatMessage {
  role: string;
  content: string;
}

/** One row of veRL's RL dataset schema. */
export interface RlDatasetRow {
  data_source: string;
  prompt: ChatMessage[];
  ability: string;
  reward_model: { ground_truth: string; style?: string; [key: string]: unknown };
  extra_info: Record<string, unknown>;
}

/** A dataset file that cannot be used: unreadable, not parquet/JSONL, a missing column, a bad value. */
export class DatasetFileError extends InputError {
  override name = "DatasetFileError";
  constructor(
    readonly file: string,
    message: string,
    readonly column?: string,
    readonly row?: number,
  ) {
    super(`${file}${row !== undefined ? ` (row ${row})` : ""}: ${message}`);
  }
}

export interface ReadRlDatasetOptions {
  /** The column holding the prompt (data.prompt_key). Default "prompt". */
  promptKey?: string;
}

/** bigint -> number (when safe) all the way down, so rows are plain JSON-able values. */
function plain(v: unknown): unknown {
  if (typeof v === "bigint") return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object" && !(v instanceof Date) && !ArrayBuffer.isView(v)) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

/** Checks and normalises one raw record into an RlDatasetRow; errors name file, row and column. */
export function toRlDatasetRow(
  raw: Record<string, unknown>,
  file: string,
  row: number,
  promptKey = "prompt",
): RlDatasetRow {
  const fail = (column: string, msg: string) =>
    new DatasetFileError(file, `column "${column}" ${msg}`, column, row);
  const ds = raw.data_source;
  if (typeof ds !== "string") throw fail("data_source", `must be a string, got ${JSON.stringify(ds)}`);
  let prompt = raw[promptKey];
  if (typeof prompt === "string") prompt = [{ role: "user", content: prompt }];
  if (!Array.isArray(prompt) || prompt.length === 0) {
    throw fail(promptKey, "must be a non-empty list of {role, content} messages");
  }
  const messages = prompt.map((m, i) => {
    const msg = m as Partial<ChatMessage> | null;
    if (!msg || typeof msg.role !== "string" || typeof msg.content !== "string") {
      throw fail(promptKey, `message ${i} must be {role: string, content: string}, got ${JSON.stringify(m)}`);
    }
    return { role: msg.role, content: msg.content };
  });
  const rm = raw.reward_model as Record<string, unknown> | null | undefined;
  if (!rm || typeof rm !== "object") throw fail("reward_model", "must be a struct with ground_truth");
  let gt = rm.ground_truth;
  if (typeof gt === "number") gt = String(gt);
  if (typeof gt !== "string" && !Array.isArray(gt)) {
    throw fail("reward_model.ground_truth", `must be a string, got ${JSON.stringify(gt)}`);
  }
  const ability = raw.ability == null ? "" : String(raw.ability);
  const extra =
    raw.extra_info && typeof raw.extra_info === "object" ? (raw.extra_info as Record<string, unknown>) : {};
  return {
    data_source: ds,
    prompt: messages,
    ability,
    reward_model: { ...rm, ground_truth: gt as string },
    extra_info: extra,
  };
}

const REQUIRED_COLUMNS = ["data_source", "reward_model"];

/** A parquet file's top-level columns (with their child column names) and its records, as plain values. */
export async function readParquetRecords(
  file: string,
): Promise<{ columns: Map<string, string[]>; records: Record<string, unknown>[] }> {
  let buf: ArrayBuffer;
  try {
    const b = readFileSync(file);
    buf = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
  } catch (e) {
    throw new DatasetFileError(file, `cannot read file: ${(e as Error).message}`);
  }
  let metadata: ReturnType<typeof parquetMetadata>;
  try {
    metadata = parquetMetadata(buf);
  } catch (e) {
    throw new DatasetFileError(file, `not a readable parquet file: ${(e as Error).message}`);
  }
  const schema = parquetSchema(metadata);
  const columns = new Map(
    schema.children.map((c) => [c.element.name, c.children.map((k) => k.element.name)] as const),
  );
  let records: Record<string, unknown>[];
  try {
    records = (await parquetReadObjects({ file: buf, metadata })) as Record<string, unknown>[];
  } catch (e) {
    throw new DatasetFileError(file, `cannot decode parquet data: ${(e as Error).message}`);
  }
  return { columns, records: records.map((r) => plain(r) as Record<string, unknown>) };
}

/** Reads a veRL-schema parquet file (data_source, prompt, ability, reward_model.ground_truth, extra_info). */
export async function readParquetRows(
  file: string,
  opts: ReadRlDatasetOptions = {},
): Promise<RlDatasetRow[]> {
  const promptKey = opts.promptKey ?? "prompt";
  const { columns, records } = await readParquetRecords(file);
  for (const col of [...REQUIRED_COLUMNS, promptKey]) {
    if (!columns.has(col)) {
      throw new DatasetFileError(
        file,
        `missing column "${col}" (has: ${[...columns.keys()].join(", ")})`,
        col,
      );
    }
  }
  if (!columns.get("reward_model")!.includes("ground_truth")) {
    throw new DatasetFileError(
      file,
      `missing column "reward_model.ground_truth"`,
      "reward_model.ground_truth",
    );
  }
  return records.map((r, i) => toRlDatasetRow(r, file, i, promptKey));
}

/** The JSON objects of a JSONL file, one per non-blank line, with each one's line number. */
export function readJsonlRecords(file: string): { line: number; record: Record<string, unknown> }[] {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new DatasetFileError(file, `cannot read file: ${(e as Error).message}`);
  }
  const out: { line: number; record: Record<string, unknown> }[] = [];
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (e) {
      throw new DatasetFileError(file, `line ${i + 1} is not valid JSON: ${(e as Error).message}`);
    }
    if (!raw || typeof raw !== "object" || Array.isArray(raw)) {
      throw new DatasetFileError(file, `line ${i + 1} must be a JSON object`);
    }
    out.push({ line: i + 1, record: raw as Record<string, unknown> });
  });
  return out;
}

/** Reads a JSONL file with one veRL-schema row per line (blank lines skipped). */
export function readJsonlRows(file: string, opts: ReadRlDatasetOptions = {}): RlDatasetRow[] {
  return readJsonlRecords(file).map(({ line, record }, row) => {
    for (const col of [...REQUIRED_COLUMNS, opts.promptKey ?? "prompt"]) {
      if (!(col in record))
        throw new DatasetFileError(file, `line ${line}: missing column "${col}"`, col, row);
    }
    return toRlDatasetRow(record, file, row, opts.promptKey);
  });
}

/** Reads one or more dataset files (by extension: .parquet, .jsonl/.json lines) and concatenates them. */
export async function readRlDataset(
  files: string | readonly string[],
  opts: ReadRlDatasetOptions = {},
): Promise<RlDatasetRow[]> {
  const list = typeof files === "string" ? [files] : files;
  const out: RlDatasetRow[] = [];
  for (const f of list) {
    if (/\.parquet$/i.test(f)) out.push(...(await readParquetRows(f, opts)));
    else if (/\.jsonl?$/i.test(f)) out.push(...readJsonlRows(f, opts));
    else throw new DatasetFileError(f, "unknown dataset format (expected .parquet or .jsonl)");
  }
  return out;
}
