import { SandboxHttpError } from "./errors.js";
import type { CodeRunner, RunCodeRequest, RunCodeResponse, SandboxHealth } from "./types.js";

export interface SandboxFusionClientOptions {
  /** Per-request limit on top of run_timeout, ms (default 30 s). */
  extraTimeoutMs?: number;
  /** Attempts for a request that failed for a transport reason or a 5xx (default 3). */
  attempts?: number;
  /** Requests in flight at once; the rest wait in order (default 32). */
  concurrency?: number;
}

/**
 * The other backend: a client for an external SandboxFusion server (or our own `sandbox serve`),
 * `new SandboxFusionClient("http://host:8080")`. Retries transport errors and 5xx answers; a 4xx
 * answer (a bad request) throws SandboxHttpError at once.
 */
export class SandboxFusionClient implements CodeRunner {
  readonly url: string;
  private active = 0;
  private waiting: (() => void)[] = [];

  constructor(
    url: string,
    readonly options: SandboxFusionClientOptions = {},
  ) {
    this.url = url.replace(/\/+$/, "");
  }

  async run(request: RunCodeRequest | string): Promise<RunCodeResponse> {
    const body =
      typeof request === "string"
        ? { code: request, language: "python" }
        : { language: "python", ...request };
    await this.acquire();
    try {
      const attempts = this.options.attempts ?? 3;
      let last: Error | undefined;
      for (let attempt = 1; attempt <= attempts; attempt++) {
        try {
          return await this.post(body);
        } catch (error) {
          last = error as Error;
          if (error instanceof SandboxHttpError && error.httpStatus !== null && error.httpStatus < 500)
            throw error;
          if (attempt < attempts) await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
        }
      }
      throw last!;
    } finally {
      this.release();
    }
  }

  async health(): Promise<SandboxHealth> {
    const res = await fetch(`${this.url}/health`).catch((error: Error) => {
      throw new SandboxHttpError(this.url, null, error.message);
    });
    if (!res.ok) throw new SandboxHttpError(this.url, res.status, await res.text());
    return (await res.json()) as SandboxHealth;
  }

  private async post(body: RunCodeRequest): Promise<RunCodeResponse> {
    const timeoutMs = (body.run_timeout ?? 10) * 1000 + (this.options.extraTimeoutMs ?? 30_000);
    let res: Response;
    try {
      res = await fetch(`${this.url}/run_code`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      throw new SandboxHttpError(this.url, null, (error as Error).message);
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
    const limit = this.options.concurrency ?? 32;
    if (this.active < limit) {
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
