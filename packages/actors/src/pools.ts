// Pools: ActorPool (calls spread over actors) and ThreadPool (worker threads inside one process).
export {
  ActorPool,
  ActorPoolEmptyError,
  type ActorPoolMapOptions,
  ActorPoolNoResultError,
  ActorPoolTimeoutError,
  type PoolCall,
} from "./actor-handle-pool.js";
export {
  ThreadPool,
  ThreadPoolClosedError,
  type ThreadPoolOptions,
  ThreadPoolQueueFullError,
  type ThreadPoolRunOptions,
  type ThreadPoolStats,
  ThreadPoolTaskError,
} from "./thread-pool.js";
export {
  compareThreadPoolLibraries,
  type PoolJobRate,
  type ThreadPoolLibrary,
  type ThreadPoolLibraryComparison,
  ThreadPoolLibraryMissingError,
} from "./thread-pool-library.js";
