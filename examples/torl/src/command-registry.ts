/**
 * The commands of `pnpm torl`: every package's (the same ones the installed `torl` offers), the ToRL
 * recipe's `train` (the trainer with the recipe's `torl.` keys, samples and report), and `bench peer` and
 * `bench scale`'s PyTorch side (they need Python with torch, so they stay in the repository). Each
 * command is imported lazily, so `pnpm torl status` never loads tensorflow.
 */
import { cliCommands as actorsCommands } from "@torl-ts/actors/cli";
import type { CommandLoader, CommandRegistry } from "@torl-ts/core";
import { cliCommands as coreCommands } from "@torl-ts/core/cli";
import { cliCommands as sandboxCommands } from "@torl-ts/sandbox/cli";
import { cliCommands as verlCommands } from "@torl-ts/verl/cli";

export const commands: CommandRegistry = {
  ...coreCommands,
  ...actorsCommands,
  ...sandboxCommands,
  ...verlCommands,
  train: async () => (await import("./commands.js")).trainCommand,
  "bench peer": async () => (await import("./bench/peer.js")).benchPeerCommand,
  // The package's probe, then the same step on PyTorch (needs the recipe's script, so it is here).
  "bench scale": async () => (await import("./bench/scale-peer.js")).benchScaleCommand,
};

/** The tiny ToRL recipe, run by `pnpm torl` with no command. */
export const mainJob: CommandLoader = async () => (await import("./commands.js")).mainCommand;
