// Collective communication among actor processes (ring-based, over ZeroMQ).
export { createCollectiveGroup } from "./actors.js";
export {
  type CollectiveArray,
  type ReduceKernelArray,
  type ReduceOp,
  registerReduceKernel,
} from "./dtype.js";
export {
  CollectiveArgumentError,
  CollectiveError,
  CollectiveGroupBrokenError,
  CollectiveGroupDestroyedError,
  CollectiveGroupNotFoundError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
} from "./errors.js";
export {
  CollectiveGroup,
  type CollectiveGroupOptions,
  type CollectiveMember,
  createCollectiveGroupOn,
  destroyCollectiveGroup,
  getCollectiveGroup,
} from "./group.js";
export { type AllGatherOptions, collective } from "./member.js";
export { ProcessMember, ProcessMemberError, ProcessMemberExitedError } from "./process-member.js";
export { PublishedArrays } from "./published.js";
export type { CollectiveTransport } from "./ring.js";
export { type ShardRange, shardBounds, shardRange } from "./shard.js";
