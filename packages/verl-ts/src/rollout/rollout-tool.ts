/**
 * The tool of a trainer run's text-trigger rollout (ToRL's mode): which one the rollout workers build,
 * and what the driver checks of it before any worker starts.
 */
import { InputError } from "@torl-ts/core";
import type { TrainerConfig } from "../config/types.js";
import { OUTPUT_STOP } from "./code-interpreter.js";
import {
  CODE_INTERPRETER_TOOL_MODULE,
  type CodeInterpreterToolConfig,
  checkCodeInterpreterHost,
  codeInterpreterSettings,
  createCodeInterpreterTool,
} from "./code-interpreter-tool.js";
import { multiTurnConfig } from "./multi-turn.js";
import { checkTool, guardTool, type Tool } from "./tool.js";
import { importToolExport, instantiateTool, resolveToolModule, type ToolSpec } from "./tool-config.js";

/**
 * The tool a trainer run's rollout workers build. None when actor_rollout_ref.rollout.num_llm_calls_available
 * is 0 (plain generation, the no-tool control) or with the multi-turn agent loop (its tools come from
 * multi_turn.tool_config_path). Else `given` (the trainer's `tool` option, `--tool`), called with the
 * rollout.tool section when it names no arguments of its own; without one, the Python code interpreter
 * built from actor_rollout_ref.rollout.tool (createCodeInterpreterTool). A relative `given.module`
 * (./tool.mjs, ../tools/x.js) is resolved here against `cwd`, the driver's working directory, as
 * `torl train --tool` does: a worker would resolve it against this package's own folder.
 */
export function rolloutToolSpec(
  cfg: TrainerConfig,
  given?: ToolSpec | null,
  cwd: string = process.cwd(),
): ToolSpec | null {
  if (cfg.actor_rollout_ref.rollout.num_llm_calls_available === 0 || multiTurnConfig(cfg)?.enable)
    return null;
  const section = structuredClone(cfg.actor_rollout_ref.rollout.tool) as CodeInterpreterToolConfig;
  // call_timeout is the rollout's bound on every call into the tool (buildRolloutTool), not a setting
  // of the code interpreter, which refuses keys it does not read
  delete (section as Record<string, unknown>).call_timeout;
  if (given) {
    const rel = typeof given.module === "string" && /^\.\.?(\/|$)/.test(given.module);
    return {
      ...given,
      ...(rel ? { module: resolveToolModule(given.module, cwd) } : {}),
      args: given.args ?? [section],
    };
  }
  return { module: CODE_INTERPRETER_TOOL_MODULE, exportName: "createCodeInterpreterTool", args: [section] };
}

/**
 * What can be checked of a tool spec in the driver, before any worker starts: the module imports, the
 * export is a class or function, and for the code interpreter its settings and the host's Python
 * (unless it runs on sandbox_url). Throws an InputError of one line.
 */
export async function checkToolSpec(spec: ToolSpec): Promise<void> {
  checkToolArgs(spec.args);
  const exp = await importToolExport(spec.module, spec.exportName ?? "default");
  if (exp === createCodeInterpreterTool) {
    const settings = codeInterpreterSettings((spec.args?.[0] ?? {}) as CodeInterpreterToolConfig);
    checkCodeInterpreterHost(settings);
  }
}

/**
 * `tool.args` must be an array (the constructor's or the factory's arguments) of values that reach the
 * workers as they are. BigInt is refused here naming its path (it travels to the workers but the run
 * fails later on it, far from its cause); functions and cycles are refused with a SerializationError
 * naming their path when the workers are spawned.
 */
export function checkToolArgs(args: unknown): void {
  if (args === undefined) return;
  if (!Array.isArray(args))
    throw new InputError(
      `tool.args must be an array (the arguments of the tool's constructor or factory, e.g. [{...}]), got ${
        args === null ? "null" : typeof args === "object" ? "an object" : typeof args
      }`,
    );
  const walk = (v: unknown, path: string, seen: Set<object>): void => {
    if (typeof v === "bigint")
      throw new InputError(`${path}: a BigInt cannot be given to a tool; give a number or a string`);
    if (typeof v !== "object" || v === null || seen.has(v) || ArrayBuffer.isView(v)) return;
    seen.add(v);
    if (v instanceof Map)
      for (const [k, x] of v) {
        walk(k, `${path}.<key>`, seen);
        walk(x, `${path}.get(${JSON.stringify(String(k))})`, seen);
      }
    else if (v instanceof Set) for (const x of v) walk(x, `${path}.<element>`, seen);
    else if (Array.isArray(v)) for (const [i, x] of v.entries()) walk(x, `${path}[${i}]`, seen);
    else
      for (const [k, x] of Object.entries(v))
        walk(x, /^[A-Za-z_$][\w$]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`, seen);
    seen.delete(v);
  };
  for (const [i, a] of args.entries()) walk(a, `tool.args[${i}]`, new Set());
}

/** A spec as `module#export`, for messages. */
export function toolSpecLabel(spec: ToolSpec): string {
  return `${spec.module}#${spec.exportName ?? "default"}`;
}

/**
 * The rollout tool a worker builds from `spec`: checked as a Tool where it is built (checkTool), its
 * stop strings matched against rollout.tool.stop, and every call into it checked and bounded by
 * rollout.tool.call_timeout (the code interpreter's runs are bounded by run_timeout as well).
 */
export async function buildRolloutTool(spec: ToolSpec, cfg: TrainerConfig): Promise<Tool> {
  const where = toolSpecLabel(spec);
  const built = await instantiateTool(spec.module, spec.exportName ?? "default", spec.args ?? []);
  const tool = checkTool(built, where);
  const ro = cfg.actor_rollout_ref.rollout;
  // rollout.tool.stop, when set, must be a trigger of the tool: its own stop strings start its calls
  const stop = ro.tool.stop;
  if (stop !== OUTPUT_STOP && !tool.stop.includes(stop))
    throw new InputError(
      `actor_rollout_ref.rollout.tool.stop is ${JSON.stringify(stop)} but the tool ${tool.name} stops at ` +
        `${JSON.stringify(tool.stop)}: give the tool that stop string, or remove the key`,
    );
  return guardTool(tool, {
    label: `${tool.name} (${where})`,
    callTimeoutMs: ro.tool.call_timeout * 1000,
    maxConcurrency: ro.tool.max_concurrency,
  });
}

/** The run's tool in words, for the trainer's first lines (what runs is never left to guess). */
export function describeRolloutTool(cfg: TrainerConfig, spec: ToolSpec | null): string {
  const mt = multiTurnConfig(cfg);
  if (mt?.enable) return `the multi-turn agent loop's tools (${mt.tool_config_path ?? "none"})`;
  if (!spec) return "none (actor_rollout_ref.rollout.num_llm_calls_available=0)";
  if (spec.module !== CODE_INTERPRETER_TOOL_MODULE || spec.exportName !== "createCodeInterpreterTool")
    return `${spec.module}#${spec.exportName ?? "default"}`;
  const s = codeInterpreterSettings((spec.args?.[0] ?? {}) as CodeInterpreterToolConfig);
  const where = s.sandboxUrl
    ? s.sandboxUrl
    : s.sandboxActors > 0
      ? `${s.sandboxActors} sandbox actor(s) x ${s.sandboxWorkers} interpreters per rollout worker`
      : `${s.sandboxWorkers} interpreters in each rollout worker`;
  return `the Python code interpreter (${where}; run_timeout ${s.runTimeout} s, memory_limit_mb ${s.memoryLimitMb})`;
}
