#!/usr/bin/env node
import { cliCommands as actorsCommands } from "@torl-ts/actors/cli";
/**
 * `pnpm torl <command>`: the `torl` dispatcher of @torl-ts/core with every package's commands (the same
 * ones the installed `torl` offers), the ToRL recipe's `train` (the trainer with the recipe's `torl.`
 * keys, samples and report), the tiny recipe as the main job, and `bench peer` and `bench scale`'s
 * PyTorch side (they need Python with torch, so they stay in the repository). Each command is imported lazily, so `pnpm torl status` never loads
 * tensorflow.
 */
import { type CommandLoader, type CommandRegistry, runProgram, torlVersion } from "@torl-ts/core";
import { cliCommands as coreCommands } from "@torl-ts/core/cli";
import { cliCommands as sandboxCommands } from "@torl-ts/sandbox/cli";
import { cliCommands as verlCommands } from "@torl-ts/verl/cli";

const commands: CommandRegistry = {
  ...coreCommands,
  ...actorsCommands,
  ...sandboxCommands,
  ...verlCommands,
  train: async () => (await import("./commands.js")).trainCommand,
  "bench peer": async () => (await import("./bench/peer.js")).benchPeerCommand,
  // The package's probe, then the same step on PyTorch (needs the recipe's script, so it is here).
  "bench scale": async () => (await import("./bench/scale-peer.js")).benchScaleCommand,
};

const mainJob: CommandLoader = async () => (await import("./commands.js")).mainCommand;

runProgram({
  name: "pnpm torl",
  version: torlVersion(),
  commands,
  main: {
    loader: mainJob,
    usage: "pnpm torl [k=v ...]            run the tiny ToRL recipe (the main job), with config overrides",
  },
});
