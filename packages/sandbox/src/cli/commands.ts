/** The commands @torl-ts/sandbox registers with the `torl` dispatcher. */
import type { CommandRegistry } from "@torl-ts/core";

export const cliCommands: CommandRegistry = {
  sandbox: async () => (await import("./serve.js")).sandboxCommand,
  "bench sandbox": async () => (await import("../bench/sandbox.js")).benchSandboxCommand,
};
