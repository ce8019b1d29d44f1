/**
 * The Python code interpreter of a run, built from the keys of `actor_rollout_ref.rollout.tool` (see
 * docs/configuration.md): the one factory behind every path that runs Python for the model: the
 * trainer's default tool, `torl train --tool @torl-ts/verl#createCodeInterpreterTool`, the ToRL recipe,
 * `torl eval`, and an entry of a multi-turn tool config file:
 *
 *   - class_name: "@torl-ts/verl.createCodeInterpreterTool"
 *     config: { type: native, run_timeout: 10, memory_limit_mb: 1024, sandbox_actors: 1, sandbox_workers: 2 }
 *
 * Keys (each optional; the defaults are ppo-trainer.yaml's):
 *   - sandbox_url: null: the built-in sandbox of @torl-ts/sandbox; else a SandboxFusion-compatible server;
 *   - sandbox_actors: sandbox actors started on the runtime (0: the interpreters run in this process);
 *   - sandbox_workers: warm Python interpreters per sandbox actor (or in this process);
 *   - run_timeout (seconds per run), memory_limit_mb (per run);
 *   - max_concurrency: runs in flight at once (over the sandbox actors, or against sandbox_url);
 *   - stop: the string generation pauses at to run the round's code (it opens the appended output);
 *   - max_observation_chars: observations this long or longer keep their first and last half;
 *   - delay_ms: a benchmark knob: every code run answers this many milliseconds later (a batch of runs,
 *     which run together, once), to stand for a slower sandbox or a remote one;
 *   - name (only code_interpreter) and config (must be empty): the rest of the rollout.tool section,
 *     so the section itself is a valid argument.
 * Any other key, or a value out of range, is refused with an InputError naming the key.
 */
import { execFileSync } from "node:child_process";
import { isInitialized } from "@torl-ts/actors";
import { InputError } from "@torl-ts/core";
import {
  type BatchCodeRunner,
  checkRunLimits,
  DEFAULT_LIMITS,
  SandboxActorPool,
  SandboxExecutor,
  SandboxFusionClient,
} from "@torl-ts/sandbox";
import { OBSERVATION_LIMIT, OUTPUT_STOP, PythonCodeInterpreter } from "./code-interpreter.js";

/** The keys of `actor_rollout_ref.rollout.tool` the code interpreter reads (snake_case, as in the config). */
export interface CodeInterpreterToolConfig {
  name?: string;
  stop?: string;
  sandbox_url?: string | null;
  sandbox_actors?: number;
  sandbox_workers?: number;
  run_timeout?: number;
  memory_limit_mb?: number;
  max_concurrency?: number;
  max_observation_chars?: number;
  delay_ms?: number;
  config?: Record<string, unknown>;
}

/** Every setting of the code interpreter, defaults filled in and checked. */
export interface CodeInterpreterSettings {
  sandboxUrl: string | null;
  sandboxActors: number;
  sandboxWorkers: number;
  runTimeout: number;
  memoryLimitMb: number;
  maxConcurrency: number;
  stop: string;
  maxObservationChars: number;
  /** Milliseconds added to every code run (a benchmark knob). */
  delayMs: number;
}

const DEFAULTS: CodeInterpreterSettings = {
  sandboxUrl: null,
  sandboxActors: 1,
  sandboxWorkers: 2,
  runTimeout: 10,
  memoryLimitMb: 1024,
  maxConcurrency: 32,
  stop: OUTPUT_STOP,
  maxObservationChars: OBSERVATION_LIMIT,
  delayMs: 0,
};

const KEYS = [
  "name",
  "stop",
  "sandbox_url",
  "sandbox_actors",
  "sandbox_workers",
  "run_timeout",
  "memory_limit_mb",
  "max_concurrency",
  "max_observation_chars",
  "delay_ms",
  "config",
];

/** The error of a code interpreter setting; the key is `actor_rollout_ref.rollout.tool.<key>`. */
function refuse(key: string, message: string): InputError {
  return new InputError(`actor_rollout_ref.rollout.tool.${key} ${message}`);
}

function integer(key: string, value: unknown, min: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min)
    throw refuse(key, `must be an integer >= ${min}, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * The settings of `tool` (the rollout.tool section, or part of it), checked: what the factory builds
 * from, and what the trainer checks before any worker starts.
 */
export function codeInterpreterSettings(tool: CodeInterpreterToolConfig = {}): CodeInterpreterSettings {
  const unknown = Object.keys(tool).filter((k) => !KEYS.includes(k));
  if (unknown.length)
    throw new InputError(
      `the code interpreter has no setting ${unknown.join(", ")} (its keys: ${KEYS.slice(1).join(", ")})`,
    );
  if (tool.name !== undefined && tool.name !== "code_interpreter")
    throw refuse("name", `is ${JSON.stringify(tool.name)}; the code interpreter is code_interpreter`);
  if (tool.config !== undefined && Object.keys(tool.config).length)
    throw refuse(
      "config",
      `has ${Object.keys(tool.config).join(", ")}, which the code interpreter does not read (it is for another tool's settings)`,
    );
  const url = tool.sandbox_url ?? null;
  if (url !== null && (typeof url !== "string" || !/^https?:\/\/./.test(url)))
    throw refuse("sandbox_url", `must be null or an http(s) URL, got ${JSON.stringify(url)}`);
  const s: CodeInterpreterSettings = {
    sandboxUrl: url,
    sandboxActors: integer("sandbox_actors", tool.sandbox_actors ?? DEFAULTS.sandboxActors, 0),
    sandboxWorkers: integer("sandbox_workers", tool.sandbox_workers ?? DEFAULTS.sandboxWorkers, 1),
    runTimeout: tool.run_timeout ?? DEFAULTS.runTimeout,
    memoryLimitMb: tool.memory_limit_mb ?? DEFAULTS.memoryLimitMb,
    maxConcurrency: integer("max_concurrency", tool.max_concurrency ?? DEFAULTS.maxConcurrency, 1),
    stop: tool.stop ?? DEFAULTS.stop,
    maxObservationChars: integer(
      "max_observation_chars",
      tool.max_observation_chars ?? DEFAULTS.maxObservationChars,
      1,
    ),
    delayMs: integer("delay_ms", tool.delay_ms ?? DEFAULTS.delayMs, 0),
  };
  if (typeof s.stop !== "string" || s.stop === "") throw refuse("stop", "must be a non-empty string");
  const limits: [string, unknown][] = [
    ["run_timeout", s.runTimeout],
    ["memory_limit_mb", s.memoryLimitMb],
  ];
  for (const [key, v] of limits)
    if (typeof v !== "number" || !(v > 0))
      throw refuse(key, `must be a number > 0, got ${JSON.stringify(v)}`);
  // the built-in sandbox's maxima: a run over one would be refused at every call
  if (!s.sandboxUrl) {
    try {
      checkRunLimits({ run_timeout: s.runTimeout, memory_limit_MB: s.memoryLimitMb }, DEFAULT_LIMITS);
    } catch (e) {
      const key = (e as { field?: string }).field === "run_timeout" ? "run_timeout" : "memory_limit_mb";
      throw refuse(key, `${(e as Error).message.replace(/^\w+: /, "")}`);
    }
  }
  return s;
}

/**
 * Refuses, naming what is missing, a host whose built-in sandbox could not run: the code runs with
 * `$TORL_SANDBOX_PYTHON`, else `python3` on PATH. Nothing to check when the code runs on sandbox_url.
 */
export function checkCodeInterpreterHost(s: CodeInterpreterSettings): void {
  if (s.sandboxUrl) return;
  const python = process.env.TORL_SANDBOX_PYTHON || "python3";
  try {
    execFileSync(python, ["-c", "import sys; assert sys.version_info >= (3, 8)"], {
      stdio: "ignore",
      timeout: 60_000,
    });
  } catch (e) {
    const why = (e as { code?: string }).code === "ENOENT" ? "is not installed (not found)" : "does not run";
    throw new InputError(
      `the Python code interpreter (the rollout's tool while actor_rollout_ref.rollout.num_llm_calls_available > 0) ` +
        `needs Python 3, and ${python} ${why}: install python3, set TORL_SANDBOX_PYTHON to one, point ` +
        "actor_rollout_ref.rollout.tool.sandbox_url at a SandboxFusion server, or set num_llm_calls_available=0 for no tool",
    );
  }
}

/** `runner` with every run (a batch once: its runs go together) answering `delayMs` later. */
function delayedRunner(runner: BatchCodeRunner, delayMs: number): BatchCodeRunner {
  if (delayMs === 0) return runner;
  const wait = () => new Promise((resolve) => setTimeout(resolve, delayMs));
  const close = (runner as { close?: () => Promise<void> }).close;
  return {
    run: async (r) => {
      await wait();
      return runner.run(r);
    },
    ...(runner.runBatch
      ? {
          runBatch: async (rs: Parameters<NonNullable<BatchCodeRunner["runBatch"]>>[0]) => {
            await wait();
            return runner.runBatch!(rs);
          },
        }
      : {}),
    ...(close ? { close: () => close.call(runner) } : {}),
  } as BatchCodeRunner;
}

/** Where the code runs: an external server, sandbox actors on the runtime, or this process. */
async function startRunner(
  s: CodeInterpreterSettings,
  o: CodeInterpreterStartOptions,
): Promise<BatchCodeRunner> {
  if (s.sandboxUrl) return new SandboxFusionClient(s.sandboxUrl, { concurrency: s.maxConcurrency });
  if (s.sandboxActors === 0)
    return new SandboxExecutor({ workers: s.sandboxWorkers, ...(o.log ? { log: o.log } : {}) }).start();
  if (!isInitialized())
    throw refuse(
      "sandbox_actors",
      `is ${s.sandboxActors}: sandbox actors need the actor runtime (init()); set it to 0 to run the interpreters in this process`,
    );
  return SandboxActorPool.create({
    actors: s.sandboxActors,
    workersPerActor: s.sandboxWorkers,
    maxInFlightPerActor: Math.max(1, Math.ceil(s.maxConcurrency / s.sandboxActors)),
  });
}

/** How the factory starts the sandbox (for direct callers; a worker gives none). */
export interface CodeInterpreterStartOptions {
  /** The in-process sandbox's lines (sandbox_actors: 0). */
  log?: (line: string) => void;
}

/**
 * ToRL's Python code interpreter with the settings of `tool` (the keys of actor_rollout_ref.rollout.tool,
 * see the file comment), its sandbox started. The trainer builds its tool with this in each rollout
 * worker; the tool's `close()` frees the sandbox.
 */
export async function createCodeInterpreterTool(
  tool: CodeInterpreterToolConfig = {},
  options: CodeInterpreterStartOptions = {},
): Promise<PythonCodeInterpreter> {
  const s = codeInterpreterSettings(tool);
  return new PythonCodeInterpreter(delayedRunner(await startRunner(s, options), s.delayMs), {
    runTimeout: s.runTimeout,
    memoryLimitMb: s.memoryLimitMb,
    stop: s.stop,
    maxObservationChars: s.maxObservationChars,
  });
}

/** The module a worker process imports for `createCodeInterpreterTool` (this file, .ts or .js). */
export const CODE_INTERPRETER_TOOL_MODULE = import.meta.url;
