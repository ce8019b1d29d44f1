// Pools: ActorPool (calls spread over actors) and ThreadPool (worker threads inside one process).
export {
  ActorPool,
  ActorPoolEmptyError,
  type ActorPoolMapOptions,
  ActorPoolNoResultError,
  ActorPoolTimeoutError,
  type PoolCall,
} from "./pool-actor.js";
export {
  ThreadPool,
  ThreadPoolClosedError,
  type ThreadPoolOptions,
  ThreadPoolQueueFullError,
  type ThreadPoolRunOptions,
  type ThreadPoolStats,
  ThreadPoolTaskError,
} from "./pool-thread.js";
