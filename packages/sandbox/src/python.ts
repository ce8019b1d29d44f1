import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The fork server's Python, committed next to this package's sources (shipped as `python/`). */
const PYTHON_DIR = fileURLToPath(new URL("../python/", import.meta.url));
/** The fork server's start-up sequence; it imports the modules of FORKSERVER_PACKAGE. */
export const FORKSERVER_PATH = join(PYTHON_DIR, "forkserver.py");
/** The package holding the fork server's modules, one per concern (isolation, seccomp, serve loop...). */
export const FORKSERVER_PACKAGE = "torl_sandbox";
/** The benchmark's bare fork loop over the same warm heap (`bench sandbox`), run from its file. */
export const BENCH_FORK_LOOP_PATH = join(PYTHON_DIR, "bench_fork_loop.py");

/** The template's loop in C, built with the machine's compiler (see nativeTemplateLoop). */
export const NATIVE_LOOP_SOURCE = fileURLToPath(new URL("../native/template_loop.c", import.meta.url));

/** What a fork server reads on FORKSERVER_SOURCE_FD: forkserver.py and the modules of its package. */
export interface ForkServerBundle {
  main: string;
  /** Module name (`isolation`) to its source. */
  modules: Record<string, string>;
  /** The native loop: the shared library (base64), or why there is none (the server then loops in Python). */
  native?: { library: string } | { unavailable: string };
}

/** The fork server's sources as one bundle (read at each start, like any program file). */
export function forkServerBundle(): ForkServerBundle {
  const dir = join(PYTHON_DIR, FORKSERVER_PACKAGE);
  const modules: Record<string, string> = {};
  for (const file of readdirSync(dir).sort())
    if (file.endsWith(".py") && file !== "__init__.py")
      modules[file.slice(0, -".py".length)] = readFileSync(join(dir, file), "utf8");
  return { main: readFileSync(FORKSERVER_PATH, "utf8"), modules };
}

let nativeLoop: Promise<{ library: string } | { unavailable: string }> | undefined;

/**
 * The template's loop and the run child's preparation (native/template_loop.c) as a shared library,
 * built once per process with the machine's C compiler ($CC, else `cc`) in a private temporary
 * directory and kept in memory: the fork server loads it from the bytes sent with its sources. Where
 * it cannot be built, why (the worker then runs the same steps in Python and says so in its warnings).
 */
export function nativeTemplateLoop(): Promise<{ library: string } | { unavailable: string }> {
  nativeLoop ??= new Promise((resolve) => {
    const compiler = process.env.CC || "cc";
    const dir = mkdtempSync(join(tmpdir(), "torl-sandbox-native-"));
    const out = join(dir, "template_loop.so");
    // -z now: every symbol bound at load, in the server, so no run child pays for binding one
    const args = ["-O2", "-std=gnu11", "-shared", "-fPIC", "-Wl,-z,now", "-o", out, NATIVE_LOOP_SOURCE];
    execFile(compiler, args, { timeout: 120_000 }, (error, _stdout, stderr) => {
      try {
        if (error) {
          const said = stderr.trim().split("\n").slice(-3).join(" ");
          resolve({ unavailable: `${compiler} could not build the native loop: ${said || error.message}` });
        } else {
          resolve({ library: readFileSync(out).toString("base64") });
        }
      } catch (err) {
        resolve({ unavailable: `reading the built native loop failed: ${(err as Error).message}` });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
  return nativeLoop;
}

let resolved: string | undefined;

/**
 * Times 4,000 first-touch page faults on a fresh anonymous mapping; prints microseconds of CPU per
 * fault (CPU time, so that other work on a loaded machine does not count as the faults' cost).
 */
const FAULT_PROBE = `
import mmap, time
n = 4000
m = mmap.mmap(-1, n * 4096)
t = time.process_time()
for i in range(0, n * 4096, 4096):
    m[i] = 1
print((time.process_time() - t) / n * 1e6)
`;

/**
 * From this cost of a page fault on, a warm heap in 2 MiB huge pages beats one in ordinary pages
 * (`hugePages: "auto"`). A sympy run writes ~1,400 small pages of the heap or ~26 huge ones (~0.2 ms
 * each to copy). Measured, pool against pool in alternating rounds: at 4 us a fault (a KVM guest with
 * nested paging) the ordinary heap ran 1.25x the runs per second; at 16-45 us (shadow paging) the
 * huge-page heap used 5-8x less CPU per run.
 */
export const HUGE_HEAP_MIN_FAULT_US = 10;

const faultCosts = new Map<string, Promise<number>>();

/**
 * Microseconds one first-touch page fault costs on this machine, measured once per interpreter and
 * process (a fresh `python` process, at most 30 s). Rejects if the probe fails or prints no number.
 */
export function pageFaultMicros(python: string): Promise<number> {
  let cost = faultCosts.get(python);
  if (!cost) {
    cost = new Promise<number>((resolve, reject) => {
      execFile(python, ["-c", FAULT_PROBE], { timeout: 30_000, encoding: "utf8" }, (err, stdout) => {
        const us = Number(stdout.trim());
        if (err) reject(new Error(`page-fault probe (${python}): ${err.message}`));
        else if (!(us > 0))
          reject(new Error(`page-fault probe (${python}) printed ${JSON.stringify(stdout)}`));
        else resolve(us);
      });
    });
    // a failed probe is not kept: the next start measures again
    cost.catch(() => faultCosts.delete(python));
    faultCosts.set(python, cost);
  }
  return cost;
}

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

/** The fd on which a fork server reads its sources, a JSON ForkServerBundle (see forkServerArgs). */
export const FORKSERVER_SOURCE_FD = 3;

/**
 * Arguments that start the fork server from the bundle sent on FORKSERVER_SOURCE_FD: forkserver.py
 * runs as `__main__` under the name "forkserver.py" and imports its package's modules from the bundle
 * (each under its bare file name). Every run is a fork of it, and its command line, `sys.orig_argv`,
 * `sys.path` and `__file__` would otherwise show runs where this package lives on the host.
 */
export function forkServerArgs(config: unknown): string[] {
  const bootstrap = `import importlib.abc, importlib.util, json, sys, types
f = open(${FORKSERVER_SOURCE_FD}, "rb")
bundle = json.loads(f.read())
f.close()
class BundleLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        package, _, module = name.partition(".")
        if package == "${FORKSERVER_PACKAGE}" and module in bundle["modules"]:
            return importlib.util.spec_from_loader(name, self)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        short = module.__name__.partition(".")[2]
        module.__file__ = short + ".py"
        exec(compile(bundle["modules"][short], module.__file__, "exec"), module.__dict__)
package = types.ModuleType("${FORKSERVER_PACKAGE}")
package.__path__ = []
sys.modules["${FORKSERVER_PACKAGE}"] = package
sys.meta_path.insert(0, BundleLoader())
__file__ = "forkserver.py"
exec(compile(bundle["main"], "forkserver.py", "exec"))`;
  return ["-u", "-c", bootstrap, JSON.stringify(config)];
}

/** The environment a fork server starts with (it drops all of it before any run; none of it may name
 * a host path, as its runs could read what is left of it in memory). */
export function forkServerEnv(hugePages: boolean): Record<string, string> {
  const env: Record<string, string> = { PATH: "/usr/local/bin:/usr/bin:/bin", LANG: "C.UTF-8" };
  if (hugePages) {
    // every Python object in glibc's heap, which grows in 2 MiB hugetlb mappings (see torl_sandbox/huge_heap.py)
    env.PYTHONMALLOC = "malloc";
    env.GLIBC_TUNABLES = "glibc.malloc.hugetlb=2:glibc.malloc.mmap_threshold=33554432";
  }
  return env;
}
