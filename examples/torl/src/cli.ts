#!/usr/bin/env node
/**
 * `pnpm torl <command>`: the one entry point. Each command lives in the package that owns it and is
 * imported lazily, so `pnpm torl status` never loads tensorflow.
 */
import type { CliCommand } from "@torl-ts/core";

type Loader = () => Promise<CliCommand>;

const commands: Record<string, Loader> = {
  start: async () => (await import("@torl-ts/core")).startCommand,
  status: async () => (await import("@torl-ts/core")).statusCommand,
  stop: async () => (await import("@torl-ts/core")).stopCommand,
  sandbox: async () => (await import("@torl-ts/sandbox")).sandboxCommand,
  verify: async () => (await import("@torl-ts/verl/reward")).verifyCommand,
  train: async () => (await import("./commands.js")).trainCommand,
  eval: async () => (await import("./commands.js")).evalCommand,
  pretrain: async () => (await import("./commands.js")).pretrainCommand,
  report: async () => (await import("./commands.js")).reportCommand,
  "new algorithm": async () => (await import("./commands.js")).newAlgorithmCommand,
  "bench actors": async () => (await import("@torl-ts/core")).benchActorsCommand,
  "bench collectives": async () => (await import("@torl-ts/actors")).benchCollectivesCommand,
  "bench sandbox": async () => (await import("@torl-ts/sandbox")).benchSandboxCommand,
  "bench reward": async () => (await import("@torl-ts/verl/reward")).benchRewardCommand,
  "bench model": async () => (await import("@torl-ts/verl")).benchModelCommand,
  "bench rollout": async () => (await import("@torl-ts/verl")).benchRolloutCommand,
  "bench peer": async () => (await import("./bench-peer.js")).benchPeerCommand,
};

const mainJob: Loader = async () => (await import("./commands.js")).mainCommand;

function topLevelHelp(): string {
  return [
    "usage: pnpm torl [k=v ...]            run the tiny ToRL recipe (the main job), with config overrides",
    "       pnpm torl <command> [--help]",
    "",
    "commands:",
    ...Object.keys(commands).map((name) => `  ${name}`),
  ].join("\n");
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === "--help" || argv[0] === "-h" || argv[0] === "help") {
    console.log(topLevelHelp());
    return 0;
  }
  let name = "";
  let rest = argv;
  if (argv.length >= 2 && commands[`${argv[0]} ${argv[1]}`]) {
    name = `${argv[0]} ${argv[1]}`;
    rest = argv.slice(2);
  } else if (argv.length >= 1 && commands[argv[0]!]) {
    name = argv[0]!;
    rest = argv.slice(1);
  } else if (argv.length >= 1 && argv[0] === "bench") {
    console.error(
      `unknown benchmark '${argv[1] ?? ""}'; one of: actors, collectives, sandbox, reward, model, rollout, peer`,
    );
    return 2;
  } else if (argv.length >= 1 && !argv[0]!.includes("=")) {
    console.error(`unknown command '${argv[0]}'\n\n${topLevelHelp()}`);
    return 2;
  }
  const command = await (name ? commands[name]! : mainJob)();
  if (!command) {
    console.error(`command '${name}' is not available in this build`);
    return 2;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(command.usage);
    return 0;
  }
  try {
    return (await command.run(rest)) ?? 0;
  } catch (error) {
    const err = error as Error;
    if (err?.name === "UsageError") {
      console.error(`error: ${err.message}\n\n${command.usage}`);
      return 2;
    }
    throw error;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  },
);
