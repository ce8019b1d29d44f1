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

/** The fd on which a fork server finds its own source (see forkServerArgs). */
export const FORKSERVER_SOURCE_FD = 3;

/**
 * Arguments that start the fork server from the source open on FORKSERVER_SOURCE_FD, under the
 * name "forkserver.py": every run is a fork of it, and its command line, `sys.orig_argv` and
 * `__file__` would otherwise show runs where this package lives on the host.
 */
export function forkServerArgs(config: unknown): string[] {
  const bootstrap = [
    `f = open(${FORKSERVER_SOURCE_FD}, "rb")`,
    "source = f.read()",
    "f.close()",
    '__file__ = "forkserver.py"',
    'exec(compile(source, "forkserver.py", "exec"))',
  ].join("; ");
  return ["-u", "-c", bootstrap, JSON.stringify(config)];
}

/** The environment a fork server starts with (it drops all of it before any run; none of it may name
 * a host path, as its runs could read what is left of it in memory). */
export function forkServerEnv(hugePages: boolean): Record<string, string> {
  const env: Record<string, string> = { PATH: "/usr/local/bin:/usr/bin:/bin", LANG: "C.UTF-8" };
  if (hugePages) {
    // every Python object in glibc's heap, which grows in 2 MiB hugetlb mappings (see forkserver.py)
    env.PYTHONMALLOC = "malloc";
    env.GLIBC_TUNABLES = "glibc.malloc.hugetlb=2:glibc.malloc.mmap_threshold=33554432";
  }
  return env;
}
