/**
 * Every command parses its flags with @torl-ts/core's parseFlags (node:util parseArgs): an unknown flag
 * is refused the same way everywhere, before the command does any work.
 */
import { benchCollectivesCommand } from "@torl-ts/actors";
import { cliCommands as actorCommands } from "@torl-ts/actors/cli";
import {
  benchActorsCommand,
  type CliCommand,
  startCommand,
  statusCommand,
  stopCommand,
  UsageError,
} from "@torl-ts/core";
import { benchSandboxCommand } from "@torl-ts/sandbox";
import { benchModelCommand, benchRewardCommand, benchRolloutCommand } from "@torl-ts/verl";
import test from "ava";
import {
  dataTinyCommand,
  evalCommand,
  mainCommand,
  pretrainCommand,
  reportCommand,
  trainCommand,
} from "../src/commands.js";

// `verify` and `sandbox serve` keep parsers of their own for now (they are being reworked elsewhere).
const COMMANDS: Record<string, CliCommand> = {
  start: startCommand,
  status: statusCommand,
  stop: stopCommand,
  train: trainCommand,
  eval: evalCommand,
  pretrain: pretrainCommand,
  report: reportCommand,
  "data tiny": dataTinyCommand,
  "(main job)": mainCommand,
  "bench actors": benchActorsCommand,
  "bench collectives": benchCollectivesCommand,
  "bench pool": await actorCommands["bench pool"]!(),
  "bench sandbox": benchSandboxCommand,
  "bench reward": benchRewardCommand,
  "bench model": benchModelCommand,
  "bench rollout": benchRolloutCommand,
};

for (const [name, command] of Object.entries(COMMANDS))
  test(`${name}: an unknown flag is a UsageError naming it, before any work`, async (t) => {
    await t.throwsAsync(command.run(["--zz-not-a-flag", "1"]), {
      instanceOf: UsageError,
      message: "unknown flag --zz-not-a-flag",
    });
  });
