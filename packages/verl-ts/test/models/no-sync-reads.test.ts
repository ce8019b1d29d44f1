/**
 * Synchronous tensor reads (dataSync, arraySync, bufferSync) throw on WebGPU under Node (tfjs-backend-
 * webgpu reads back through an OffscreenCanvas, which Node lacks), so no code that can run on a GPU
 * backend may use them: the packages' and examples' sources are checked here. Reads are `await
 * t.data()` / `t.array()`, batched with Promise.all where several are needed together.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import test from "ava";

const ROOT = join(import.meta.dirname, "..", "..", "..", "..");
const SYNC_READ = /\.(dataSync|arraySync|bufferSync)\s*\(/;

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name === "node_modules" || name === "dist") continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (/\.(ts|js|mjs)$/.test(name) && !name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

function srcDirs(): string[] {
  const dirs: string[] = [];
  for (const group of ["packages", "examples"])
    for (const name of readdirSync(join(ROOT, group))) {
      const src = join(ROOT, group, name, "src");
      try {
        if (statSync(src).isDirectory()) dirs.push(src);
      } catch {
        // a package without src/
      }
    }
  return dirs;
}

test("no synchronous tensor read in any package's or example's source", (t) => {
  const dirs = srcDirs();
  t.true(
    dirs.some((d) => d.endsWith(join("verl-ts", "src"))),
    `source folders found: ${dirs.join(", ")}`,
  );
  const hits: string[] = [];
  for (const file of dirs.flatMap(sources))
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        // a read the code refuses on webgpu first says so on its line
        if (SYNC_READ.test(line) && !line.includes("sync read allowed: refused on webgpu"))
          hits.push(`${relative(ROOT, file)}:${i + 1}: ${line.trim()}`);
      });
  t.deepEqual(hits, [], `use await t.data() / t.array() instead:\n${hits.join("\n")}`);
});

test("the check finds a synchronous read when there is one", (t) => {
  t.true(SYNC_READ.test("const x = logits.dataSync() as Float32Array;"));
  t.true(SYNC_READ.test("t.arraySync()"));
  t.false(SYNC_READ.test("const x = await logits.data();"));
});
