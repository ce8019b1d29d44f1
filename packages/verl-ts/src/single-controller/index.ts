export {
  Dispatch,
  DispatchError,
  type DispatchMode,
  type DispatchModeName,
  Execute,
  type ExecuteMode,
  type RegisterOptions,
  type ResolvedRegistration,
  register,
  registeredMethods,
  registerMethod,
  resolveRegistration,
} from "./decorator.js";
export { type HostedRoleSpec, WorkerHost, WorkerHostError } from "./host.js";
export { type PoolBundle, ResourcePool, type ResourcePoolOptions } from "./resource-pool.js";
export { readWorkerEnv, Worker, type WorkerEnv } from "./worker.js";
export {
  type BoundMethods,
  type RoleInstances,
  WorkerGroup,
  type WorkerGroupOptions,
  type WorkerRole,
  WorkerStartTimeoutError,
  workerRole,
} from "./worker-group.js";
