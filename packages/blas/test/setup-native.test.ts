import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import test from "ava";
import { addonMissingReason, setupCommand } from "../src/index.js";

// The way to the native kernels is one command (pnpm setup:native): it installs what the build needs
// where it can, says why where it cannot, and builds an addon that an earlier install left unbuilt.
// Its decisions are checked in dry runs with the probes' answers given (nothing is installed or built).

const PACKAGE = resolve(import.meta.dirname, "..");
const SCRIPT = join(PACKAGE, "scripts", "setup-native.mjs");

function setup(args: string[], probes: Record<string, boolean> = {}, script = SCRIPT) {
  // without the NODE_PATH a test runner may set (it would find node-gyp from anywhere)
  const { NODE_PATH: _, ...env } = process.env;
  const r = spawnSync(process.execPath, [script, ...args], {
    env: { ...env, TORL_SETUP_NATIVE_PROBES: JSON.stringify(probes) },
    encoding: "utf8",
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

test("as root with apt-get, a dry run names what it would install and why, and installs nothing", (t) => {
  const r = setup(["--dry-run"], { cblas: false, cxx: true, make: false, root: true, apt: true });
  t.is(r.code, 0, r.out);
  t.regex(
    r.out,
    /^setup-native: would install libopenblas-dev, make with apt-get: the native OpenBLAS kernels need them; without them training runs on the wasm kernels, steps about 2x slower$/m,
  );
  t.notRegex(r.out, /installing|installed/);
});

test("without root or without apt-get it says what is missing, the command to run, and falls back", (t) => {
  const user = setup(["--dry-run"], { cblas: false, cxx: true, make: true, root: false, apt: true });
  t.is(user.code, 0, user.out);
  t.regex(
    user.out,
    /cannot install libopenblas-dev: apt-get needs root \(run sudo apt-get install -y libopenblas-dev, then pnpm setup:native\); native kernels stay off until then/,
  );
  const noApt = setup(["--dry-run"], { cblas: false, cxx: false, make: true, root: true, apt: false });
  t.regex(noApt.out, /cannot install libopenblas-dev, g\+\+: no apt-get on this machine/);
  // --strict (CI) fails where the fallback would be taken; blocked, it changes nothing, so no dry run
  const strict = setup(["--strict"], { cblas: false, cxx: true, make: true, root: false, apt: true });
  t.is(strict.code, 1, strict.out);
  t.regex(strict.out, /apt-get needs root/);
});

test("with everything present it installs nothing; an unknown flag is refused", (t) => {
  const r = setup(["--dry-run", "--no-build"], {
    cblas: true,
    cxx: true,
    make: true,
    root: false,
    apt: false,
  });
  t.is(r.code, 0, r.out);
  t.is(r.out.trim(), "setup-native: libopenblas-dev, a C++ compiler and make are present");
  const bad = setup(["--dry"]);
  t.is(bad.code, 2);
  t.regex(bad.out, /^error: unknown flag --dry \(usage: setup-native/);
});

test("an addon left unbuilt by an earlier install, or older than its sources, is (re)built", (t) => {
  // a copy of the package outside the repository, without node_modules: the decision is printed and
  // nothing can be built there
  const root = mkdtempSync(join(tmpdir(), "torl-setup-native-"));
  try {
    for (const f of ["scripts", "src", "binding.gyp"])
      cpSync(join(PACKAGE, f), join(root, f), { recursive: true });
    const script = join(root, "scripts", "setup-native.mjs");
    const present = { cblas: true, cxx: true, make: true, root: true, apt: true };
    // a fresh checkout: no status, no addon: the dependencies' install builds it
    t.regex(
      setup(["--dry-run"], present, script).out,
      /the OpenBLAS addon builds when the dependencies install/,
    );
    // an install that ran before libopenblas-dev was there
    writeFileSync(
      join(root, "build-status.json"),
      JSON.stringify({ built: false, reason: "cblas.h not found" }),
    );
    const stale = setup(["--dry-run"], present, script);
    t.regex(
      stale.out,
      /the OpenBLAS addon is not built \(the last attempt: cblas\.h not found\); node-gyp is not installed/,
    );
    t.regex(stale.out, new RegExp(`then run node ${script.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m"));
    // built, then a source changed
    mkdirSync(join(root, "build", "Release"), { recursive: true });
    writeFileSync(join(root, "build", "Release", "torl_blas.node"), "");
    utimesSync(join(root, "build", "Release", "torl_blas.node"), 1_000, 1_000);
    t.regex(setup(["--dry-run"], present, script).out, /older than its sources \(binding\.gyp, src\//);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("the loader's reason for a missing addon names the one command that gets it", (t) => {
  t.is(setupCommand(), "pnpm setup:native");
  const root = mkdtempSync(join(tmpdir(), "torl-blas-reason-"));
  try {
    const fix = `node ${join(root, "scripts", "setup-native.mjs")}`;
    t.is(setupCommand(root), fix);
    t.is(addonMissingReason(root), `the OpenBLAS addon was never built (run ${fix})`);
    writeFileSync(
      join(root, "build-status.json"),
      JSON.stringify({ built: false, reason: "cblas.h not found" }),
    );
    t.is(
      addonMissingReason(root),
      `the OpenBLAS addon did not build: cblas.h not found; run ${fix} to install what it needs and build it`,
    );
    writeFileSync(join(root, "build-status.json"), JSON.stringify({ built: true, reason: "" }));
    t.regex(addonMissingReason(root), /the OpenBLAS addon is missing at .*torl_blas\.node \(run node /);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
