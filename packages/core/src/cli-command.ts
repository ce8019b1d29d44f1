/** One `pnpm torl <name>` command. Each package exports its commands; examples/torl/src/cli.ts dispatches. */
export interface CliCommand {
  /** One line for `pnpm torl --help`. */
  summary: string;
  /** The full `--help` text. */
  usage: string;
  /** Runs the command with the arguments after its name; resolves to the exit code. */
  run(args: string[]): Promise<number | undefined>;
}

/** Thrown for bad command-line input; the CLI prints the message and the usage, exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}
