/**
 * What worker processes print: each line goes to the worker's log file on its node (read later with
 * `torl logs`) and, in batches, to the drivers (printed there as Ray does: `(Counter pid=123) ...`).
 * Files are rotated at a size cap, keeping one previous file; lines the drivers could not be sent in
 * time are counted and said, never dropped in silence (the files keep them all).
 */
import { createWriteStream, mkdirSync, renameSync, statSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";

/** Who printed a batch of lines (a task executor has no class name of its own). */
export interface LogSource {
  actorId: string;
  className: string | null;
  name: string | undefined;
  pid: number;
  nodeId: string;
}

export interface LogBatch extends LogSource {
  stream: "out" | "err";
  lines: string[];
}

/** A line longer than this is cut into pieces (a program printing megabytes without a newline). */
export const MAX_LINE_CHARS = 16_384;
/** Size at which a log file is rotated (the previous one is kept as `.1`). */
export const MAX_LOG_FILE_BYTES = 64 << 20;
/** Lines held for the drivers at most; beyond it the oldest are counted as dropped. */
export const MAX_PENDING_LINES = 10_000;
const FLUSH_MS = 50;

/** The file name a worker's stream is logged under, in its node's log directory. */
export function logFileName(actorId: string, pid: number, stream: "out" | "err"): string {
  return `${actorId.replace(/[^A-Za-z0-9_.-]/g, "_")}-${pid}.${stream}`;
}

/** How a batch is printed at the driver: Ray's prefix, then the line. */
export function prefixOf(s: Pick<LogSource, "className" | "name" | "pid">): string {
  const who = s.className ? (s.name ? `${s.className} ${s.name}` : s.className) : "task";
  return `(${who} pid=${s.pid})`;
}

class LogFile {
  private out: WriteStream;
  private bytes: number;
  private failed = false;

  /** `onError` hears the first write error (directory gone, disk full); later lines skip the file. */
  constructor(
    private path: string,
    private onError: (error: Error) => void,
  ) {
    this.bytes = fileSize(path);
    this.out = this.open();
  }

  private open(): WriteStream {
    const out = createWriteStream(this.path, { flags: "a" });
    out.on("error", (error) => {
      if (this.failed) return;
      this.failed = true;
      this.onError(error);
    });
    return out;
  }

  write(line: string): void {
    if (this.failed) return;
    const bytes = Buffer.byteLength(line) + 1;
    if (this.bytes + bytes > MAX_LOG_FILE_BYTES) {
      this.out.end();
      try {
        renameSync(this.path, `${this.path}.1`);
      } catch {
        // gone already: start afresh all the same
      }
      this.out = this.open();
      this.bytes = 0;
    }
    this.bytes += bytes;
    this.out.write(`${line}\n`);
  }

  close(): void {
    this.out.end();
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** One node's worker output: files under `dir`, batches to `forward` (unless it is null). */
export class WorkerLogs {
  private pending: LogBatch[] = [];
  private pendingLines = 0;
  private dropped = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly dir: string,
    private forward: ((batches: LogBatch[]) => void) | null,
  ) {
    mkdirSync(dir, { recursive: true });
  }

  /**
   * Reads a worker's stdout and stderr. `source()` says who it is now: a spare process is forked
   * before it knows its actor, and its lines are attributed when they arrive.
   */
  attach(stdout: Readable | null, stderr: Readable | null, source: () => LogSource): void {
    for (const [stream, readable] of [
      ["out", stdout],
      ["err", stderr],
    ] as const) {
      if (!readable) continue;
      let partial = "";
      let file: { key: string; log: LogFile } | null = null;
      const take = (lines: string[]) => {
        const s = source();
        const key = logFileName(s.actorId, s.pid, stream);
        if (file?.key !== key) {
          file?.log.close();
          const path = join(this.dir, key);
          file = { key, log: new LogFile(path, (error) => this.fileFailed(path, error, s)) };
        }
        for (const line of lines) file.log.write(line);
        this.queue({ ...s, stream, lines });
      };
      readable.setEncoding("utf8");
      readable.on("data", (chunk: string) => {
        const parts = (partial + chunk).split("\n");
        partial = parts.pop() ?? "";
        while (partial.length > MAX_LINE_CHARS) {
          parts.push(partial.slice(0, MAX_LINE_CHARS));
          partial = partial.slice(MAX_LINE_CHARS);
        }
        const lines = parts.flatMap((p) => cut(p.endsWith("\r") ? p.slice(0, -1) : p));
        if (lines.length) take(lines);
      });
      readable.on("end", () => {
        if (partial) take(cut(partial));
        partial = "";
        file?.log.close();
        file = null;
      });
      readable.on("error", () => {
        // the process is gone; what it printed before is in the file
      });
    }
  }

  /** A log file that cannot be written is said where the lines go, not thrown at the node. */
  private fileFailed(path: string, error: Error, source: LogSource): void {
    const line = `[torl] worker log file ${path} could not be written (${error.message}); this worker's lines from here on are not in the log files`;
    if (this.forward) this.queue({ ...source, stream: "err", lines: [line] });
    else process.stderr.write(`${line}\n`);
  }

  private queue(batch: LogBatch): void {
    if (!this.forward) return;
    this.pending.push(batch);
    this.pendingLines += batch.lines.length;
    while (this.pendingLines > MAX_PENDING_LINES && this.pending.length > 1) {
      const old = this.pending.shift()!;
      this.pendingLines -= old.lines.length;
      this.dropped += old.lines.length;
    }
    this.timer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Sends what is pending now. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!this.forward || this.pending.length === 0) return;
    const batches = this.pending;
    if (this.dropped > 0) {
      const first = batches[0]!;
      batches.unshift({
        ...first,
        stream: "err",
        lines: [
          `[torl] ${this.dropped} line(s) of worker output were printed faster than they could be sent to the driver and were left out here; every line is in the log files under ${this.dir} (torl logs)`,
        ],
      });
      this.dropped = 0;
    }
    this.pending = [];
    this.pendingLines = 0;
    this.forward(batches);
  }

  close(): void {
    this.flush();
  }
}

function cut(line: string): string[] {
  if (line.length <= MAX_LINE_CHARS) return [line];
  const out: string[] = [];
  for (let i = 0; i < line.length; i += MAX_LINE_CHARS) out.push(line.slice(i, i + MAX_LINE_CHARS));
  return out;
}
