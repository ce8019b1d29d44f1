/**
 * The commands @torl-ts/core registers with the `torl` dispatcher: the cluster and its benchmark. Also
 * defineBench, with which every package's benchmark commands are written (a benchmark is a command, not
 * API: it stays off the package's root).
 */
import type { CommandRegistry } from "./dispatch.js";

export { type BenchFlags, type BenchSpec, defineBench } from "./define.js";

export const cliCommands: CommandRegistry = {
  start: async () => (await import("./start.js")).startCommand,
  status: async () => (await import("./status.js")).statusCommand,
  stop: async () => (await import("./stop.js")).stopCommand,
  dashboard: async () => (await import("./dashboard.js")).dashboardCommand,
  logs: async () => (await import("./logs.js")).logsCommand,
  timeline: async () => (await import("./timeline.js")).timelineCommand,
  "bench actors": async () => (await import("../bench/actors.js")).benchActorsCommand,
};
