/** The commands @torl-ts/actors registers with the `torl` dispatcher. */
import type { CommandRegistry } from "@torl-ts/core";

export const cliCommands: CommandRegistry = {
  "bench collectives": async () => (await import("../bench/collectives.js")).benchCollectivesCommand,
  "bench pool": async () => (await import("../bench/pool.js")).benchPoolCommand,
};
