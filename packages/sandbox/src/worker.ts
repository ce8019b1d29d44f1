import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, rmdirSync } from "node:fs";
import type { Writable } from "node:stream";
import {
  SandboxConfigError,
  SandboxInternalError,
  SandboxStartError,
  SandboxWorkerDiedError,
} from "./errors.js";
import {
  forkServerArgs,
  forkServerBundle,
  forkServerEnv,
  HUGE_HEAP_MIN_FAULT_US,
  nativeTemplateLoop,
  pageFaultMicros,
  resolvePython,
} from "./python.js";
import { DEFAULT_LIMITS, type NormalizedRequest } from "./request.js";
import type { HeapPages, Protection, TemplateLoop } from "./types.js";

/** What the fork server reports for one run. */
export interface RawRunResult {
  timed_out: boolean;
  return_code: number | null;
  signal: number | null;
  /** Seconds. */
  execution_time: number;
  stdout: string;
  stderr: string;
  /** Bytes the run printed in all (stdout/stderr above are cut at maxOutputBytes). */
  stdout_bytes: number;
  stderr_bytes: number;
  files: Record<string, string>;
  /** fetch_files entries that were not returned, with the reason (missing, not a regular file, too large). */
  unfetched: Record<string, string>;
  /** Per-phase timings in ms, only when the server runs with TORL_SANDBOX_TRACE=1 (profiling). */
  trace?: Record<string, number>;
}

/** Isolation switches, for tests and for machines where a step must be skipped. */
export type IsolationStep = "cgroups" | "pid_ns" | "mount_ns" | "net_ns" | "uid" | "seccomp";

export interface WorkerOptions {
  /** Unique name (also the cgroup name). */
  name: string;
  python?: string;
  /** Bytes kept per stream; the rest is counted and dropped (default 1 MiB). */
  maxOutputBytes?: number;
  /** Size of the run's private /tmp, MB (default 256). */
  tmpfsMb?: number;
  /** Isolation steps to leave out (never in production; lets tests show a protection's effect). */
  disable?: IsolationStep[];
  /** Extra modules imported into the warm interpreter. */
  preload?: string[];
  /**
   * Keep the warm interpreter's heap in 2 MiB huge pages: a run then copies each 2 MiB page it
   * writes in one step instead of hundreds of 4 KiB copy-on-write faults. As root the worker allows
   * surplus huge pages (vm.nr_overcommit_hugepages, up to a quarter of RAM); they are taken from free
   * memory when used and given back when released. Default "auto": huge pages where a page fault
   * costs at least HUGE_HEAP_MIN_FAULT_US (measured once per process with `pageFaultMicros`), as under
   * shadow paging; ordinary pages where faults are cheap, as on hardware or a nested-paging guest.
   */
  hugePages?: boolean | "auto";
  /** How long a start may take, ms (default 60 s: importing sympy on a loaded machine is slow). */
  startTimeoutMs?: number;
  /** Extra wall time after run_timeout before the host kills a worker that does not answer, ms. */
  watchdogGraceMs?: number;
  /**
   * Run the template's loop and each run child's preparation in C, built once per process with the
   * machine's C compiler (default true). Where it cannot be built the worker runs the same steps in
   * Python and says why (`templateLoop`, `templateLoopWhy`; the executor logs it); false asks for
   * Python. Same isolation either way; the C loop costs less CPU per run (docs/sandbox.md).
   */
  nativeTemplate?: boolean;
}

/** Refuses a `hugePages` that is none of true, false, "auto" (or absent), naming what it got. */
export function checkHugePages(value: unknown): void {
  if (value !== undefined && value !== true && value !== false && value !== "auto")
    throw new SandboxConfigError("hugePages", `must be true, false or "auto", got ${JSON.stringify(value)}`);
}

/** Refuses a `nativeTemplate` that is neither true nor false (nor absent), naming what it got. */
export function checkNativeTemplate(value: unknown): void {
  if (value !== undefined && typeof value !== "boolean")
    throw new SandboxConfigError("nativeTemplate", `must be true or false, got ${JSON.stringify(value)}`);
}

interface Pending {
  resolve: (r: RawRunResult) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/** Largest frame a worker may send, bytes (1 GiB); a larger one is skipped and fails its request. */
export const MAX_FRAME_BYTES = 1 << 30;

/**
 * Splits a byte stream into length-prefixed frames (4-byte big-endian length, then the body). A body
 * that arrives in pieces is copied into one buffer sized from its header as the pieces come, so a
 * frame costs time linear in its size; a body that lies whole inside one chunk is handed on as a view
 * of it, not copied. A frame over `maxFrameBytes` is read past without being kept (`onOversize`).
 */
export class FrameReader {
  /** Body bytes copied so far (each byte of a frame at most once). */
  copiedBytes = 0;
  private readonly head = Buffer.alloc(4);
  private headFill = 0;
  private body: Buffer | undefined;
  private bodyFill = 0;
  private skipLeft = 0;

  constructor(
    private readonly onFrame: (body: Buffer) => void,
    private readonly onOversize: (length: number) => void,
    readonly maxFrameBytes = MAX_FRAME_BYTES,
  ) {}

  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.skipLeft > 0) {
        const n = Math.min(this.skipLeft, chunk.length - at);
        this.skipLeft -= n;
        at += n;
        continue;
      }
      if (this.body === undefined) {
        let length: number;
        if (this.headFill === 0 && chunk.length - at >= 4) {
          length = chunk.readUInt32BE(at);
          at += 4;
        } else {
          const n = Math.min(4 - this.headFill, chunk.length - at);
          chunk.copy(this.head, this.headFill, at, at + n);
          this.headFill += n;
          at += n;
          if (this.headFill < 4) return;
          this.headFill = 0;
          length = this.head.readUInt32BE(0);
        }
        if (length > this.maxFrameBytes) {
          this.skipLeft = length;
          this.onOversize(length);
          continue;
        }
        if (chunk.length - at >= length) {
          const whole = chunk.subarray(at, at + length);
          at += length;
          this.onFrame(whole);
          continue;
        }
        this.body = Buffer.allocUnsafe(length);
        this.bodyFill = 0;
      }
      const n = Math.min(this.body.length - this.bodyFill, chunk.length - at);
      chunk.copy(this.body, this.bodyFill, at, at + n);
      this.bodyFill += n;
      this.copiedBytes += n;
      at += n;
      if (this.bodyFill === this.body.length) {
        const done = this.body;
        this.body = undefined;
        this.onFrame(done);
      }
    }
  }
}

/**
 * One warm fork server (python/forkserver.py) in its own namespaces. Runs one request at a time;
 * `run` must not be called again before the previous call settled.
 */
export class SandboxWorker {
  readonly name: string;
  readonly python: string;
  protections: Record<string, Protection> = {};
  warnings: string[] = [];
  /** The uid the runs execute as (host view). */
  runUid: number | undefined;
  /** The page size of the warm heap the runs are forked from, once started (see WorkerOptions.hugePages). */
  heap: HeapPages | undefined;
  /** Where the template's loop runs, once started (see WorkerOptions.nativeTemplate). */
  templateLoop: TemplateLoop | undefined;
  /** Why the loop runs in Python, when it does. */
  templateLoopWhy: string | undefined;
  /** Pid of the outer process (in the host's pid namespace). */
  pid: number | undefined;
  private proc: ChildProcess | undefined;
  private readonly frames = new FrameReader(
    (body) => this.onFrameBytes(body),
    (length) =>
      this.failPending(`its answer of ${length} bytes is over the limit of ${MAX_FRAME_BYTES} bytes`),
  );
  /** When the worker last sent anything (ms, monotonic): a worker that is sending is answering. */
  private lastDataAt = 0;
  private pending: Pending | undefined;
  private nextId = 1;
  private exited = false;
  private stderrTail = "";
  private readyWaiter: { resolve: () => void; reject: (e: Error) => void } | undefined;
  /** Called once when the process exits (after start succeeded), whatever the reason. */
  onExit: ((error: SandboxWorkerDiedError) => void) | undefined;

  constructor(readonly options: WorkerOptions) {
    checkHugePages(options.hugePages);
    checkNativeTemplate(options.nativeTemplate);
    this.name = options.name;
    this.python = options.python ?? resolvePython();
  }

  get alive(): boolean {
    return !this.exited && this.proc !== undefined;
  }

  get busy(): boolean {
    return this.pending !== undefined;
  }

  /** Starts the process and waits for its `ready` frame (with the protections it put in force). */
  async start(): Promise<void> {
    const heap = await this.heapChoice();
    const nativeTemplate = this.options.nativeTemplate ?? true;
    const native = nativeTemplate ? await nativeTemplateLoop() : undefined;
    const config = {
      native_template: nativeTemplate,
      name: this.name,
      max_output_bytes: this.options.maxOutputBytes ?? 1 << 20,
      tmpfs_mb: this.options.tmpfsMb ?? 256,
      disable: this.options.disable ?? [],
      preload: this.options.preload ?? [],
      huge_pages: heap.huge,
      heap_choice: heap.why,
      // per-phase timings in each raw result, for profiling the run cycle
      trace: process.env.TORL_SANDBOX_TRACE === "1",
    };
    const proc: ChildProcess = spawn(this.python, forkServerArgs(config), {
      // fd 3 (FORKSERVER_SOURCE_FD): the server's sources, read to the end before anything else
      stdio: ["pipe", "pipe", "pipe", "pipe"],
      env: forkServerEnv(config.huge_pages),
    });
    const sources = proc.stdio[3] as Writable;
    // a server that dies before reading its sources is reported by the exit handler below
    sources.on("error", () => {});
    sources.end(JSON.stringify({ ...forkServerBundle(), native }));
    this.proc = proc;
    this.pid = proc.pid;
    proc.stdout!.on("data", (chunk: Buffer) => this.onData(chunk));
    proc.stderr!.on("data", (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString("utf8")).slice(-4000);
    });
    proc.stdin!.on("error", () => {});
    const started = new Promise<void>((resolve, reject) => {
      this.readyWaiter = { resolve, reject };
    });
    const timeoutMs = this.options.startTimeoutMs ?? 60_000;
    const timer = setTimeout(() => {
      this.readyWaiter?.reject(
        new SandboxStartError(this.name, this.python, `no ready frame in ${timeoutMs} ms`),
      );
      this.kill();
    }, timeoutMs);
    proc.on("error", (err) => {
      this.readyWaiter?.reject(new SandboxStartError(this.name, this.python, err.message));
    });
    proc.on("exit", (code, signal) => {
      this.exited = true;
      clearTimeout(timer);
      this.removeCgroups();
      const died = new SandboxWorkerDiedError(
        this.name,
        code,
        signal,
        this.stderrTail.trim().split("\n").pop(),
      );
      if (this.readyWaiter) {
        this.readyWaiter.reject(
          new SandboxStartError(
            this.name,
            this.python,
            `exited with code ${code} signal ${signal}`,
            this.stderrTail,
          ),
        );
        this.readyWaiter = undefined;
        return;
      }
      const p = this.pending;
      this.pending = undefined;
      if (p) {
        clearTimeout(p.timer);
        p.reject(died);
      }
      this.onExit?.(died);
    });
    return started.finally(() => clearTimeout(timer));
  }

  /** Whether the warm heap goes in huge pages (see WorkerOptions.hugePages), and why when "auto" chose. */
  private async heapChoice(): Promise<{ huge: boolean; why?: string }> {
    const wanted = this.options.hugePages ?? "auto";
    if (wanted !== "auto") return { huge: wanted };
    let us: number;
    try {
      us = await pageFaultMicros(this.python);
    } catch (err) {
      throw new SandboxStartError(
        this.name,
        this.python,
        `the page-fault probe that picks the heap (hugePages "auto") failed: ${(err as Error).message}`,
      );
    }
    const huge = us >= HUGE_HEAP_MIN_FAULT_US;
    const than = huge ? "at least" : "under";
    return {
      huge,
      why: `auto: a page fault costs ${us.toFixed(1)} us here, ${than} ${HUGE_HEAP_MIN_FAULT_US}`,
    };
  }

  /** Runs one request; rejects with SandboxWorkerDiedError if the worker dies meanwhile. */
  run(request: NormalizedRequest & { max_processes?: number }): Promise<RawRunResult> {
    if (!this.alive) return Promise.reject(new SandboxWorkerDiedError(this.name, null, null, "not running"));
    if (this.pending) throw new Error(`sandbox worker ${this.name} is busy`);
    const id = this.nextId++;
    const body = Buffer.from(JSON.stringify({ ...request, id }));
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    return new Promise<RawRunResult>((resolve, reject) => {
      // the fork server bounds writing the files (setup_timeout) and the run (run_timeout) itself;
      // this watchdog only fires if it stops answering: nothing received for graceMs past both
      const graceMs = this.options.watchdogGraceMs ?? 10_000;
      const setupMs = (request.setup_timeout ?? DEFAULT_LIMITS.setupTimeout) * 1000;
      const watch = (ms: number): NodeJS.Timeout =>
        setTimeout(() => {
          if (this.pending?.timer !== timer) return; // settled meanwhile
          const quietFor = performance.now() - this.lastDataAt;
          if (quietFor < graceMs) {
            // the answer is arriving: wait until it has been quiet for graceMs
            timer = watch(graceMs - quietFor);
            this.pending.timer = timer;
            return;
          }
          this.stderrTail += `\nwatchdog: no answer ${graceMs} ms after the run's timeout`;
          this.kill();
        }, ms);
      let timer = watch(setupMs + request.run_timeout * 1000 + graceMs);
      this.pending = { resolve, reject, timer };
      this.proc!.stdin!.write(Buffer.concat([head, body]));
    });
  }

  /** Ends the worker: SIGTERM to the outer process (which kills the namespace), SIGKILL if it lingers. */
  kill(): void {
    const proc = this.proc;
    if (!proc || this.exited) return;
    proc.kill("SIGTERM");
    const t = setTimeout(() => {
      if (!this.exited) proc.kill("SIGKILL");
    }, 2000);
    t.unref();
  }

  /** Closes the worker and resolves when its process is gone. */
  async close(): Promise<void> {
    const proc = this.proc;
    if (!proc || this.exited) return;
    const gone = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    proc.stdin!.end();
    this.kill();
    await gone;
  }

  private onData(chunk: Buffer): void {
    this.lastDataAt = performance.now();
    this.frames.push(chunk);
  }

  /** A frame that cannot be read fails the request it answers; the stream stays in step, the worker lives. */
  private onFrameBytes(body: Buffer): void {
    let frame: Record<string, unknown>;
    try {
      frame = JSON.parse(body.toString("utf8"));
    } catch (error) {
      this.failPending(`its answer of ${body.length} bytes could not be read (${(error as Error).message})`);
      return;
    }
    this.onFrame(frame);
  }

  private failPending(detail: string): void {
    const p = this.pending;
    if (!p) {
      this.stderrTail += `\n${detail} (no request waiting)`;
      return;
    }
    this.pending = undefined;
    clearTimeout(p.timer);
    p.reject(new SandboxInternalError(this.name, detail));
  }

  private onFrame(frame: Record<string, unknown>): void {
    if (frame.type === "ready") {
      this.protections = frame.protections as Record<string, Protection>;
      this.warnings = frame.warnings as string[];
      this.runUid = frame.uid as number;
      this.heap = frame.heap === "huge" ? "huge" : "small";
      this.templateLoop = frame.template_loop === "native" ? "native" : "python";
      this.templateLoopWhy =
        typeof frame.template_loop_why === "string" ? frame.template_loop_why : undefined;
      this.readyWaiter?.resolve();
      this.readyWaiter = undefined;
      return;
    }
    const p = this.pending;
    if (!p) return;
    this.pending = undefined;
    clearTimeout(p.timer);
    if (frame.type === "error") {
      p.reject(new SandboxInternalError(this.name, String(frame.error)));
    } else {
      p.resolve(frame as unknown as RawRunResult);
    }
  }

  private removeCgroups(attempt = 0): void {
    // the outer process removes them on a clean exit; after a SIGKILL the namespace may still be
    // dying for a moment, so retry in the background
    let left = 0;
    for (const dir of cgroupDirs(this.name)) {
      try {
        rmdirSync(dir);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") left++;
      }
    }
    if (left > 0 && attempt < 25) setTimeout(() => this.removeCgroups(attempt + 1), 200).unref();
  }
}

/** Where a worker's cgroups live: v1 pids, memory and hugetlb, v2 (alone or beside v1 as "unified"). */
const CGROUP_ROOTS = [
  "/sys/fs/cgroup/pids",
  "/sys/fs/cgroup/memory",
  "/sys/fs/cgroup/hugetlb",
  "/sys/fs/cgroup/unified",
  "/sys/fs/cgroup",
];

function cgroupDirs(name: string): string[] {
  return CGROUP_ROOTS.map((root) => `${root}/torl-sandbox/${name}`);
}

/** Removes cgroups left by sandbox workers of processes that no longer exist (names are torl-<pid>-...). */
export function sweepStaleCgroups(): void {
  for (const root of CGROUP_ROOTS) {
    let names: string[];
    try {
      names = readdirSync(`${root}/torl-sandbox`);
    } catch {
      continue;
    }
    for (const name of names) {
      const pid = Number(/^torl-(\d+)-/.exec(name)?.[1]);
      if (!pid || existsSync(`/proc/${pid}`)) continue;
      try {
        rmdirSync(`${root}/torl-sandbox/${name}`);
      } catch {
        // still busy or not ours to remove
      }
    }
  }
}
