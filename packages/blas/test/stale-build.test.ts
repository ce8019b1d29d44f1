import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { ADDON_PATH, loadNativeBlas, sourcesNewerThan } from "../src/index.js";

// An addon built before its sources last changed must not load as if it were current (its kernels
// would compute other numbers); the loader names the changed files and the command that rebuilds.

test("sources changed after the build are named; an addon newer than every source is current", (t) => {
  const root = mkdtempSync(join(tmpdir(), "torl-blas-stale-"));
  try {
    mkdirSync(join(root, "src"));
    const files = ["binding.gyp", "src/gemm.cc", "src/fast-exp.h", "src/notes.txt"];
    for (const f of files) writeFileSync(join(root, f), "x");
    const addon = join(root, "addon.node");
    writeFileSync(addon, "");
    const at = (f: string, seconds: number) => utimesSync(join(root, f), seconds, seconds);
    at("addon.node", 2_000);
    for (const f of files) at(f, 1_000);
    t.deepEqual(sourcesNewerThan(addon, root), []);
    at("src/gemm.cc", 3_000);
    at("src/notes.txt", 3_000); // not a source of the addon
    t.deepEqual(sourcesNewerThan(addon, root), ["src/gemm.cc"]);
    at("binding.gyp", 3_000);
    at("src/fast-exp.h", 3_000);
    t.deepEqual(sourcesNewerThan(addon, root).sort(), ["binding.gyp", "src/fast-exp.h", "src/gemm.cc"]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("this checkout's addon, where it was built, is not older than its sources and loads", (t) => {
  const load = loadNativeBlas();
  if (!load.ok) {
    if (process.env.CI) t.fail(`CI must build a current OpenBLAS addon: ${load.reason}`);
    else t.log(`not checked: ${load.reason}`);
    t.pass();
    return;
  }
  t.deepEqual(sourcesNewerThan(ADDON_PATH), []);
});
