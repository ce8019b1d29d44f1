#!/usr/bin/env node
/**
 * `pnpm torl <command>`: the one entry point. Each command lives in the package that owns it and is
 * imported lazily, so `pnpm torl status` never loads tensorflow. Every command fails the same way
 * (one `error: ...` line; exit 2 for bad input, 1 for a runtime failure; the stack with --verbose or
 * TORL_DEBUG=1), through @torl-ts/core's runCommand.
 */
import { readFileSync } from "node:fs";
import { type CliCommand, formatCliError, runCommand } from "@torl-ts/core";

type Loader = () => Promise<CliCommand>;

const commands: Record<string, Loader> = {
  start: async () => (await import("@torl-ts/core")).startCommand,
  status: async () => (await import("@torl-ts/core")).statusCommand,
  stop: async () => (await import("@torl-ts/core")).stopCommand,
  sandbox: async () => (await import("@torl-ts/sandbox")).sandboxCommand,
  verify: async () => (await import("@torl-ts/verl/reward")).verifyCommand,
  train: async () => (await import("./commands.js")).trainCommand,
  eval: async () => (await import("./commands.js")).evalCommand,
  export: async () => (await import("@torl-ts/verl")).exportCommand,
  pretrain: async () => (await import("./commands.js")).pretrainCommand,
  report: async () => (await import("./commands.js")).reportCommand,
  "new algorithm": async () => (await import("./commands.js")).newAlgorithmCommand,
  "data tiny": async () => (await import("./commands.js")).dataTinyCommand,
  "bench actors": async () => (await import("@torl-ts/core")).benchActorsCommand,
  "bench collectives": async () => (await import("@torl-ts/actors")).benchCollectivesCommand,
  "bench sandbox": async () => (await import("@torl-ts/sandbox")).benchSandboxCommand,
  "bench reward": async () => (await import("@torl-ts/verl/reward")).benchRewardCommand,
  "bench model": async () => (await import("@torl-ts/verl")).benchModelCommand,
  "bench rollout": async () => (await import("@torl-ts/verl")).benchRolloutCommand,
  "bench peer": async () => (await import("./bench-peer.js")).benchPeerCommand,
};

const mainJob: Loader = async () => (await import("./commands.js")).mainCommand;

/** Commands with a sub-command (`bench model`, `data tiny`): the group word and its choices. */
function groups(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const name of Object.keys(commands)) {
    const [group, sub] = name.split(" ");
    if (sub) out.set(group!, [...(out.get(group!) ?? []), sub]);
  }
  return out;
}

/** The version in the repository's package.json. */
function torlVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as {
    version?: string;
  };
  return pkg.version ?? "unknown";
}

/** Usage lines with each command's one-line summary (loads every command module). */
async function helpText(prefix?: string): Promise<string> {
  const names = Object.keys(commands).filter((n) => !prefix || n.startsWith(`${prefix} `));
  const loaded = await Promise.all(names.map(async (n) => [n, (await commands[n]!()).summary] as const));
  const width = Math.max(...names.map((n) => n.length)) + 2;
  const rows = loaded.map(([n, summary]) => `  ${n.padEnd(width)}${summary}`);
  if (prefix)
    return [`usage: pnpm torl ${prefix} <${groups().get(prefix)!.join("|")}> [--help]`, "", ...rows].join(
      "\n",
    );
  return [
    "usage: pnpm torl [k=v ...]            run the tiny ToRL recipe (the main job), with config overrides",
    "       pnpm torl <command> [--help]",
    "       pnpm torl --version",
    "",
    "commands:",
    ...rows,
    "",
    "A failure prints one `error: ...` line and exits 2 for bad input (a flag, a config key, a file) or 1",
    "for a runtime failure. --verbose (or TORL_DEBUG=1) adds the stack trace.",
  ].join("\n");
}

async function main(argv: string[]): Promise<number> {
  // --verbose may come anywhere (before `--`); it goes to the command's runner.
  const end = argv.indexOf("--");
  const verbose = (end < 0 ? argv : argv.slice(0, end)).includes("--verbose");
  const args = verbose ? argv.filter((a, i) => a !== "--verbose" || (end >= 0 && i > end)) : argv;
  const first = args[0];
  if (first === "--help" || first === "-h" || first === "help") {
    console.log(await helpText());
    return 0;
  }
  if (first === "--version" || first === "-V") {
    console.log(torlVersion());
    return 0;
  }
  let name = "";
  let rest = args;
  const group = first ? groups().get(first) : undefined;
  if (args.length >= 2 && commands[`${args[0]} ${args[1]}`]) {
    name = `${args[0]} ${args[1]}`;
    rest = args.slice(2);
  } else if (first && commands[first]) {
    name = first;
    rest = args.slice(1);
  } else if (group) {
    const sub = args[1];
    if (sub === undefined || sub === "--help" || sub === "-h") {
      console.log(await helpText(first));
      return sub === undefined ? 2 : 0;
    }
    console.error(
      `error: unknown ${first} command '${sub}'; one of: ${group.join(", ")} (see pnpm torl ${first} --help)`,
    );
    return 2;
  } else if (first !== undefined && !first.includes("=")) {
    console.error(`error: unknown command '${first}' (see pnpm torl --help)`);
    return 2;
  }
  const command = await (name ? commands[name]! : mainJob)();
  return runCommand(command, verbose ? ["--verbose", ...rest] : rest, `pnpm torl${name ? ` ${name}` : ""}`);
}

main(process.argv.slice(2)).then(
  (code) => {
    // A failed command may leave sockets or children behind: exit now rather than hang on them.
    if (code !== 0) process.exit(code);
    process.exitCode = code;
  },
  (error) => {
    console.error(formatCliError(error, true));
    process.exit(1);
  },
);
