/** Typed errors of the sandbox, each carrying the facts needed to act on it. */
import { TorlError } from "@torl-ts/core";

/** A `/run_code` request that cannot be run as given (HTTP 400). `field` names the offending field. */
export class RunRequestError extends TorlError {
  constructor(
    readonly field: string,
    reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

/** An executor or server option that cannot work (`option` names it, e.g. `limits.maxMemoryMB`). */
export class SandboxConfigError extends TorlError {
  constructor(
    readonly option: string,
    reason: string,
  ) {
    super(`sandbox option ${option}: ${reason}`);
  }
}

/** A sandbox worker (one warm fork server) could not start. */
export class SandboxStartError extends TorlError {
  constructor(
    readonly worker: string,
    readonly python: string,
    reason: string,
    readonly stderr = "",
  ) {
    super(`sandbox worker ${worker} (${python}) failed to start: ${reason}${stderr ? `\n${stderr}` : ""}`);
  }
}

/** A sandbox worker died while it held a run (its run gets a SandboxError response; the worker is replaced). */
export class SandboxWorkerDiedError extends TorlError {
  constructor(
    readonly worker: string,
    readonly exitCode: number | null,
    readonly signal: string | null,
    detail = "",
  ) {
    super(
      `sandbox worker ${worker} died (exit code ${exitCode ?? "none"}, signal ${signal ?? "none"})${detail ? `: ${detail}` : ""}`,
    );
  }
}

/** A sandbox worker failed to run a request for a reason of its own (it stays up). */
export class SandboxInternalError extends TorlError {
  constructor(
    readonly worker: string,
    detail: string,
  ) {
    super(`sandbox worker ${worker} could not run the request: ${detail}`);
  }
}

/** The executor was used after `close()`. */
export class SandboxClosedError extends TorlError {
  constructor() {
    super("the sandbox executor is closed");
  }
}

/** An external SandboxFusion server answered with an HTTP error or could not be reached. */
export class SandboxHttpError extends TorlError {
  constructor(
    readonly url: string,
    readonly httpStatus: number | null,
    readonly detail: string,
  ) {
    super(`sandbox server ${url}: ${httpStatus === null ? "" : `HTTP ${httpStatus}: `}${detail}`);
  }
}

/** A value as a message shows it: strings quoted, so that "2" is told from 2. */
export function shownValue(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/**
 * `value` of option `option` checked: undefined gives `fallback`; otherwise a finite number (never a
 * string that looks like one) that is whole (`integer`, the default) and at least `min` (default 1),
 * or above `above` where given; else SandboxConfigError naming the option and the value.
 */
export function checkedOption(
  option: string,
  value: unknown,
  fallback: number,
  { integer = true, min = 1, above }: { integer?: boolean; min?: number; above?: number } = {},
): number {
  if (value === undefined) return fallback;
  const inRange = (v: number) => (above === undefined ? v >= min : v > above);
  if (
    typeof value !== "number" ||
    !Number.isFinite(value) ||
    (integer && !Number.isInteger(value)) ||
    !inRange(value)
  ) {
    const bound = above === undefined ? `>= ${min}` : `> ${above}`;
    throw new SandboxConfigError(
      option,
      `must be ${integer ? "a whole number" : "a number"} ${bound}, got ${shownValue(value)}`,
    );
  }
  return value;
}
