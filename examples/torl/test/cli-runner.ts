/** `pnpm torl ARGS` as a user runs it, in a child process from the repository root, for the CLI tests. */
import { spawn } from "node:child_process";
import type { ExecutionContext } from "ava";

const ROOT = new URL("../../../", import.meta.url).pathname;

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Written to stdin, which is then closed (closed at once when absent). */
  input?: string;
  /** Added to the environment (TORL_DEBUG is cleared: errors print as a user sees them). */
  env?: Record<string, string>;
  /** Kills the command after this long (its result then has code null). */
  timeoutMs?: number;
}

/** Runs `pnpm torl ARGS` (the repository's CLI entry, through tsx) and collects its exit code and output. */
export function runTorl(args: string[], options: RunOptions = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import=tsx", "examples/torl/src/cli.ts", ...args], {
      cwd: ROOT,
      env: { ...process.env, TORL_DEBUG: "", ...options.env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    const timer = options.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), options.timeoutMs) : undefined;
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? "");
  });
}

/** The banner pure-JS tfjs prints to stderr when it loads (not the command's own output). */
const TFJS_BANNER = /^(=+|Hi, looks like you are running TensorFlow\.js in Node\.js\..*|\s*)$/;

/** The command's own stderr lines (tfjs's banner left out). */
export function stderrLines(r: Ran): string[] {
  return r.stderr
    .trim()
    .split("\n")
    .filter((l) => !TFJS_BANNER.test(l));
}

/**
 * Bad input: `run` exits 2 with exactly one line of its own on stderr, `error: ...`, matching `message`.
 * Returns the run.
 */
export async function expectBadInput(
  t: ExecutionContext,
  run: () => Promise<Ran>,
  message: RegExp,
): Promise<Ran> {
  const r = await run();
  t.is(r.code, 2, r.stderr);
  const lines = stderrLines(r);
  t.is(lines.length, 1, r.stderr);
  t.regex(lines[0]!, /^error: /);
  t.regex(lines[0]!, message);
  return r;
}
