// Public API of @torl-ts/sandbox.
export { SandboxActorPool, type SandboxActorPoolOptions, TokenBucket } from "./actor-pool.js";
export { sandboxCommand } from "./cli/serve.js";
export { SandboxFusionClient, type SandboxFusionClientOptions } from "./client.js";
export * from "./errors.js";
export { type ExecutorOptions, SandboxExecutor, sandboxError } from "./executor.js";
export { HUGE_HEAP_MIN_FAULT_US, pageFaultMicros } from "./python.js";
export {
  checkRunLimits,
  DEFAULT_LIMITS,
  MAX_FILE_PATH_BYTES,
  type NormalizedRequest,
  normalizeRequest,
  type RequestLimits,
  resolveLimits,
} from "./request.js";
export { SandboxActor, SandboxActorClass, type SandboxActorOptions } from "./sandbox-actor.js";
export {
  type ConnectionLimits,
  DEFAULT_CONNECTION_LIMITS,
  DEFAULT_MAX_BODY_BYTES,
  SandboxListenError,
  type SandboxServer,
  type ServerOptions,
  serveSandbox,
} from "./server.js";
export type * from "./types.js";
export {
  FrameReader,
  type IsolationStep,
  MAX_FRAME_BYTES,
  type RawRunResult,
  SandboxWorker,
  type WorkerOptions,
} from "./worker.js";
