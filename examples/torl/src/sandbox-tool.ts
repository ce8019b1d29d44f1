/**
 * The rollout tool of the ToRL recipe, built inside each actor rank's process (the trainer's ToolSpec
 * names this module): ToRL's Python code interpreter over a SandboxActorPool (sandbox actors on the
 * runtime, started from the rank's process) or, with rollout.tool.sandbox_url, over an external
 * SandboxFusion server.
 */
import { type BatchCodeRunner, SandboxActorPool, SandboxFusionClient } from "@torl-ts/sandbox";
import { PythonCodeInterpreter } from "@torl-ts/verl";

export interface SandboxToolOptions {
  /** Sandbox actors per rank. */
  actors: number;
  /** Warm interpreters per sandbox actor. */
  workersPerActor: number;
  runTimeout: number;
  memoryLimitMb: number;
  /** An external SandboxFusion-compatible server instead of the actor pool. */
  sandboxUrl?: string | null;
  /** Requests in flight at once against the external server. */
  maxConcurrency?: number;
  /** The string generation stops at to run code (rollout.tool.stop). */
  stop?: string;
  /** Observations this long or longer are cut (rollout.tool.max_observation_chars). */
  maxObservationChars?: number;
}

/** The module URL a ToolSpec uses to reach `createSandboxTool` in a worker process. */
export const SANDBOX_TOOL_MODULE = import.meta.url;

export async function createSandboxTool(options: SandboxToolOptions): Promise<PythonCodeInterpreter> {
  let runner: BatchCodeRunner;
  if (options.sandboxUrl) {
    runner = new SandboxFusionClient(options.sandboxUrl, { concurrency: options.maxConcurrency ?? 32 });
  } else {
    runner = await SandboxActorPool.create({
      actors: options.actors,
      workersPerActor: options.workersPerActor,
    });
  }
  return new PythonCodeInterpreter(runner, {
    runTimeout: options.runTimeout,
    memoryLimitMb: options.memoryLimitMb,
    stop: options.stop,
    maxObservationChars: options.maxObservationChars,
  });
}
