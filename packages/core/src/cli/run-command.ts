/**
 * The one error path of every command, the `pnpm torl` dispatcher and the example scripts alike:
 * a failure prints one `error: ...` line (the message names the file, key, line or flag) and exits 2
 * for bad input (InputError, UsageError) or 1 for a runtime failure. The stack trace is printed
 * only with `--verbose` or TORL_DEBUG=1.
 */
import { type CliCommand, InputError } from "./command.js";
import { forProgram } from "./program-name.js";

/** 2 for bad input (usage, config, a file that cannot be used), 1 for anything else. */
export function exitCodeFor(error: unknown): 1 | 2 {
  return error instanceof InputError ? 2 : 1;
}

const SYSCALL_WORDS: Record<string, string> = {
  scandir: "read the directory",
  opendir: "read the directory",
  mkdir: "create the directory",
  open: "open",
  read: "read",
  write: "write",
  stat: "read",
  lstat: "read",
  unlink: "remove",
  rmdir: "remove",
  rename: "rename",
  copyfile: "copy to",
};

const ERRNO_WORDS: Record<string, string> = {
  ENOENT: "it does not exist",
  ENOTDIR: "it, or a folder on its path, is a file, not a directory",
  EEXIST: "it already exists",
  EISDIR: "it is a directory, not a file",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOSPC: "no space left on its device",
  EROFS: "its file system is read-only",
  ENOTEMPTY: "the directory is not empty",
};

/**
 * A file-system error from Node (code, syscall, path) in the user's terms, naming the path, e.g.
 * "cannot create the directory /x/y: it, or a folder on its path, is a file, not a directory (ENOTDIR)";
 * undefined for any other error.
 */
export function describeSystemError(error: unknown): string | undefined {
  const e = error as { code?: unknown; syscall?: unknown; path?: unknown };
  if (typeof e?.code !== "string" || typeof e.path !== "string" || !ERRNO_WORDS[e.code]) return undefined;
  const what = (typeof e.syscall === "string" && SYSCALL_WORDS[e.syscall]) || "use";
  const why =
    e.code === "EEXIST" && e.syscall === "mkdir" ? "a file of that name is in the way" : ERRNO_WORDS[e.code];
  return `cannot ${what} ${e.path}: ${why} (${e.code})`;
}

/** The lines printed for a failure: `error: <message>` and, when verbose, the stack (with causes). */
export function formatCliError(error: unknown, verbose: boolean, helpHint?: string): string {
  const message = describeSystemError(error) ?? (error instanceof Error ? error.message : String(error));
  const lines = [
    forProgram(`error: ${message}${helpHint && error instanceof InputError ? ` (${helpHint})` : ""}`),
  ];
  if (verbose) {
    let e: unknown = error;
    while (e instanceof Error) {
      lines.push(e.stack ?? `${e.name}: ${e.message}`);
      e = e.cause;
      if (e !== undefined) lines.push("caused by:");
    }
  }
  return lines.join("\n");
}

/** True when TORL_DEBUG asks for stack traces. */
export function debugFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return !!env.TORL_DEBUG && env.TORL_DEBUG !== "0";
}

/**
 * Runs `command` with `args`: `--help`/`-h` prints its usage; `--verbose` (anywhere before `--`) is
 * taken out and turns on stack traces; a throw becomes one `error:` line on stderr and exit 1 or 2.
 */
export async function runCommand(command: CliCommand, args: string[], invokedAs: string): Promise<number> {
  const end = args.indexOf("--");
  const flagsPart = end < 0 ? args : args.slice(0, end);
  if (flagsPart.includes("--help") || flagsPart.includes("-h")) {
    console.log(forProgram(command.usage));
    return 0;
  }
  const verbose = flagsPart.includes("--verbose") || debugFromEnv();
  const rest = [...flagsPart.filter((a) => a !== "--verbose"), ...(end < 0 ? [] : args.slice(end))];
  try {
    return (await command.run(rest)) ?? 0;
  } catch (error) {
    console.error(formatCliError(error, verbose, `see ${invokedAs} --help`));
    return exitCodeFor(error);
  }
}

/**
 * For a script run directly (`tsx examples/x/src/train.ts ...`): runs the command on process.argv
 * and sets the exit code, with the same error path as `pnpm torl`.
 */
export function runScript(command: CliCommand, invokedAs: string): void {
  runCommand(command, process.argv.slice(2), invokedAs).then(
    (code) => {
      // A failed run may leave sockets or children behind: exit now rather than wait on them.
      if (code !== 0) process.exit(code);
      process.exitCode = code;
    },
    (error) => {
      console.error(formatCliError(error, true));
      process.exit(1);
    },
  );
}
