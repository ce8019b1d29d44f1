export * from "./api.js";
export type { CliCommand } from "./cli/command.js";
export { InputError, UsageError } from "./cli/command.js";
export { type CommandSpec, defineCommand, type ExitCode, type FlagSpecs } from "./cli/define.js";
export {
  type CliProgram,
  type CommandLoader,
  type CommandRegistry,
  dispatch,
  runProgram,
  torlVersion,
} from "./cli/dispatch.js";
export { type FlagSpec, type FlagValues, parseFlags } from "./cli/flags.js";
export { forProgram, programName, USAGE_PROGRAM } from "./cli/program-name.js";
export {
  debugFromEnv,
  describeSystemError,
  exitCodeFor,
  formatCliError,
  runCommand,
  runScript,
} from "./cli/run-command.js";
export { startCommand } from "./cli/start.js";
export { statusCommand } from "./cli/status.js";
export { stopCommand } from "./cli/stop.js";
export type { ClusterStatus, LogsRead, PlacementGroupStatus } from "./cluster/messages.js";
export { type Dashboard, type DashboardOptions, startDashboard } from "./dashboard/server.js";
export * from "./errors.js";
export type { ActorHandle, RemoteArgs } from "./handle-types.js";
export {
  childExecArgv,
  isTypeScriptModule,
  siblingModule,
  siblingModulePath,
  TypeScriptLoaderMissingError,
  threadEntry,
} from "./module-files.js";
export { type Activity, setProcessActivity } from "./observe/activity.js";
export { type ChromeTrace, chromeTrace } from "./observe/chrome-trace.js";
export { clusterProcesses, TimelineWriter, timeline } from "./observe/cluster-timeline.js";
export {
  type CounterFamily,
  type GaugeFamily,
  type HistogramFamily,
  type MetricFamily,
  type MetricSample,
  metricCounter,
  metricFamilies,
  metricGauge,
  metricHistogram,
  SECONDS_BUCKETS,
} from "./observe/metrics.js";
export type {
  OwnedObject,
  ProcessesReport,
  ProcessReport,
  RunningCall,
  ThreadActorReport,
} from "./observe/process-report.js";
export { type TraceCategory, type TraceEvent, traceSpan } from "./observe/timeline.js";
export { checkAddress } from "./options.js";
export { ActorHandleBase } from "./runtime/actor-handle.js";
export { getCallSignal, NoCurrentCallError } from "./runtime/call-context.js";
export { ExecutorError } from "./runtime/executor.js";
export {
  ObjectRef,
  type ObjectRefGenerator,
  type OwnerAddress,
  type StreamItem,
} from "./runtime/object-ref.js";
export type { ActorState, PlacementStrategy } from "./runtime/protocol.js";
export type { RuntimeContext } from "./runtime/runtime.js";
export {
  ThreadActorHandle,
  ThreadActorOptionError,
  ThreadActorUnsupportedError,
} from "./runtime/thread-actor.js";
export { NodeAffinitySchedulingStrategy, type SchedulingStrategy } from "./scheduling-strategy.js";
export { MAX_FRAME_BYTES, MAX_WIRE_FRAME_BYTES } from "./wire/batch.js";
export { registerSerializer, type SerializerOptions } from "./wire/codec.js";
export {
  type ClusterKeys,
  generateClusterKeys,
  isLoopbackHost,
  requireKeysToListen,
  secureClientSocket,
  secureServerSocket,
} from "./wire/security.js";
