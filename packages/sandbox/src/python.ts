import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The fork server program, committed next to this package's sources. */
export const FORKSERVER_PATH = fileURLToPath(new URL("../python/forkserver.py", import.meta.url));

let resolved: string | undefined;

/**
 * The Python interpreter the sandbox runs: `$TORL_SANDBOX_PYTHON`, else the real executable behind
 * `python3` on PATH (resolved once, so shims such as pyenv's are not paid for on every start).
 */
export function resolvePython(): string {
  if (process.env.TORL_SANDBOX_PYTHON) return process.env.TORL_SANDBOX_PYTHON;
  if (resolved) return resolved;
  try {
    const out = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], {
      encoding: "utf8",
      timeout: 30_000,
    }).trim();
    resolved = out && existsSync(out) ? out : "python3";
  } catch {
    resolved = "python3";
  }
  return resolved;
}
