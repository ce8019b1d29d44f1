#!/usr/bin/env node
import { cliCommands as actorsCommands } from "@torl-ts/actors/cli";
/**
 * `pnpm torl <command>`: the `torl` dispatcher of @torl-ts/core with every package's commands and the
 * ToRL recipe's own (train, eval, pretrain, report, ...) registered, and the tiny recipe as the main
 * job. Each command is imported lazily, so `pnpm torl status` never loads tensorflow.
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
  pretrain: async () => (await import("./commands.js")).pretrainCommand,
  report: async () => (await import("./commands.js")).reportCommand,
  "new algorithm": async () => (await import("./commands.js")).newAlgorithmCommand,
  "data tiny": async () => (await import("./commands.js")).dataTinyCommand,
  "bench peer": async () => (await import("./bench-peer.js")).benchPeerCommand,
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
