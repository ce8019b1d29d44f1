/**
 * Trainer checkpoints, veRL's layout: `<default_local_dir>/global_step_<N>/` holding `actor/` (one
 * shard per rank: params + AdamW state, see workers/checkpoint-files.ts) and `trainer_state.json` (step,
 * loader state, driver RNG state, summary accumulators), plus `latest_checkpointed_iteration.txt`.
 * A checkpoint is written into `global_step_<N>.tmp` and renamed when complete, so a run killed while
 * saving leaves the previous checkpoint as the latest.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { PromptLoaderState } from "../data/loader.js";

export const LATEST_FILE = "latest_checkpointed_iteration.txt";

/** What the driver saves besides the worker shards. */
export interface TrainerState {
  globalStep: number;
  loader: PromptLoaderState;
  /** State of the driver's RNG (rollout seeds). */
  rng: number;
  /**
   * trainer.mode one_step_off / fully_async: `loader` and `rng` stand before the oldest loader batch not
   * wholly trained (the rollout draws batches ahead of training), and this says what of it was.
   */
  async?: AsyncDataState;
  /** Run facts the summary needs (initial validation accuracy, code ratios ...). */
  summary: Record<string, number | null>;
  /** Wall seconds spent in the run before this checkpoint (all attempts). */
  wallSeconds: number;
}

/** An asynchronous run's data position past `loader` (TrainerState.async). */
export interface AsyncDataState {
  /** The number of the loader batch `loader` stands before (0-based count of the run's batches). */
  batch: number;
  /** trained[i]: the prompt groups (indices in the batch) of batch `batch + i` already trained. */
  trained: number[][];
}

export class TrainerCheckpointError extends Error {
  override name = "TrainerCheckpointError";
}

export class CheckpointManager {
  constructor(readonly root: string) {}

  stepDir(step: number): string {
    return join(this.root, `global_step_${step}`);
  }

  /** The latest complete checkpoint's step, or undefined. */
  latestStep(): number | undefined {
    const f = join(this.root, LATEST_FILE);
    if (!existsSync(f)) return undefined;
    const step = Number(readFileSync(f, "utf8").trim());
    if (!Number.isInteger(step) || step < 0) throw new TrainerCheckpointError(`${f}: not a step number`);
    if (!existsSync(join(this.stepDir(step), "trainer_state.json"))) {
      throw new TrainerCheckpointError(`${f} names step ${step} but ${this.stepDir(step)} is incomplete`);
    }
    return step;
  }

  /** Starts a checkpoint: returns the temporary directory the workers write their shards into. */
  begin(step: number): string {
    const tmp = `${this.stepDir(step)}.tmp`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(join(tmp, "actor"), { recursive: true });
    return tmp;
  }

  /** Completes a checkpoint: writes the trainer state, renames the directory, updates the latest file. */
  commit(step: number, state: TrainerState, keep: number | null): void {
    const tmp = `${this.stepDir(step)}.tmp`;
    writeFileSync(join(tmp, "trainer_state.json"), JSON.stringify(state, null, 1));
    const final = this.stepDir(step);
    rmSync(final, { recursive: true, force: true });
    renameSync(tmp, final);
    const latest = join(this.root, LATEST_FILE);
    writeFileSync(`${latest}.tmp`, String(step));
    renameSync(`${latest}.tmp`, latest);
    if (keep && keep > 0) {
      const steps = this.listSteps().filter((s) => s !== step);
      for (const s of steps.slice(0, Math.max(0, steps.length - (keep - 1))))
        rmSync(this.stepDir(s), { recursive: true, force: true });
    }
  }

  /** Completed checkpoint steps, ascending. */
  listSteps(): number[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root)
      .map((d) => /^global_step_(\d+)$/.exec(d)?.[1])
      .filter((s): s is string => s !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  }

  readState(dir: string): TrainerState {
    const f = join(dir, "trainer_state.json");
    try {
      return JSON.parse(readFileSync(f, "utf8")) as TrainerState;
    } catch (e) {
      throw new TrainerCheckpointError(`${f}: cannot read the trainer state (${(e as Error).message})`);
    }
  }
}

/**
 * The checkpoint trainer.resume_mode asks for and its trainer state: auto, the latest complete one if
 * any; resume_path, trainer.resume_from_path; undefined: a fresh start.
 */
export function checkpointToResume(
  ckpt: CheckpointManager,
  trainer: { resume_mode: "auto" | "disable" | "resume_path"; resume_from_path: string | null },
): { dir: string; state: TrainerState } | undefined {
  let dir: string | undefined;
  if (trainer.resume_mode === "auto") {
    const s = ckpt.latestStep();
    if (s !== undefined) dir = ckpt.stepDir(s);
  } else if (trainer.resume_mode === "resume_path") {
    if (!trainer.resume_from_path)
      throw new TrainerCheckpointError(
        'trainer.resume_from_path must be set when trainer.resume_mode is "resume_path"',
      );
    dir = trainer.resume_from_path;
  }
  return dir === undefined ? undefined : { dir, state: ckpt.readState(dir) };
}

/** A small seeded RNG whose whole state is one 32-bit integer (saved in checkpoints). */
export class DriverRng {
  constructor(public state: number) {
    this.state >>>= 0;
  }

  /** The next 32-bit unsigned integer (mulberry32). */
  nextUint32(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
}
