import { ActorDiedError, RemoteError } from "@torl-ts/actors";
import { TorlError } from "@torl-ts/core";

/**
 * A worker failed during training: which one (group role, rank, actor id, pid), in which method and
 * step, why (the worker died with an exit code / signal, or its method threw), and how to go on.
 */
export class WorkerFailureError extends TorlError {
  constructor(
    message: string,
    readonly facts: {
      role: string;
      rank: number;
      actorId?: string;
      pid?: number;
      method: string;
      step: number;
      stage: string;
      died: boolean;
      reason: string;
      lastCheckpoint?: number;
    },
    override readonly cause: unknown,
  ) {
    super(message);
  }
}

interface FailureContext {
  /** The role the group plays (default: the group's name). */
  role?: string;
  actorIds: string[];
  pids: number[];
  step: number;
  stage: string;
  lastCheckpoint: number | undefined;
  checkpointDir: string;
}

/** A WorkerFailureError for an error raised by a worker-group call, or undefined for other errors. */
export function describeWorkerFailure(e: unknown, ctx: FailureContext): WorkerFailureError | undefined {
  const w = e as { workerRank?: number; workerRole?: string; workerMethod?: string; workerGroup?: string };
  if (!(e instanceof Error) || w.workerRank === undefined) return undefined;
  const rank = w.workerRank;
  const role = ctx.role ?? w.workerGroup ?? w.workerRole ?? "worker";
  const method = w.workerMethod ?? "?";
  const died = e instanceof ActorDiedError;
  let reason: string;
  if (e instanceof ActorDiedError) {
    const c = (e as unknown as { cause?: { kind?: string; message?: string } }).cause;
    const parts = [c?.kind ?? "died"];
    if (e.exitCode !== undefined && e.exitCode !== null) parts.push(`exit code ${e.exitCode}`);
    if (e.signal) parts.push(`signal ${e.signal}`);
    if (c?.message) parts.push(c.message);
    reason = `the worker process died (${parts.join(", ")})`;
  } else if (e instanceof RemoteError) {
    reason = `${e.remoteName ?? "Error"} thrown in the worker: ${e.message}`;
  } else reason = `${e.name}: ${e.message}`;
  const actorId = (e as { actorId?: string }).actorId ?? ctx.actorIds[rank];
  const pid = ctx.pids[rank];
  const resume =
    ctx.lastCheckpoint !== undefined
      ? `rerun with trainer.resume_mode=auto to resume from ${ctx.checkpointDir}/global_step_${ctx.lastCheckpoint}`
      : "no checkpoint was saved yet (set trainer.save_freq); a rerun starts over";
  const message =
    `worker ${role} rank ${rank} (actor ${actorId ?? "?"}, pid ${pid ?? "?"}) failed in ${method} ` +
    `at step ${ctx.step} (${ctx.stage}): ${reason}; ${resume}`;
  return new WorkerFailureError(
    message,
    {
      role,
      rank,
      actorId,
      pid,
      method,
      step: ctx.step,
      stage: ctx.stage,
      died,
      reason,
      lastCheckpoint: ctx.lastCheckpoint,
    },
    e,
  );
}
