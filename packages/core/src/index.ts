export * from "./api.js";
export { benchActorsCommand } from "./bench/actors.js";
export { startCommand } from "./cli/start.js";
export { statusCommand } from "./cli/status.js";
export { stopCommand } from "./cli/stop.js";
export type { CliCommand } from "./cli-command.js";
export { UsageError } from "./cli-command.js";
export * from "./errors.js";
export { ActorHandleBase } from "./runtime/actor-handle.js";
export { ObjectRef, type OwnerAddress } from "./runtime/object-ref.js";
export type { ActorState, PlacementStrategy } from "./runtime/protocol.js";
export type { RuntimeContext } from "./runtime/runtime.js";
export {
  type ClusterKeys,
  generateClusterKeys,
  isLoopbackHost,
  requireKeysToListen,
  secureClientSocket,
  secureServerSocket,
} from "./wire/security.js";
