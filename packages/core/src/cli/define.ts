/**
 * The one shape of every command: a command declares its help, its flags and what it runs on them;
 * defineCommand parses the flags with parseFlags (an unknown flag, a missing or wrong value is a
 * UsageError naming the flag, so runCommand prints one `error: ...` line and exits 2) and a run that
 * returns no exit code exits 0. `--help` and `--verbose` are runCommand's, before the flags are read.
 * defineBench adds what every benchmark shares: `--json`, and the figures it returns printed as one
 * JSON object, the last line.
 */
import type { CliCommand } from "./command.js";
import { type FlagSpec, type FlagValues, parseFlags } from "./flags.js";

export type FlagSpecs = Record<string, FlagSpec>;

/** What a command's run returns: the exit code, or nothing for 0. */
// biome-ignore lint/suspicious/noConfusingVoidType: a run with no return statement (void) exits 0
export type ExitCode = number | undefined | void;

/** What a command declares; defineCommand makes it a CliCommand. */
export interface CommandSpec<F extends FlagSpecs> {
  /** One line for `torl --help`. */
  summary: string;
  /** The full `--help` text. */
  usage: string;
  /** The flags it takes (parseFlags' specs); an empty object for none. */
  flags: F;
  /** Takes positional arguments (`key=value` overrides, a directory); without it one is a UsageError. */
  positionals?: boolean;
  /** Runs on the parsed flags and the positionals; resolves to the exit code (none: 0). */
  run(flags: FlagValues<F>, positionals: string[]): Promise<ExitCode> | ExitCode;
}

/** The command `spec` declares: its flags parsed and checked before it runs. */
export function defineCommand<const F extends FlagSpecs>(spec: CommandSpec<F>): CliCommand {
  return {
    summary: spec.summary,
    usage: spec.usage,
    async run(args) {
      const { flags, positionals } = parseFlags(args, spec.flags, { positionals: spec.positionals });
      return (await spec.run(flags, positionals)) ?? 0;
    },
  };
}

/** The flag every benchmark takes. */
const JSON_FLAG = { json: { type: "boolean" } } as const satisfies FlagSpecs;

export type BenchFlags<F extends FlagSpecs> = FlagValues<F & typeof JSON_FLAG>;

/** What a benchmark declares; defineBench makes it a CliCommand with `--json`. */
export interface BenchSpec<F extends FlagSpecs, R> {
  summary: string;
  usage: string;
  /** Its flags besides `--json`. */
  flags: F;
  /** Measures (progress lines as it goes); resolves to the figures. */
  measure(flags: BenchFlags<F>): Promise<R>;
  /**
   * Shows the figures to a reader, with or without `--json`. Without it: `console.table` of them,
   * unless `--json` is given.
   */
  show?(result: R, flags: BenchFlags<F>): void;
  /** What `--json` prints of the result (default: all of it), e.g. its figures without the tables. */
  toJson?(result: R): unknown;
  /** The exit code for the figures (default 0), e.g. 1 when a probe failed. */
  exitCode?(result: R): number;
}

/**
 * The benchmark `spec` declares: flags parsed, `measure` run, the figures shown, then with `--json`
 * one JSON object of them, the last line of stdout.
 */
export function defineBench<const F extends FlagSpecs, R>(spec: BenchSpec<F, R>): CliCommand {
  return defineCommand({
    summary: spec.summary,
    usage: spec.usage,
    flags: { ...JSON_FLAG, ...spec.flags },
    async run(flags) {
      const all = flags as BenchFlags<F>;
      const result = await spec.measure(all);
      if (spec.show) spec.show(result, all);
      else if (!all.json) console.table(result);
      if (all.json) console.log(JSON.stringify(spec.toJson ? spec.toJson(result) : result));
      return spec.exitCode?.(result) ?? 0;
    },
  });
}
