/**
 * One `torl <name>` command. Each package exports its commands in a registry at
 * `@torl-ts/<package>/cli`; cli/dispatch.ts runs them.
 */
export interface CliCommand {
  /** One line for `pnpm torl --help`. */
  summary: string;
  /** The full `--help` text. */
  usage: string;
  /** Runs the command with the arguments after its name; resolves to the exit code. */
  run(args: string[]): Promise<number | undefined>;
}

/**
 * Bad input from the user: a file, key, line or flag that cannot be used. The message names it. Every
 * CLI prints it as one `error: ...` line and exits 2 (runtime failures exit 1). Packages extend it for
 * their own input errors (a config key, a dataset row, a report file).
 */
export class InputError extends Error {
  override name = "InputError";
}

/** Bad command-line input (an unknown flag, a missing value): exit code 2. */
export class UsageError extends InputError {
  override name = "UsageError";
}
