/**
 * The name the program was invoked by. Usage texts and messages are written for the repository's
 * `pnpm torl`; the dispatcher records the name it runs as (`torl` when installed) and prints every
 * usage, hint and error with that name, so help never names a command the user does not have.
 */

/** How usage texts are written: the repository's invocation. */
export const USAGE_PROGRAM = "pnpm torl";

let current = USAGE_PROGRAM;

/** The program's name as the user invoked it (`torl`, `pnpm torl`, `npx torl`). */
export function programName(): string {
  return current;
}

/** Records the name the program runs as (the dispatcher does this before it runs a command). */
export function setProgramName(name: string): void {
  current = name;
}

/** `text` (a usage, a hint, an error message) with the program named as it was invoked. */
export function forProgram(text: string): string {
  return current === USAGE_PROGRAM ? text : text.replaceAll(USAGE_PROGRAM, current);
}
