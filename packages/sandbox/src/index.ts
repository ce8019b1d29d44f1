// Public API of @torl-ts/sandbox.
export { SandboxActorPool, type SandboxActorPoolOptions, TokenBucket } from "./actor-pool.js";
export { BENCH_CODE, benchSandbox, benchSandboxCommand, type SandboxBenchResult } from "./bench.js";
export { sandboxCommand } from "./cli.js";
export { SandboxFusionClient, type SandboxFusionClientOptions } from "./client.js";
export {
  type BatchCodeRunner,
  type CodeInterpreterOptions,
  EMPTY_OBSERVATION,
  extractLastPythonBlock,
  formatObservation,
  OBSERVATION_KEEP,
  OBSERVATION_LIMIT,
  OUTPUT_STOP,
  PythonCodeInterpreter,
  wrapObservation,
} from "./code-interpreter.js";
export * from "./errors.js";
export { type ExecutorOptions, SandboxExecutor, sandboxError } from "./executor.js";
export {
  checkRunLimits,
  DEFAULT_LIMITS,
  type NormalizedRequest,
  normalizeRequest,
  type RequestLimits,
  resolveLimits,
} from "./request.js";
export { SandboxActor, SandboxActorClass, type SandboxActorOptions } from "./sandbox-actor.js";
export {
  DEFAULT_MAX_BODY_BYTES,
  SandboxListenError,
  type SandboxServer,
  type ServerOptions,
  serveSandbox,
} from "./server.js";
export {
  executeAll,
  type JsonSchema,
  newInstanceId,
  type OpenAIFunctionSchema,
  type Tool,
  type ToolCall,
  type ToolResult,
} from "./tool.js";
export type * from "./types.js";
export { type IsolationStep, type RawRunResult, SandboxWorker, type WorkerOptions } from "./worker.js";
