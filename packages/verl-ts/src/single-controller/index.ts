export { type HostedRoleSpec, WorkerHost, WorkerHostError } from "./host.js";
export {
  type BoundMethod,
  type BoundMethods,
  Dispatch,
  DispatchError,
  type DispatchMode,
  type DispatchModeName,
  Execute,
  type ExecuteMode,
  type RegisterOptions,
  type Registration,
  type Registrations,
  type ResolvedRegistration,
  registeredMethods,
  resolveRegistration,
  type WorkerClass,
} from "./registration.js";
export { type PoolBundle, ResourcePool, type ResourcePoolOptions } from "./resource-pool.js";
export { readWorkerEnv, Worker, type WorkerEnv } from "./worker.js";
export {
  type BoundGroup,
  KEEP_FREED_MEMORY_ENV,
  type RoleClasses,
  WorkerGroup,
  type WorkerGroupOptions,
  type WorkerRole,
  WorkerStartTimeoutError,
  workerRole,
} from "./worker-group.js";
