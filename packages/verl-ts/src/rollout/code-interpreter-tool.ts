/**
 * The sandbox code interpreter as an entry of a multi-turn tool config file:
 *
 *   - class_name: "@torl-ts/verl.createCodeInterpreterTool"
 *     config: { type: native, num_workers: 2, default_timeout: 10, memory_limit_mb: 1024 }
 *     tool_schema: { type: function, function: { name: code_interpreter, parameters: {code: string} } }
 *
 * The config keys are those of veRL's SandboxFusionTool: `sandbox_fusion_url` (null or absent: warm
 * Python interpreters of @torl-ts/sandbox in this process; else a SandboxFusion-compatible server),
 * `num_workers` (interpreters, or requests in flight to the server), `default_timeout` (seconds per run)
 * and `memory_limit_mb`. Any other key is refused. The observation follows ToRL's rules
 * (`formatObservation`): stdout, or the last line of the error.
 */
import { InputError } from "@torl-ts/core";
import { SandboxExecutor, SandboxFusionClient } from "@torl-ts/sandbox";
import { PythonCodeInterpreter } from "./code-interpreter.js";

export interface CodeInterpreterToolConfig {
  sandbox_fusion_url?: string | null;
  num_workers?: number;
  default_timeout?: number;
  memory_limit_mb?: number;
}

const KEYS = ["sandbox_fusion_url", "num_workers", "default_timeout", "memory_limit_mb"];

export async function createCodeInterpreterTool(
  config: CodeInterpreterToolConfig = {},
): Promise<PythonCodeInterpreter> {
  const unknown = Object.keys(config).filter((k) => !KEYS.includes(k));
  if (unknown.length)
    throw new InputError(
      `createCodeInterpreterTool: unknown config key(s) ${unknown.join(", ")} (known: ${KEYS.join(", ")})`,
    );
  const workers = config.num_workers ?? 2;
  if (!Number.isInteger(workers) || workers < 1)
    throw new InputError(`createCodeInterpreterTool: num_workers must be an integer >= 1, got ${workers}`);
  const runner = config.sandbox_fusion_url
    ? new SandboxFusionClient(config.sandbox_fusion_url, { concurrency: workers })
    : await new SandboxExecutor({ workers }).start();
  return new PythonCodeInterpreter(runner, {
    runTimeout: config.default_timeout ?? 10,
    ...(config.memory_limit_mb !== undefined ? { memoryLimitMb: config.memory_limit_mb } : {}),
  });
}
