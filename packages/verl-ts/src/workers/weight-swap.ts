/**
 * A rollout worker's weight versions while it generates (trainer.mode=fully_async): one generation at a
 * time (`exclusive`), and new weights (`swap`) applied
 *
 * - at once when no generation runs;
 * - with async_training.partial_rollout, at the running generation's next token boundary: the TIR engine
 *   awaits `source().boundary()` between decode steps, the weights are replaced there and the engine
 *   recomputes its sequences' contexts under them, so a response continues under the new policy and its
 *   tokens span two versions (a rollout whose sequences all wait for tools is woken to take them at once);
 * - without it, when the running generation ends (in-flight responses finish under the old weights).
 *
 * `swap` resolves once the weights are in. Versions count the actor updates in the weights.
 *
 * A test hook, TORL_TEST_HOLD_FOR_WEIGHTS=<generation>:<boundary> (1-based, this worker's count), makes
 * that generation wait at that token boundary until new weights arrive (or it is aborted), so a weight
 * update lands mid-generation whatever the timing.
 */
import type { TrainerConfig } from "../config/types.js";
import type { Tokenizer } from "../models/tokenizer.js";
import type { DataProto } from "../protocol/data-proto.js";
import { rolloutTrainingBatch } from "../rollout/batch.js";
import type { PolicyVersionSource, TirSample } from "../rollout/tir.js";

interface PendingSwap {
  apply: () => void;
  version: number;
  done: () => void;
}

export class WeightSwapGate {
  /** The version of the weights generation uses now. */
  version = 0;
  private tail: Promise<void> = Promise.resolve();
  private running = false;
  private pending?: PendingSwap;
  /** Called when an update starts waiting: the held test generation, and a rollout waiting for tools. */
  private readonly onPending = new Set<() => void>();
  private generations = 0;
  private readonly hold?: { generation: number; boundary: number };

  constructor(
    private readonly partial: boolean,
    holdSpec = process.env.TORL_TEST_HOLD_FOR_WEIGHTS,
  ) {
    const m = holdSpec ? /^(\d+):(\d+)$/.exec(holdSpec) : null;
    if (holdSpec && !m)
      throw new RangeError(`TORL_TEST_HOLD_FOR_WEIGHTS must be <generation>:<boundary>, got ${holdSpec}`);
    if (m) this.hold = { generation: Number(m[1]), boundary: Number(m[2]) };
  }

  /** Runs generation `f` alone (after the ones before it), with the version source it samples under. */
  async exclusive<T>(f: (source: PolicyVersionSource) => Promise<T>, signal?: AbortSignal): Promise<T> {
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const before = this.tail;
    this.tail = this.tail.then(() => mine);
    await before;
    this.running = true;
    const generation = ++this.generations;
    try {
      return await f(this.source(generation, signal));
    } finally {
      this.running = false;
      // an update that arrived after the last token boundary goes in now
      this.applyPending();
      release();
    }
  }

  /** New weights: `apply` runs at once, at the running generation's next token boundary, or when it ends. */
  swap(apply: () => void, version: number): Promise<void> {
    if (!this.running) {
      apply();
      this.version = version;
      return Promise.resolve();
    }
    if (this.pending) throw new Error("a weight update arrived while another one waits to be applied");
    return new Promise<void>((done) => {
      this.pending = { apply, version, done };
      for (const wake of [...this.onPending]) wake();
    });
  }

  private applyPending(): boolean {
    const p = this.pending;
    if (!p) return false;
    this.pending = undefined;
    p.apply();
    this.version = p.version;
    p.done();
    return true;
  }

  private source(generation: number, signal?: AbortSignal): PolicyVersionSource {
    let boundaries = 0;
    return {
      version: () => this.version,
      boundary: async () => {
        boundaries++;
        const h = this.hold;
        const held = h?.generation === generation && h.boundary === boundaries;
        if (this.partial && held && !this.pending && !signal?.aborted) {
          let wake!: () => void;
          await new Promise<void>((resolve) => {
            wake = resolve;
            this.onPending.add(wake);
            signal?.addEventListener("abort", () => resolve(), { once: true });
          });
          this.onPending.delete(wake);
        }
        return this.partial && this.applyPending();
      },
      onUpdate: (wake) => {
        if (!this.partial) return () => {};
        this.onPending.add(wake);
        return () => this.onPending.delete(wake);
      },
    };
  }
}

/** Tags a streamed chunk: metaInfo `rows` (its rows' indices in the input) and veRL's param_version_start / _end columns. */
export function tagChunk(chunk: DataProto, rows: number[], versions: [number, number][]): DataProto {
  chunk.metaInfo.rows = rows;
  chunk.nonTensorBatch.param_version_start = versions.map((v) => v[0]);
  chunk.nonTensorBatch.param_version_end = versions.map((v) => v[1]);
  return chunk;
}

/** Finished samples of a streamed generation as a training-batch chunk (rolloutTrainingBatch's columns), tagged. */
export function streamedChunk(
  samples: TirSample[],
  prompts: DataProto,
  tokenizer: Tokenizer,
  cfg: TrainerConfig,
  withLogProbs: boolean,
): DataProto {
  const ordered = [...samples].sort((a, b) => a.index - b.index);
  const R = cfg.actor_rollout_ref.rollout.response_length;
  const chunk = rolloutTrainingBatch(ordered, {
    padTokenId: tokenizer.padTokenId,
    promptLength: prompts.tensor("input_ids").shape[1]!,
    responseLength: R,
    maskToolOutput: cfg.actor_rollout_ref.actor.mask_tool_output,
  });
  if (withLogProbs) {
    const lp = new Float32Array(ordered.length * R);
    ordered.forEach((s, b) => {
      const row = s.logprobs ?? [];
      for (let t = 0; t < Math.min(R, row.length); t++) lp[b * R + t] = row[t]!;
    });
    chunk.batch.rollout_log_probs = { data: lp, shape: [ordered.length, R] };
  }
  return tagChunk(
    chunk,
    ordered.map((s) => s.index),
    ordered.map((s) => s.policyVersions ?? [0, 0]),
  );
}
