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

// the input errors live with the runtime's errors (non-command modules throw them too)
export { InputError, UsageError } from "../errors.js";
