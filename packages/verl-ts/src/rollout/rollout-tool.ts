/**
 * The tool of a trainer run's text-trigger rollout (ToRL's mode): which one the rollout workers build,
 * and what the driver checks of it before any worker starts.
 */
import type { TrainerConfig } from "../config/types.js";
import {
  CODE_INTERPRETER_TOOL_MODULE,
  type CodeInterpreterToolConfig,
  checkCodeInterpreterHost,
  codeInterpreterSettings,
  createCodeInterpreterTool,
} from "./code-interpreter-tool.js";
import { multiTurnConfig } from "./multi-turn.js";
import { importToolExport, type ToolSpec } from "./tool-config.js";

/**
 * The tool a trainer run's rollout workers build. None when actor_rollout_ref.rollout.num_llm_calls_available
 * is 0 (plain generation, the no-tool control) or with the multi-turn agent loop (its tools come from
 * multi_turn.tool_config_path). Else `given` (the trainer's `tool` option, `--tool`), called with the
 * rollout.tool section when it names no arguments of its own; without one, the Python code interpreter
 * built from actor_rollout_ref.rollout.tool (createCodeInterpreterTool).
 */
export function rolloutToolSpec(cfg: TrainerConfig, given?: ToolSpec | null): ToolSpec | null {
  if (cfg.actor_rollout_ref.rollout.num_llm_calls_available === 0 || multiTurnConfig(cfg)?.enable)
    return null;
  const section = structuredClone(cfg.actor_rollout_ref.rollout.tool) as CodeInterpreterToolConfig;
  if (given) return { ...given, args: given.args ?? [section] };
  return { module: CODE_INTERPRETER_TOOL_MODULE, exportName: "createCodeInterpreterTool", args: [section] };
}

/**
 * What can be checked of a tool spec in the driver, before any worker starts: the module imports, the
 * export is a class or function, and for the code interpreter its settings and the host's Python
 * (unless it runs on sandbox_url). Throws an InputError of one line.
 */
export async function checkToolSpec(spec: ToolSpec): Promise<void> {
  const exp = await importToolExport(spec.module, spec.exportName ?? "default");
  if (exp === createCodeInterpreterTool) {
    const settings = codeInterpreterSettings((spec.args?.[0] ?? {}) as CodeInterpreterToolConfig);
    checkCodeInterpreterHost(settings);
  }
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
