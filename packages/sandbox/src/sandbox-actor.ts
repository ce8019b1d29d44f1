/**
 * A sandbox worker as an actor: one actor process holds a SandboxExecutor (warm fork servers). This
 * module is what the actor's worker process imports, so it must stay free of test code.
 */
import { actor } from "@torl-ts/actors";
import { type ExecutorOptions, SandboxExecutor } from "./executor.js";
import type { RunCodeRequest, RunCodeResponse, SandboxHealth } from "./types.js";

/** ExecutorOptions that can travel to another process (no functions). */
export type SandboxActorOptions = Omit<ExecutorOptions, "log">;

export class SandboxActor {
  private readonly executor: SandboxExecutor;
  private readonly started: Promise<unknown>;

  constructor(options: SandboxActorOptions = {}) {
    this.executor = new SandboxExecutor({ workers: 1, ...options });
    this.started = this.executor.start();
    this.started.catch(() => {});
  }

  async run(request: RunCodeRequest): Promise<RunCodeResponse> {
    await this.started;
    return this.executor.run(request);
  }

  async runBatch(requests: RunCodeRequest[]): Promise<RunCodeResponse[]> {
    await this.started;
    return Promise.all(requests.map((r) => this.executor.run(r)));
  }

  async health(): Promise<SandboxHealth> {
    await this.started;
    return this.executor.health();
  }

  /** The actor's own process id (host view), for tests that kill it. */
  pid(): number {
    return process.pid;
  }

  async close(): Promise<void> {
    await this.executor.close();
  }
}

/** The actor definition; the pool sets resources and concurrency through `.options(...)`. */
export const SandboxActorClass = actor(SandboxActor, { module: import.meta.url, maxConcurrency: 256 });
