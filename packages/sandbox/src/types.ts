/**
 * SandboxFusion-compatible request and response shapes (POST /run_code), shared by every backend:
 * the local warm pool, the HTTP server, the client for an external SandboxFusion server and the
 * sandbox actor pool.
 */

/** `POST /run_code` body, as SandboxFusion defines it (fields we do not use are accepted and ignored). */
export interface RunCodeRequest {
  code: string;
  /** Only "python" (alias "python3") runs here. */
  language?: string;
  /** Wall-clock limit in seconds (SandboxFusion default 10); > 0 and at most the service's `maxRunTimeout`. */
  run_timeout?: number;
  /** Accepted for compatibility; Python has no compile step. */
  compile_timeout?: number;
  /** Memory the run may allocate, in MB (default 1024); > 0 and at most the service's `maxMemoryMB` (nothing switches it off). */
  memory_limit_MB?: number;
  stdin?: string | null;
  /** Relative path -> base64 content, written into the run's working directory first. */
  files?: Record<string, string>;
  /** Relative paths read back after the run, returned base64 in `files`. */
  fetch_files?: string[];
}

export type RunStatus = "Success" | "Failed" | "SandboxError";
export type CommandRunStatus = "Finished" | "TimeLimitExceeded" | "Error";

export interface CommandRunResult {
  status: CommandRunStatus;
  /** Seconds. */
  execution_time: number | null;
  /** Exit code; negative signal number when killed by a signal; null on timeout. */
  return_code: number | null;
  stdout: string | null;
  stderr: string | null;
}

/** `POST /run_code` response, as SandboxFusion defines it. */
export interface RunCodeResponse {
  status: RunStatus;
  message: string;
  compile_result: CommandRunResult | null;
  run_result: CommandRunResult | null;
  executor_pod_name: string | null;
  files: Record<string, string>;
}

/** Anything that runs code and answers in SandboxFusion's shape. */
export interface CodeRunner {
  run(request: RunCodeRequest): Promise<RunCodeResponse>;
}

/** A runner that also takes many requests in one call (answers in order); a rollout uses it for a batch. */
export interface BatchCodeRunner extends CodeRunner {
  runBatch?(requests: RunCodeRequest[]): Promise<RunCodeResponse[]>;
}

/** One isolation measure and whether it is in force on this machine. */
export interface Protection {
  active: boolean;
  how?: string;
  reason?: string;
}

/** A warm heap in 2 MiB hugetlb pages, or in the machine's ordinary pages. */
export type HeapPages = "huge" | "small";

/** Where a worker's template loop (ending runs, forking and preparing the next) runs: C or Python. */
export type TemplateLoop = "native" | "python";

/** What `GET /health` and `SandboxExecutor.health()` report. */
export interface SandboxHealth {
  status: "ok" | "degraded" | "down";
  workers: { total: number; ready: number; busy: number };
  queued: number;
  completed: number;
  restarts: number;
  protections: Record<string, Protection>;
  /** The page size of the workers' warm heap: 2 MiB hugetlb pages or ordinary ones (see `hugePages`);
   * null while no worker has started. */
  heap: HeapPages | null;
  /** Where the workers' template loop runs (see `nativeTemplate`); null while no worker has started. */
  templateLoop: TemplateLoop | null;
  /** Every protection that is not active, in words; empty when isolation is complete. */
  warnings: string[];
}
