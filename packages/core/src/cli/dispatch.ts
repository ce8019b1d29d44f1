/**
 * The `torl` command dispatcher: a program is a name, a version and a registry of commands, each a
 * lazy loader, so `torl status` never loads tensorflow. Packages export their registries
 * (`@torl-ts/<package>/cli`); the installed `torl` binary merges the ones it finds, and a recipe
 * (`pnpm torl` in this repository) adds its own commands and a main job. Every command fails the
 * same way through runCommand: one `error: ...` line, exit 2 for bad input, 1 for a runtime failure.
 */
import { readFileSync } from "node:fs";
import type { CliCommand } from "./command.js";
import { forProgram, setProgramName } from "./program-name.js";
import { formatCliError, runCommand } from "./run-command.js";

/** Imports a command's module on first use. */
export type CommandLoader = () => Promise<CliCommand>;

/** Command name (`status`, or `bench actors` for a group word and its sub-command) to its loader. */
export type CommandRegistry = Readonly<Record<string, CommandLoader>>;

export interface CliProgram {
  /** How the user invokes the program, for usage and error lines: `torl`, `pnpm torl`. */
  name: string;
  version: string;
  commands: CommandRegistry;
  /** What runs when no command is named or the first argument is a `k=v` override (a recipe's main job). */
  main?: { loader: CommandLoader; usage: string };
  /** Lines printed after the command list by `--help`. */
  notes?: string[];
}

/** The version of @torl-ts/core (the package that owns the `torl` binary). */
export function torlVersion(): string {
  // src/cli/ and dist/cli/ are both two levels under the package root
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version?: string;
  };
  if (!pkg.version) throw new Error("@torl-ts/core's package.json has no version");
  return pkg.version;
}

/** Commands with a sub-command (`bench model`, `data tiny`): the group word and its choices. */
function groups(commands: CommandRegistry): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const name of Object.keys(commands)) {
    const [group, sub] = name.split(" ");
    if (group && sub) out.set(group, [...(out.get(group) ?? []), sub]);
  }
  return out;
}

/** Usage lines with each command's one-line summary (loads every command module). */
async function helpText(program: CliProgram, prefix?: string): Promise<string> {
  const { commands } = program;
  const names = Object.keys(commands).filter((n) => !prefix || n.startsWith(`${prefix} `));
  const loaded = await Promise.all(names.map(async (n) => [n, (await commands[n]!()).summary] as const));
  const width = Math.max(0, ...names.map((n) => n.length)) + 2;
  const rows = loaded.map(([n, summary]) => `  ${n.padEnd(width)}${forProgram(summary)}`);
  if (prefix) {
    const choices = groups(commands).get(prefix) ?? [];
    return [`usage: ${program.name} ${prefix} <${choices.join("|")}> [--help]`, "", ...rows].join("\n");
  }
  const usage = program.main
    ? [`usage: ${forProgram(program.main.usage)}`, `       ${program.name} <command> [--help]`]
    : [`usage: ${program.name} <command> [--help]`];
  return [
    ...usage,
    `       ${program.name} --version`,
    "",
    "commands:",
    ...rows,
    "",
    "A failure prints one `error: ...` line and exits 2 for bad input (a flag, a config key, a file) or 1",
    "for a runtime failure. --verbose (or TORL_DEBUG=1) adds the stack trace.",
    ...(program.notes?.length ? ["", ...program.notes] : []),
  ].join("\n");
}

/** Runs the command `argv` names; resolves to the exit code. */
export async function dispatch(program: CliProgram, argv: string[]): Promise<number> {
  const { commands } = program;
  setProgramName(program.name);
  // --verbose may come anywhere (before `--`); it goes to the command's runner.
  const end = argv.indexOf("--");
  const verbose = (end < 0 ? argv : argv.slice(0, end)).includes("--verbose");
  const args = verbose ? argv.filter((a, i) => a !== "--verbose" || (end >= 0 && i > end)) : argv;
  const first = args[0];
  if (first === "--help" || first === "-h" || first === "help") {
    console.log(await helpText(program));
    return 0;
  }
  if (first === "--version" || first === "-V") {
    console.log(program.version);
    return 0;
  }
  let name = "";
  let rest = args;
  const group = first ? groups(commands).get(first) : undefined;
  if (args.length >= 2 && commands[`${args[0]} ${args[1]}`]) {
    name = `${args[0]} ${args[1]}`;
    rest = args.slice(2);
  } else if (first && commands[first]) {
    name = first;
    rest = args.slice(1);
  } else if (group) {
    const sub = args[1];
    if (sub === undefined || sub === "--help" || sub === "-h") {
      console.log(await helpText(program, first));
      return sub === undefined ? 2 : 0;
    }
    console.error(
      `error: unknown ${first} command '${sub}'; one of: ${group.join(", ")} (see ${program.name} ${first} --help)`,
    );
    return 2;
  } else if (first !== undefined && !(program.main && first.includes("="))) {
    console.error(`error: unknown command '${first}' (see ${program.name} --help)`);
    return 2;
  } else if (!program.main) {
    console.error(await helpText(program));
    return 2;
  }
  const command = await (name ? commands[name]! : program.main!.loader)();
  return runCommand(
    command,
    verbose ? ["--verbose", ...rest] : rest,
    `${program.name}${name ? ` ${name}` : ""}`,
  );
}

/** Dispatches process.argv and sets the exit code (exits at once on failure, so no socket holds it open). */
export function runProgram(program: CliProgram, argv: string[] = process.argv.slice(2)): void {
  dispatch(program, argv).then(
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
}
