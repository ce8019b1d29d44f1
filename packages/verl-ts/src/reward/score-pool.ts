/**
 * A small pool of worker threads that run the math scorer, so a large batch is graded on every core.
 * Threads start on first use (each loads the TypeScript sources through tsx, ~0.5 s) and stay warm.
 * Work is cut into one chunk per thread; results come back in input order.
 */
import { Worker } from "node:worker_threads";
import { isTypeScriptModule } from "@torl-ts/core";
import { verifierErrors } from "./equivalence.js";
import type { RewardScorerInput, RewardScorerOptions } from "./registry.js";
import type { MathScoreResult } from "./score.js";

/** A worker thread died or answered with an error; names the thread and the cause. */
export class RewardPoolError extends Error {
  override name = "RewardPoolError";
}

interface WorkerReply {
  id: number;
  results?: MathScoreResult[];
  error?: string;
  /** Comparator failures in this chunk (see verifierErrors). */
  verifierErrors?: number;
  firstError?: string | null;
}

interface Pending {
  resolve: (r: MathScoreResult[]) => void;
  reject: (e: Error) => void;
}

interface Slot {
  worker: Worker;
  pending: Map<number, Pending>;
}

export class MathScorePool {
  private slots: Slot[] = [];
  private nextId = 0;
  private closed = false;

  constructor(readonly size: number) {}

  private start(): void {
    if (this.slots.length > 0) return;
    for (let t = 0; t < this.size; t++) {
      const worker = new Worker(new URL("./score-worker.mjs", import.meta.url), {
        workerData: { ext: isTypeScriptModule(import.meta.url) ? ".ts" : ".js" },
      });
      const slot: Slot = { worker, pending: new Map() };
      worker.on("message", (m: WorkerReply) => {
        if (m.verifierErrors) {
          verifierErrors.count += m.verifierErrors;
          verifierErrors.first ??= m.firstError ?? null;
        }
        const p = slot.pending.get(m.id);
        if (!p) return;
        slot.pending.delete(m.id);
        if (slot.pending.size === 0) worker.unref();
        if (m.error) p.reject(new RewardPoolError(`reward thread ${t}: ${m.error}`));
        else p.resolve(m.results!);
      });
      const failAll = (why: string) => {
        for (const p of slot.pending.values()) p.reject(new RewardPoolError(`reward thread ${t} ${why}`));
        slot.pending.clear();
      };
      worker.on("error", (e) => failAll(`failed: ${e.message}`));
      worker.on("exit", (code) => {
        if (!this.closed) failAll(`exited with code ${code}`);
      });
      worker.unref();
      this.slots.push(slot);
    }
  }

  /** Scores `inputs` across the threads; resolves in input order. */
  async score(inputs: RewardScorerInput[], options: RewardScorerOptions): Promise<MathScoreResult[]> {
    if (this.closed) throw new RewardPoolError("reward pool is closed");
    this.start();
    const per = Math.ceil(inputs.length / this.slots.length);
    const parts = await Promise.all(
      this.slots.map((slot, t) => {
        const chunk = inputs.slice(t * per, (t + 1) * per);
        if (chunk.length === 0) return Promise.resolve([] as MathScoreResult[]);
        const id = this.nextId++;
        return new Promise<MathScoreResult[]>((resolve, reject) => {
          slot.pending.set(id, { resolve, reject });
          slot.worker.ref(); // keep the process alive while a chunk is out; idle threads are unref'd
          slot.worker.postMessage({ id, inputs: chunk, options });
        });
      }),
    );
    return parts.flat();
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
    this.slots = [];
  }
}
