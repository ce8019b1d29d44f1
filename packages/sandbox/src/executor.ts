import { hostname } from "node:os";
import { metricCounter, metricHistogram, traceSpan } from "@torl-ts/core";
import { checkedOption, SandboxClosedError } from "./errors.js";
import {
  checkRunLimits,
  type NormalizedRequest,
  normalizeRequest,
  type RequestLimits,
  resolveLimits,
} from "./request.js";
import type {
  CodeRunner,
  CommandRunResult,
  Protection,
  RunCodeRequest,
  RunCodeResponse,
  SandboxHealth,
} from "./types.js";
import {
  checkHugePages,
  checkNativeTemplate,
  type IsolationStep,
  type RawRunResult,
  SandboxWorker,
  sweepStaleCgroups,
} from "./worker.js";

export interface ExecutorOptions {
  /** Warm interpreters (each runs one request at a time). Default 2. */
  workers?: number;
  python?: string;
  /** Bytes kept per stream (default 1 MiB); what is printed beyond is counted and dropped. */
  maxOutputBytes?: number;
  /** Processes a run may have at once (default 64). */
  maxProcesses?: number;
  /** Size of each run's private /tmp, MB (default 256). */
  tmpfsMb?: number;
  /** Isolation steps to leave out; for tests that show what a protection does. */
  disable?: IsolationStep[];
  preload?: string[];
  /** Warm heap in 2 MiB huge pages: true, false or "auto" (the default: by the cost of a page fault here); see WorkerOptions.hugePages. */
  hugePages?: boolean | "auto";
  /** The template's loop and each run's preparation in C (default true); see WorkerOptions.nativeTemplate. */
  nativeTemplate?: boolean;
  /** This executor's maxima (run_timeout, memory_limit_MB, request size); a request over one is refused. */
  limits?: Partial<RequestLimits>;
  /** Called with each line worth saying loudly (missing protections, restarts). Default: stderr. */
  log?: (line: string) => void;
}

let poolCounter = 0;

const runsTotal = metricCounter(
  "torl_sandbox_runs_total",
  "Code runs this process's sandbox pools answered, by outcome: status is the answer's (Success, Failed, SandboxError), run_status its run's (Finished, TimeLimitExceeded, Error; none when nothing ran).",
  ["status", "run_status"],
);
const runSeconds = metricHistogram(
  "torl_sandbox_run_seconds",
  "Seconds from a code run's request to its answer (queueing included), by outcome (as torl_sandbox_runs_total).",
  ["status", "run_status"],
);

interface Job {
  request: NormalizedRequest;
  resolve: (r: RunCodeResponse) => void;
}

/**
 * A pool of warm Python fork servers. `run` never drops a request: when every worker is busy it
 * waits in a FIFO queue. A worker that dies is replaced; the run it held answers SandboxError.
 */
export class SandboxExecutor implements CodeRunner {
  private workers: SandboxWorker[] = [];
  private idle: SandboxWorker[] = [];
  private queue: Job[] = [];
  private closed = false;
  private counter = 0;
  private readonly prefix: string;
  private readonly limits: RequestLimits;
  private readonly log: (line: string) => void;
  private starting: Promise<this> | undefined;
  completed = 0;
  restarts = 0;
  protections: Record<string, Protection> = {};
  warnings: string[] = [];

  constructor(readonly options: ExecutorOptions = {}) {
    this.prefix = `torl-${process.pid}-${poolCounter++}`;
    this.limits = resolveLimits(options.limits);
    checkedOption("workers", options.workers, 2);
    checkedOption("maxProcesses", options.maxProcesses, 64);
    // 0 would keep no output at all, and a /tmp of 0 MB would take no file: neither is "off"
    checkedOption("maxOutputBytes", options.maxOutputBytes, 1 << 20);
    checkedOption("tmpfsMb", options.tmpfsMb, 256);
    checkHugePages(options.hugePages);
    checkNativeTemplate(options.nativeTemplate);
    this.log = options.log ?? ((line) => process.stderr.write(`[sandbox] ${line}\n`));
  }

  /**
   * Starts every worker; warns loudly about each protection that is not active. Calling it again
   * while the pool runs returns the same pool; `run` before `start` starts it.
   */
  start(): Promise<this> {
    if (this.closed) return Promise.reject(new SandboxClosedError());
    this.starting ??= this.startWorkers().catch((error: unknown) => {
      // a later start (or run) tries again; workers that did come up serve meanwhile
      this.starting = undefined;
      throw error;
    });
    return this.starting;
  }

  private async startWorkers(): Promise<this> {
    sweepStaleCgroups();
    const n = this.options.workers ?? 2;
    const started = await Promise.all(Array.from({ length: n }, () => this.spawnWorker()));
    const first = started[0];
    if (first) {
      this.protections = first.protections;
      this.warnings = [...first.warnings];
      for (const [name, p] of Object.entries(first.protections)) {
        if (!p.active) {
          const line = `${name} not active: ${p.reason ?? "unknown"}`;
          if (!this.warnings.includes(line)) this.warnings.push(line);
        }
      }
      for (const w of this.warnings) this.log(`WARNING: isolation incomplete: ${w}`);
      if (first.templateLoop === "python")
        this.log(`the template's loop runs in Python (${first.templateLoopWhy}): more CPU per run than in C`);
    }
    return this;
  }

  /**
   * With no worker running or starting (never started, or every worker died and its replacement
   * failed), starts the pool; if that fails, every waiting request is answered SandboxError with the
   * reason instead of waiting for a worker that will not come.
   */
  private ensureWorkers(): void {
    if (this.closed || this.workers.length > 0) return;
    this.start().catch((error: Error) =>
      this.failQueued(`no sandbox worker could be started: ${error.message}`),
    );
  }

  private failQueued(message: string): void {
    if (this.workers.length > 0) return; // one came up after all: it takes the queue
    for (const job of this.queue.splice(0)) job.resolve(sandboxError(message));
  }

  /** Runs code (a string, or a SandboxFusion request) and answers in SandboxFusion's shape. */
  run(request: RunCodeRequest | string): Promise<RunCodeResponse> {
    const body = typeof request === "string" ? { code: request, language: "python" } : request;
    try {
      return this.runNormalized(normalizeRequest(body, this.limits));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Runs a request `normalizeRequest` made; its limits are checked again against this executor's. */
  runNormalized(request: NormalizedRequest): Promise<RunCodeResponse> {
    if (this.closed) return Promise.reject(new SandboxClosedError());
    try {
      checkRunLimits(request, this.limits);
    } catch (error) {
      return Promise.reject(error);
    }
    const started = performance.now();
    const answer = new Promise<RunCodeResponse>((resolve) => {
      this.queue.push({ request, resolve });
      this.ensureWorkers();
      this.pump();
    }).then((r) => {
      const outcome = { status: r.status, run_status: r.run_result?.status ?? "none" };
      runsTotal.inc(outcome);
      runSeconds.observe(outcome, (performance.now() - started) / 1000);
      return r;
    });
    return traceSpan("run_code", () => answer, { cat: "sandbox" });
  }

  health(): SandboxHealth {
    const ready = this.workers.filter((w) => w.alive).length;
    const busy = this.workers.filter((w) => w.busy).length;
    return {
      status: ready === 0 ? "down" : this.warnings.length > 0 ? "degraded" : "ok",
      workers: { total: this.workers.length, ready, busy },
      queued: this.queue.length,
      completed: this.completed,
      restarts: this.restarts,
      protections: this.protections,
      heap: this.workers.find((w) => w.heap !== undefined)?.heap ?? null,
      templateLoop: this.workers.find((w) => w.templateLoop !== undefined)?.templateLoop ?? null,
      warnings: this.warnings,
    };
  }

  /** Outer pids of the workers (for tests that kill one). */
  workerPids(): number[] {
    return this.workers.map((w) => w.pid).filter((p): p is number => p !== undefined);
  }

  /** The uids runs execute as, one per live worker (host view; for tests that look for leftovers). */
  runUids(): number[] {
    return this.workers.map((w) => w.runUid).filter((u): u is number => u !== undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) {
      job.resolve(sandboxError("the sandbox executor closed before this request ran"));
    }
    await Promise.all(this.workers.map((w) => w.close()));
    this.workers = [];
    this.idle = [];
  }

  private async spawnWorker(): Promise<SandboxWorker> {
    const worker = new SandboxWorker({
      name: `${this.prefix}-${this.counter++}`,
      python: this.options.python,
      maxOutputBytes: this.options.maxOutputBytes,
      tmpfsMb: this.options.tmpfsMb,
      disable: this.options.disable,
      preload: this.options.preload,
      hugePages: this.options.hugePages,
      nativeTemplate: this.options.nativeTemplate,
    });
    this.workers.push(worker);
    worker.onExit = (err) => this.onWorkerExit(worker, err.message);
    try {
      await worker.start();
    } catch (error) {
      this.workers = this.workers.filter((w) => w !== worker);
      throw this.closed ? new SandboxClosedError() : error;
    }
    if (this.closed) {
      // closed while this one started: close() did not see it ready, so it ends here
      this.workers = this.workers.filter((w) => w !== worker);
      await worker.close();
      throw new SandboxClosedError();
    }
    this.idle.push(worker);
    this.pump();
    return worker;
  }

  private onWorkerExit(worker: SandboxWorker, why: string): void {
    this.workers = this.workers.filter((w) => w !== worker);
    this.idle = this.idle.filter((w) => w !== worker);
    if (this.closed) return;
    this.restarts++;
    this.log(`${why}; starting a replacement`);
    this.spawnWorker().catch((error: Error) => {
      this.log(`replacement failed: ${error.message}`);
      if (this.workers.length > 0) return; // the others keep serving; a later death tries again
      // none left: the next request starts the pool afresh; the waiting ones are told why
      this.starting = undefined;
      this.failQueued(`every sandbox worker has died and the replacement failed: ${error.message}`);
    });
  }

  private pump(): void {
    while (this.queue.length > 0 && this.idle.length > 0) {
      const worker = this.idle.shift()!;
      if (!worker.alive) continue;
      const job = this.queue.shift()!;
      const maxProcesses = this.options.maxProcesses ?? 64;
      worker.run({ ...job.request, max_processes: maxProcesses }).then(
        (raw) => {
          this.completed++;
          job.resolve(toResponse(raw, job.request, this.options.maxOutputBytes ?? 1 << 20));
          if (worker.alive) this.idle.push(worker);
          this.pump();
        },
        (error: Error) => {
          this.completed++;
          // close() ended the worker under this run: say that, not that the worker died
          job.resolve(
            sandboxError(
              this.closed
                ? `the sandbox executor closed while this request ran (${error.message})`
                : error.message,
            ),
          );
          if (worker.alive && !worker.busy) this.idle.push(worker);
          this.pump();
        },
      );
    }
  }
}

/** SandboxFusion's answer for a failure of the sandbox itself (not of the code). */
export function sandboxError(message: string): RunCodeResponse {
  return {
    status: "SandboxError",
    message,
    compile_result: null,
    run_result: null,
    executor_pod_name: hostname(),
    files: {},
  };
}

function toResponse(raw: RawRunResult, request: NormalizedRequest, maxOutputBytes: number): RunCodeResponse {
  const notes: string[] = [];
  if (raw.stdout_bytes > maxOutputBytes)
    notes.push(`stdout truncated to ${maxOutputBytes} of ${raw.stdout_bytes} bytes`);
  if (raw.stderr_bytes > maxOutputBytes)
    notes.push(`stderr truncated to ${maxOutputBytes} of ${raw.stderr_bytes} bytes`);
  const run: CommandRunResult = {
    status: raw.timed_out ? "TimeLimitExceeded" : "Finished",
    execution_time: raw.execution_time,
    return_code: raw.timed_out ? null : raw.return_code,
    stdout: raw.stdout,
    stderr: raw.stderr,
  };
  for (const [path, why] of Object.entries(raw.unfetched ?? {}))
    notes.push(`fetch_files '${path}' not read: ${why}`);
  if (raw.timed_out) notes.unshift(`run exceeded run_timeout of ${request.run_timeout} s and was killed`);
  const ok = !raw.timed_out && raw.return_code === 0;
  return {
    status: ok ? "Success" : "Failed",
    message: notes.join("; "),
    compile_result: null,
    run_result: run,
    executor_pod_name: hostname(),
    files: raw.files ?? {},
  };
}
