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

/** The environment a fork server starts with (it drops all of it before any run). */
export function forkServerEnv(hugePages: boolean): Record<string, string> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C.UTF-8" };
  if (hugePages) {
    // every Python object in glibc's heap, which grows in 2 MiB hugetlb mappings (see forkserver.py)
    env.PYTHONMALLOC = "malloc";
    env.GLIBC_TUNABLES = "glibc.malloc.hugetlb=2:glibc.malloc.mmap_threshold=33554432";
  }
  return env;
}
