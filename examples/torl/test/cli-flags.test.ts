/**
 * Every command parses its flags with @torl-ts/core's parseFlags (node:util parseArgs): an unknown flag
 * is refused the same way everywhere, before the command does any work.
 */
import { cliCommands as actorsCommands } from "@torl-ts/actors/cli";
import { type CliCommand, startCommand, statusCommand, stopCommand, UsageError } from "@torl-ts/core";
import { cliCommands as coreCommands } from "@torl-ts/core/cli";
import { cliCommands as sandboxCommands } from "@torl-ts/sandbox/cli";
import { cliCommands as verlCommands } from "@torl-ts/verl/cli";
import test from "ava";
import { mainCommand, trainCommand } from "../src/commands.js";

/** The benchmarks are reached only through the CLI registries (they are no package's public API). */
const bench = { ...coreCommands, ...actorsCommands, ...sandboxCommands, ...verlCommands };

// `verify` and `sandbox serve` keep parsers of their own for now (they are being reworked elsewhere).
const COMMANDS: Record<string, CliCommand> = {
  start: startCommand,
  status: statusCommand,
  stop: stopCommand,
  train: trainCommand,
  eval: await verlCommands.eval!(),
  pretrain: await verlCommands.pretrain!(),
  report: await verlCommands.report!(),
  "data tiny": await verlCommands["data tiny"]!(),
  "model tiny": await verlCommands["model tiny"]!(),
  "(main job)": mainCommand,
  "bench actors": await bench["bench actors"]!(),
  "bench collectives": await bench["bench collectives"]!(),
  "bench pool": await bench["bench pool"]!(),
  "bench sandbox": await bench["bench sandbox"]!(),
  "bench reward": await bench["bench reward"]!(),
  "bench model": await bench["bench model"]!(),
  "bench rollout": await bench["bench rollout"]!(),
};

for (const [name, command] of Object.entries(COMMANDS))
  test(`${name}: an unknown flag is a UsageError naming it, before any work`, async (t) => {
    await t.throwsAsync(command.run(["--zz-not-a-flag", "1"]), {
      instanceOf: UsageError,
      message: "unknown flag --zz-not-a-flag",
    });
  });
