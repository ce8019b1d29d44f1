import { checkedOption, RunRequestError, SandboxConfigError, shownValue } from "./errors.js";
import type { RunCodeRequest } from "./types.js";

/** A validated request with every default filled in (what a worker receives). */
export interface NormalizedRequest {
  code: string;
  run_timeout: number;
  memory_limit_MB: number;
  stdin: string;
  files: Record<string, string>;
  fetch_files: string[];
  /** Seconds the worker may spend writing `files` before the run; over it the request fails, the worker lives. */
  setup_timeout?: number;
}

/** The service's own maxima: a request asking for more is refused (HTTP 400), never run. */
export interface RequestLimits {
  /** Longest `run_timeout` accepted, seconds. */
  maxRunTimeout: number;
  /** Largest `memory_limit_MB` accepted, MB. */
  maxMemoryMB: number;
  /** Largest code + stdin + files, bytes. */
  maxRequestBytes: number;
  /** Most entries in `files`. */
  maxFiles: number;
  /** Largest total of `files` once decoded, bytes. */
  maxFilesBytes: number;
  /** Most entries in `fetch_files` (each file read back is at most 32 MiB). */
  maxFetchFiles: number;
  /**
   * Longest the worker may spend writing a request's `files` before its run starts, seconds. A
   * request over it is answered SandboxError without running; the worker goes on serving.
   */
  setupTimeout: number;
}

export const DEFAULT_LIMITS: RequestLimits = {
  maxRunTimeout: 300,
  maxMemoryMB: 8192,
  maxRequestBytes: 32 << 20,
  maxFiles: 1000,
  maxFilesBytes: 16 << 20,
  maxFetchFiles: 8,
  setupTimeout: 10,
};

/** Longest path accepted in `files` and `fetch_files`, bytes (a name within it at most 255). */
export const MAX_FILE_PATH_BYTES = 1024;

/** Limits that count things: they must be whole numbers. */
const COUNT_LIMITS = new Set<string>(["maxFiles", "maxFetchFiles", "maxFilesBytes", "maxRequestBytes"]);

/** The defaults with `overrides` applied; throws SandboxConfigError for a maximum that is not a positive number. */
export function resolveLimits(overrides: Partial<RequestLimits> = {}): RequestLimits {
  if (typeof overrides !== "object" || overrides === null || Array.isArray(overrides))
    throw new SandboxConfigError("limits", `must be an object of limits, got ${shownValue(overrides)}`);
  for (const key of Object.keys(overrides))
    if (!(key in DEFAULT_LIMITS))
      throw new SandboxConfigError(
        `limits.${key}`,
        `no such limit; limits are ${Object.keys(DEFAULT_LIMITS).join(", ")}`,
      );
  const limits = { ...DEFAULT_LIMITS };
  for (const key of Object.keys(limits) as (keyof RequestLimits)[]) {
    // above 0, never off; counts whole
    limits[key] = checkedOption(
      `limits.${key}`,
      overrides[key],
      limits[key],
      COUNT_LIMITS.has(key) ? {} : { integer: false, above: 0 },
    );
  }
  return limits;
}

/**
 * The limits a run asks for, checked against `limits` (a request that switched a limit off or asked
 * for more than the service allows is refused): both `normalizeRequest` and the executor call it.
 */
export function checkRunLimits(
  request: Pick<NormalizedRequest, "run_timeout" | "memory_limit_MB">,
  limits: RequestLimits,
): void {
  const within = (field: string, value: number, max: number, unit: string): void => {
    if (typeof value !== "number" || !Number.isFinite(value))
      throw new RunRequestError(field, "must be a finite number");
    if (value <= 0) throw new RunRequestError(field, `must be > 0 ${unit}, got ${value}`);
    if (value > max)
      throw new RunRequestError(field, `${value} ${unit} is over this server's limit of ${max} ${unit}`);
  };
  within("run_timeout", request.run_timeout, limits.maxRunTimeout, "s");
  within("memory_limit_MB", request.memory_limit_MB, limits.maxMemoryMB, "MB");
}

/** SandboxFusion's `/run_code` request fields (the others of its API are not served here). */
const REQUEST_FIELDS = [
  "code",
  "language",
  "compile_timeout",
  "run_timeout",
  "memory_limit_MB",
  "stdin",
  "files",
  "fetch_files",
];

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function checkRelativePath(field: string, path: string): void {
  const parts = path.split("/");
  if (
    path.startsWith("/") ||
    parts.some((part) => part === "..") ||
    parts.every((p) => p === "" || p === ".")
  ) {
    throw new RunRequestError(field, `path '${path}' must be relative and stay inside the working directory`);
  }
  const bytes = Buffer.byteLength(path);
  if (bytes > MAX_FILE_PATH_BYTES) {
    throw new RunRequestError(field, `path of ${bytes} bytes is over the limit of ${MAX_FILE_PATH_BYTES}`);
  }
  if (parts.some((part) => Buffer.byteLength(part) > 255)) {
    throw new RunRequestError(field, "a name in the path is over 255 bytes");
  }
}

/** Bytes a base64 string decodes to. */
function decodedLength(b64: string): number {
  const pad = b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0;
  return Math.floor((b64.length * 3) / 4) - pad;
}

/**
 * Validates a SandboxFusion `/run_code` body and fills defaults (run_timeout 10 s, memory 1024 MB).
 * Throws RunRequestError naming the field and the reason: a limit of 0 or below, or over the
 * service's maximum, is refused (it never switches a limit off).
 */
export function normalizeRequest(body: unknown, limits: RequestLimits = DEFAULT_LIMITS): NormalizedRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new RunRequestError("body", "must be a JSON object");
  }
  const r = body as Record<string, unknown>;
  // a misspelt field (`runtimeout`) would otherwise run with the default it meant to change
  for (const key of Object.keys(r))
    if (!REQUEST_FIELDS.includes(key))
      throw new RunRequestError(key, `no such field; a request's fields are ${REQUEST_FIELDS.join(", ")}`);
  if (typeof r.code !== "string") throw new RunRequestError("code", "is required and must be a string");
  const language = r.language ?? "python";
  if (typeof language !== "string") throw new RunRequestError("language", "must be a string");
  if (language !== "python" && language !== "python3") {
    throw new RunRequestError("language", `'${language}' is not supported; this sandbox runs 'python'`);
  }
  const num = (field: string, fallback: number): number => {
    const v = r[field];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "number" || !Number.isFinite(v))
      throw new RunRequestError(field, "must be a finite number");
    return v;
  };
  const run_timeout = num("run_timeout", 10);
  num("compile_timeout", 10);
  const memory_limit_MB = num("memory_limit_MB", 1024);
  checkRunLimits({ run_timeout, memory_limit_MB }, limits);
  const stdin = r.stdin ?? "";
  if (typeof stdin !== "string") throw new RunRequestError("stdin", "must be a string or null");
  const files: Record<string, string> = {};
  if (r.files !== undefined && r.files !== null) {
    if (typeof r.files !== "object" || Array.isArray(r.files)) {
      throw new RunRequestError("files", "must be an object mapping relative paths to base64 content");
    }
    const entries = Object.entries(r.files as Record<string, unknown>);
    if (entries.length > limits.maxFiles) {
      throw new RunRequestError(
        "files",
        `${entries.length} files, over this server's limit of ${limits.maxFiles} files per request`,
      );
    }
    let decoded = 0;
    for (const [path, content] of entries) {
      checkRelativePath(`files['${path}']`, path);
      if (typeof content !== "string" || !BASE64.test(content)) {
        throw new RunRequestError(`files['${path}']`, "content must be a base64 string");
      }
      decoded += decodedLength(content);
      files[path] = content;
    }
    if (decoded > limits.maxFilesBytes) {
      throw new RunRequestError(
        "files",
        `${decoded} bytes in all (decoded), over this server's limit of ${limits.maxFilesBytes} bytes per request`,
      );
    }
  }
  const fetch_files: string[] = [];
  if (r.fetch_files !== undefined && r.fetch_files !== null) {
    if (!Array.isArray(r.fetch_files))
      throw new RunRequestError("fetch_files", "must be an array of relative paths");
    if (r.fetch_files.length > limits.maxFetchFiles) {
      throw new RunRequestError(
        "fetch_files",
        `${r.fetch_files.length} paths, over this server's limit of ${limits.maxFetchFiles} per request`,
      );
    }
    for (const p of r.fetch_files) {
      if (typeof p !== "string") throw new RunRequestError("fetch_files", "must contain only strings");
      checkRelativePath("fetch_files", p);
      fetch_files.push(p);
    }
  }
  let size = Buffer.byteLength(r.code) + Buffer.byteLength(stdin);
  for (const c of Object.values(files)) size += c.length;
  if (size > limits.maxRequestBytes) {
    throw new RunRequestError(
      "body",
      `code, stdin and files total ${size} bytes, over the limit of ${limits.maxRequestBytes}`,
    );
  }
  return {
    code: r.code,
    run_timeout,
    memory_limit_MB,
    stdin,
    files,
    fetch_files,
    setup_timeout: limits.setupTimeout,
  };
}

/** Builds a request object from plain arguments (the programmatic API). */
export function toRequest(codeOrRequest: string | RunCodeRequest): RunCodeRequest {
  return typeof codeOrRequest === "string" ? { code: codeOrRequest, language: "python" } : codeOrRequest;
}
