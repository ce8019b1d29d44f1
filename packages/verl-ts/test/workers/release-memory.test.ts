import { spawnSync } from "node:child_process";
import { join } from "node:path";
import test from "ava";
import { nativeBlas } from "../../src/models/native-blas.js";
import { KEEP_FREED_MEMORY_ENV } from "../../src/single-controller/worker-group.js";

/**
 * A process with a worker's malloc settings (freed memory kept) reads 300 MB of values in a function
 * that returns nothing of them, as loading a model to cut a shard does; then its resident set is read
 * before and after `release` (a statement run in the child).
 */
function residentAround(release: string): { before: number; after: number } {
  const code = `import { readFileSync } from "node:fs";
    import { releaseTransientMemory } from "./src/workers/release-memory.ts";
    const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024;
    function load() {
      const values = [];
      for (let i = 0; i < 30; i++) values.push(new Float32Array(2_500_000).fill(i));
      return values.reduce((s, v) => s + v[7], 0);
    }
    load();
    const before = rss();
    ${release};
    console.log(JSON.stringify({ before, after: rss() }));`;
  const r = spawnSync(process.execPath, ["--import=tsx", "--input-type=module", "-e", code], {
    cwd: join(import.meta.dirname, "..", ".."),
    encoding: "utf8",
    env: { ...process.env, ...KEEP_FREED_MEMORY_ENV },
  });
  if (r.status !== 0) throw new Error(r.stderr.slice(-2000));
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!);
}

const MB = 1024 * 1024;

test("releaseTransientMemory gives a finished phase's freed arrays back to the kernel", (t) => {
  if (process.platform !== "linux") return t.pass("resident sets are read from /proc (Linux only)");
  if (!nativeBlas()) return t.pass("skipped: the OpenBLAS addon (trimHeap) is not loaded here");
  // kept: with a worker's settings the freed arrays stay resident, phase after phase
  const kept = residentAround("");
  t.true(kept.before > 250 * MB, `the values were resident: ${kept.before / MB} MB`);
  t.true(kept.after > kept.before - 50 * MB, "without a release they stay resident");
  const released = residentAround("releaseTransientMemory()");
  t.true(
    released.after < released.before - 250 * MB,
    `released: ${released.before / MB} MB before, ${released.after / MB} MB after`,
  );
});
