/**
 * Model-written code runs only in the sandbox. Every place in the repository's source that starts a
 * Python process is on a short list below, each with why it may: none of them runs code a model wrote.
 */
import test from "ava";
import { repositoryFiles } from "./repository-files.js";

/** The files allowed to start Python, and why each runs only our own code. */
const ALLOWED: Record<string, string> = {
  "packages/sandbox/src/worker.ts": "the sandbox's own launcher: the fork server, inside its namespaces",
  "packages/sandbox/src/python.ts":
    "asks python3 for its sys.executable, the interpreter the sandbox runs, and times page faults in it (a fixed probe)",
  "packages/sandbox/src/bench/sandbox.ts":
    "the sandbox benchmark: fixed bench code and the bare fork-server baseline",
  "packages/verl-ts/src/rollout/code-interpreter-tool.ts":
    "the trainer's check, before any worker starts, that Python 3 runs here: a fixed version assert",
  "packages/verl-ts/src/bench/reward-alternatives.ts":
    "the sympy scorer: our server script, fed expressions we print from parsed answers",
  "examples/torl/src/bench/peer.ts":
    "the PyTorch peer benchmarks: our scripts scripts/bench_peer.py and scripts/bench_scale_peer.py",
  "packages/verl-ts/test/core/parquet-writer.test.ts": "pyarrow reads a parquet file our writer made",
  "packages/verl-ts/test/core/tiny-data.test.ts": "the task generator's own answer programs, as a fixture",
  "packages/sandbox/test/prefault.test.ts":
    "drives the run child's page-copying loop on a mapping of its own: a fixed probe, no run code",
  "packages/sandbox/test/host-resources.test.ts":
    "the host's side of the isolation checks: a fixed probe that locks devices and binds vsock on the host",
  "packages/verl-ts/test/models/helpers.ts":
    "runTransformers: fixed transformers scripts the model and export tests compare against (token ids, log-probs)",
};

const SPAWNERS = ["spawn", "spawnSync", "execFile", "execFileSync", "exec", "execSync", "fork"];

/** Lines (1-based) of TypeScript/JavaScript `text` that start a process whose command names Python. */
function pythonLaunches(text: string): number[] {
  // Promisified launchers (`const run = promisify(execFile)`) launch too.
  const names = new Set(SPAWNERS);
  for (const m of text.matchAll(/\b(?:const|let)\s+(\w+)\s*=\s*promisify\(\s*(\w+)\s*\)/g))
    if (names.has(m[2]!)) names.add(m[1]!);
  const lines: number[] = [];
  for (const m of text.matchAll(/(?<![\w.])(\w+)\s*\(\s*([^,()]*)/g)) {
    if (names.has(m[1]!) && /python/i.test(m[2]!)) lines.push(text.slice(0, m.index).split("\n").length);
  }
  return lines;
}

/** Lines of Python `text` that start a process (any: a Python file has no reason to). */
function pythonFileLaunches(text: string): number[] {
  const lines: number[] = [];
  for (const m of text.matchAll(
    /\b(?:subprocess\.\w+|os\.exec\w*|os\.spawn\w*|os\.posix_spawn\w*|os\.system|os\.popen)\s*\(/g,
  ))
    lines.push(text.slice(0, m.index).split("\n").length);
  return lines;
}

test("the detector finds Python launches in their usual spellings and nothing else", (t) => {
  t.deepEqual(pythonLaunches('const c = spawn("python3", ["-"], {});'), [1]);
  t.deepEqual(pythonLaunches('x;\nexecFileSync(\n  "python3",\n  ["-c", code],\n);'), [2]);
  t.deepEqual(pythonLaunches("const p = spawn(this.python, args);"), [1]);
  t.deepEqual(pythonLaunches('const run = promisify(execFile);\nawait run("python3", ["x.py"]);'), [2]);
  t.deepEqual(pythonLaunches("execSync(\"python3 -c 'print(1)'\");"), [1]);
  t.deepEqual(pythonLaunches('spawn("chromium", ["--headless"]); const s = "```python";'), []);
  t.deepEqual(pythonLaunches('/```python/.exec(text); spawn(process.execPath, ["--import", "tsx"]);'), []);
  t.deepEqual(pythonFileLaunches("import os\nos.system('ls')\nsubprocess.run([sys.executable])\n"), [2, 3]);
  t.deepEqual(pythonFileLaunches('PRELOAD = "subprocess io"\n'), []);
});

test("only the listed files start Python; model-written code never runs outside the sandbox", (t) => {
  const files = repositoryFiles(
    (f) =>
      /\.(ts|mts|cts|js|mjs|cjs|py)$/.test(f) && f !== "examples/torl/test/no-unsandboxed-python.test.ts",
    { untracked: true },
  );
  t.true(files.length > 100);
  const found = new Map<string, number[]>();
  for (const { file, text } of files) {
    const lines = file.endsWith(".py") ? pythonFileLaunches(text) : pythonLaunches(text);
    if (lines.length > 0) found.set(file, lines);
  }
  const unlisted = [...found].filter(([f]) => !(f in ALLOWED)).map(([f, lines]) => `${f}:${lines.join(",")}`);
  t.deepEqual(
    unlisted,
    [],
    "a new Python launch: run model code through the sandbox, or list it with its reason",
  );
  const stale = Object.keys(ALLOWED).filter((f) => !found.has(f));
  t.deepEqual(stale, [], "listed files that no longer start Python: drop them from the list");
});
