// Public API of @torl-ts/actors: the Ray-style programming model over @torl-ts/core's runtime.
export {
  ActorDiedError,
  type ActorOptions,
  availableResources,
  ClusterAuthError,
  type ClusterInfo,
  type ClusterKeys,
  clusterResources,
  clusterStatus,
  free,
  GetTimeoutError,
  generateClusterKeys,
  get,
  getRuntimeContext,
  InfeasibleResourceError,
  type InitOptions,
  InsecureListenError,
  init,
  invokeInActor,
  isInitialized,
  KeyFileError,
  kill,
  NotInitializedError,
  ObjectLostError,
  ObjectRef,
  objectStoreStats,
  PlacementGroup,
  type PlacementGroupOptions,
  type PlacementStrategy,
  placementGroup,
  put,
  RemoteError,
  type RuntimeContext,
  removePlacementGroup,
  shutdown,
  type TaskOptions,
  wait,
} from "@torl-ts/core";
export { ActorClass, type ActorDefinitionOptions, actor } from "./actor.js";
export * from "./collective/index.js";
export { getActor } from "./get-actor.js";
export type { ActorHandle, RemoteArgs } from "./handle-types.js";
export * from "./pools.js";
export { RemoteFunction, type TaskDefinitionOptions, task } from "./task.js";
