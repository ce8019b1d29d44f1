/**
 * A small pool of worker threads that run the math scorer, so a large batch is graded on every core:
 * a ThreadPool (from @torl-ts/actors) running score-task.ts. Threads start on first use (from the
 * sources each loads the TypeScript through tsx, ~0.5 s) and stay warm; idle ones do not keep the
 * process alive. Work is cut into one chunk per thread; results come back in input order.
 */

import { ThreadPool, type ThreadPoolLibrary, ThreadPoolTaskError } from "@torl-ts/actors";
import { siblingModule } from "@torl-ts/core";
import { verifierErrors } from "./equivalence.js";
import type { RewardScorerInput, RewardScorerOptions } from "./registry.js";
import type { MathScoreResult } from "./score.js";
import type { ScoreChunk, ScoredChunk } from "./score-task.js";

/** A scoring thread failed (the task threw, or the thread died); the cause is attached. */
export class RewardPoolError extends Error {
  override name = "RewardPoolError";
}

export class MathScorePool {
  private pool: ThreadPool<ScoreChunk, ScoredChunk> | null = null;
  private closed = false;

  /** `library`: the pool library under the threads (the default is ThreadPool's; the reward bench compares both). */
  constructor(
    readonly size: number,
    readonly library?: ThreadPoolLibrary,
  ) {}

  /** Scores `inputs` across the threads; resolves in input order. */
  async score(inputs: RewardScorerInput[], options: RewardScorerOptions): Promise<MathScoreResult[]> {
    if (this.closed) throw new RewardPoolError("reward pool is closed");
    this.pool ??= new ThreadPool({
      filename: siblingModule(import.meta.url, "./score-task"),
      size: this.size,
      library: this.library,
    });
    const pool = this.pool;
    const per = Math.ceil(inputs.length / this.size);
    const chunks: RewardScorerInput[][] = [];
    for (let at = 0; at < inputs.length; at += per) chunks.push(inputs.slice(at, at + per));
    const parts = await Promise.all(
      chunks.map((chunk) =>
        pool.run({ inputs: chunk, options }, { name: "scoreChunk" }).catch((e: unknown) => {
          const why = e instanceof ThreadPoolTaskError ? (e.cause as Error)?.message : (e as Error)?.message;
          throw new RewardPoolError(`a reward scoring thread failed: ${why ?? String(e)}`, { cause: e });
        }),
      ),
    );
    for (const part of parts) {
      verifierErrors.count += part.verifierErrors;
      verifierErrors.first ??= part.firstError;
    }
    return parts.flatMap((p) => p.results);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.pool?.close();
    this.pool = null;
  }
}
