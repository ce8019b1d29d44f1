import {
  checkedOption,
  RunRequestError,
  SandboxConfigError,
  SandboxHttpError,
  shownValue,
} from "./errors.js";
import type { CodeRunner, RunCodeRequest, RunCodeResponse, SandboxHealth } from "./types.js";

export interface SandboxFusionClientOptions {
  /** Per-request limit on top of run_timeout, ms (default 30 s). */
  extraTimeoutMs?: number;
  /** Attempts for a request that failed for a transport reason or a 5xx (default 3). */
  attempts?: number;
  /** Requests in flight at once; the rest wait in order (default 32). */
  concurrency?: number;
  /** Limit on one `health()` call, ms (default 10 s). */
  healthTimeoutMs?: number;
}

const CLIENT_OPTIONS = ["extraTimeoutMs", "attempts", "concurrency", "healthTimeoutMs"];

/**
 * The other backend: a client for an external SandboxFusion server (or our own `sandbox serve`),
 * `new SandboxFusionClient("http://host:8080")`. Retries transport errors and 5xx answers; a 4xx
 * answer (a bad request) throws SandboxHttpError at once.
 */
export class SandboxFusionClient implements CodeRunner {
  readonly url: string;
  private active = 0;
  private waiting: (() => void)[] = [];

  private readonly attempts: number;
  private readonly concurrency: number;
  private readonly extraTimeoutMs: number;
  private readonly healthTimeoutMs: number;

  constructor(
    url: string,
    readonly options: SandboxFusionClientOptions = {},
  ) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {
      // refused below
    }
    // "localhost:8080" parses as a URL whose scheme is "localhost:": only http(s) reaches a server
    if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:"))
      throw new SandboxConfigError("url", `must be an http:// or https:// URL, got ${shownValue(url)}`);
    for (const key of Object.keys(options))
      if (!CLIENT_OPTIONS.includes(key))
        throw new SandboxConfigError(key, `no such option; the options are ${CLIENT_OPTIONS.join(", ")}`);
    this.url = url.replace(/\/+$/, "");
    this.attempts = checkedOption("attempts", options.attempts, 3);
    this.concurrency = checkedOption("concurrency", options.concurrency, 32);
    this.extraTimeoutMs = checkedOption("extraTimeoutMs", options.extraTimeoutMs, 30_000, { min: 0 });
    this.healthTimeoutMs = checkedOption("healthTimeoutMs", options.healthTimeoutMs, 10_000);
  }

  async run(request: RunCodeRequest | string): Promise<RunCodeResponse> {
    const body =
      typeof request === "string"
        ? { code: request, language: "python" }
        : { language: "python", ...request };
    // the one field this client computes with (its request's time limit); the server checks the rest
    const runTimeout = body.run_timeout;
    if (
      runTimeout !== undefined &&
      (typeof runTimeout !== "number" || !Number.isFinite(runTimeout) || runTimeout <= 0)
    )
      throw new RunRequestError("run_timeout", `must be a finite number > 0, got ${shownValue(runTimeout)}`);
    await this.acquire();
    try {
      let last: SandboxHttpError | undefined;
      for (let attempt = 1; attempt <= this.attempts; attempt++) {
        try {
          return await this.post(body);
        } catch (error) {
          if (!(error instanceof SandboxHttpError)) throw error;
          last = error;
          if (error.httpStatus !== null && error.httpStatus < 500) throw error;
          if (attempt < this.attempts) await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
        }
      }
      throw new SandboxHttpError(
        this.url,
        last!.httpStatus,
        `${last!.detail} (${this.attempts} attempt${this.attempts === 1 ? "" : "s"}, all failed)`,
      );
    } finally {
      this.release();
    }
  }

  async health(): Promise<SandboxHealth> {
    const res = await fetch(`${this.url}/health`, {
      signal: AbortSignal.timeout(this.healthTimeoutMs),
    }).catch((error: Error) => {
      throw new SandboxHttpError(this.url, null, transportFailure(error, this.healthTimeoutMs));
    });
    if (!res.ok) throw new SandboxHttpError(this.url, res.status, await res.text());
    return (await res.json()) as SandboxHealth;
  }

  private async post(body: RunCodeRequest): Promise<RunCodeResponse> {
    const timeoutMs = (body.run_timeout ?? 10) * 1000 + this.extraTimeoutMs;
    let res: Response;
    try {
      res = await fetch(`${this.url}/run_code`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      throw new SandboxHttpError(this.url, null, transportFailure(error as Error, timeoutMs));
    }
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? text;
      } catch {
        // not JSON: keep the text
      }
      throw new SandboxHttpError(this.url, res.status, message);
    }
    const parsed = JSON.parse(text) as Partial<RunCodeResponse>;
    return {
      status: parsed.status ?? "SandboxError",
      message: parsed.message ?? "",
      compile_result: parsed.compile_result ?? null,
      run_result: parsed.run_result ?? null,
      executor_pod_name: parsed.executor_pod_name ?? null,
      files: parsed.files ?? {},
    };
  }

  private acquire(): Promise<void> {
    if (this.active < this.concurrency) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiting.push(resolve)).then(() => {
      this.active++;
    });
  }

  private release(): void {
    this.active--;
    this.waiting.shift()?.();
  }
}

/** Why a fetch failed, with the cause undici keeps apart ("fetch failed" alone names none). */
function transportFailure(error: Error, timeoutMs: number): string {
  if (error.name === "TimeoutError") return `no answer within ${timeoutMs} ms`;
  const cause = (error as Error & { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message;
  return why && !error.message.includes(why) ? `${error.message} (${why})` : error.message;
}
