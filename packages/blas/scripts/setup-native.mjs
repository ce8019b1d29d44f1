#!/usr/bin/env node
// Sets a machine up for the native kernels: installs what the addon's build needs (Debian's
// libopenblas-dev, a C++ compiler, make) with apt-get when it is missing and this runs as root, then
// builds the addon (scripts/build.mjs) unless it is built and current. Where it cannot install (not
// root, no apt-get, apt-get failed) it says so in one line and what to run, and exits 0, so a command
// chained after it still runs, on the slower kernels (`--strict`: exit 1 instead).
//
//   node scripts/setup-native.mjs [--dry-run] [--strict] [--no-build]
//
// --dry-run prints what it would install and build, and does neither. TORL_SETUP_NATIVE_PROBES (JSON,
// e.g. {"cblas":false,"root":false}) replaces the machine's answers to the probes, for a dry run that
// shows the decision for another machine.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setupCommand } from "./setup-command.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const known = ["--dry-run", "--strict", "--no-build", "--help", "-h"];
const unknown = args.filter((a) => !known.includes(a));
const USAGE = "usage: setup-native [--dry-run] [--strict] [--no-build]";
if (unknown.length) {
  console.error(`error: unknown flag ${unknown[0]} (${USAGE})`);
  process.exit(2);
}
if (args.includes("--help") || args.includes("-h")) {
  console.log(`${USAGE}

Installs libopenblas-dev, g++ and make with apt-get where they are missing (as root), then builds the
OpenBLAS addon of @torl-ts/blas unless it is built and current.
  --dry-run   print what it would install and build; change nothing
  --strict    exit 1 when the native kernels cannot be made available (default: say why, exit 0)
  --no-build  install the system packages only`);
  process.exit(0);
}
const dryRun = args.includes("--dry-run");
const strict = args.includes("--strict");
const noBuild = args.includes("--no-build");
const say = (line) => console.log(`setup-native: ${line}`);

function run(cmd, cmdArgs, input) {
  const r = spawnSync(cmd, cmdArgs, { input, encoding: "utf8" });
  return { ok: r.status === 0, missing: r.error?.code === "ENOENT" };
}

function onPath(cmd) {
  return (process.env.PATH ?? "").split(":").some((d) => d && existsSync(join(d, cmd)));
}

/** What this machine has: OpenBLAS's cblas.h (as the compiler sees it), a compiler, make, root, apt-get. */
function probe() {
  const cxx = process.env.CXX || "c++";
  const found = {
    cxx: !run(cxx, ["--version"]).missing,
    cblas: run(cxx, ["-x", "c++", "-E", "-"], "#include <cblas.h>\n").ok,
    make: onPath("make"),
    root: process.getuid?.() === 0,
    apt: onPath("apt-get"),
  };
  const forced = process.env.TORL_SETUP_NATIVE_PROBES;
  if (forced) Object.assign(found, JSON.parse(forced));
  return found;
}

/** The addon as the loader will find it: null when built and current, else why not. */
function addonState() {
  const addon = join(root, "build", "Release", "torl_blas.node");
  if (!existsSync(addon)) {
    try {
      const status = JSON.parse(readFileSync(join(root, "build-status.json"), "utf8"));
      if (status.built === false && status.reason) return `not built (the last attempt: ${status.reason})`;
    } catch {
      // no status: never built
    }
    return "not built";
  }
  const built = statSync(addon).mtimeMs;
  const sources = [
    "binding.gyp",
    ...readdirSync(join(root, "src"))
      .filter((f) => f.endsWith(".cc") || f.endsWith(".h"))
      .map((f) => `src/${f}`),
  ];
  const newer = sources.filter((f) => statSync(join(root, f)).mtimeMs > built);
  return newer.length ? `older than its sources (${newer.join(", ")})` : null;
}

const WHY =
  "the native OpenBLAS kernels need them; without them training runs on the wasm kernels, steps about 2x slower";
const have = probe();
const missing = [
  ...(have.cblas ? [] : ["libopenblas-dev"]),
  ...(have.cxx ? [] : ["g++"]),
  ...(have.make ? [] : ["make"]),
];
let blocked = null;
if (missing.length === 0) say("libopenblas-dev, a C++ compiler and make are present");
else if (!have.apt)
  blocked = `cannot install ${missing.join(", ")}: no apt-get on this machine (install OpenBLAS's headers, a C++ compiler and make with its package manager, then run ${setupCommand(root)})`;
else if (!have.root)
  blocked = `cannot install ${missing.join(", ")}: apt-get needs root (run sudo apt-get install -y ${missing.join(" ")}, then ${setupCommand(root)})`;
else if (dryRun) say(`would install ${missing.join(", ")} with apt-get: ${WHY}`);
else {
  say(`installing ${missing.join(", ")} with apt-get: ${WHY}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const apt = (a) => spawnSync("apt-get", a, { env, stdio: ["ignore", "ignore", "inherit"] }).status === 0;
  if (!(apt(["update", "-qq"]) && apt(["install", "-y", "-qq", "--no-install-recommends", ...missing])))
    blocked = `apt-get could not install ${missing.join(", ")} (its messages are above); fix that, then run ${setupCommand(root)}`;
  else say(`installed ${missing.join(", ")}`);
}

let on = false;
if (blocked) say(`${blocked}; native kernels stay off until then`);
else if (noBuild) on = true;
else {
  const state = addonState();
  let gyp = null;
  try {
    gyp = createRequire(import.meta.url).resolve("node-gyp/bin/node-gyp.js");
  } catch {
    // dependencies not installed yet
  }
  if (state === null) {
    say("native kernels on: the OpenBLAS addon is built and current");
    on = true;
  } else if (!gyp && state === "not built") {
    // a fresh checkout: the install script builds it
    say("the OpenBLAS addon builds when the dependencies install (pnpm install)");
    on = true;
  } else if (!gyp) {
    say(
      `the OpenBLAS addon is ${state}; node-gyp is not installed: install the dependencies, then run ${setupCommand(root)}`,
    );
  } else if (dryRun) say(`would build the OpenBLAS addon: it is ${state}`);
  else {
    say(`building the OpenBLAS addon: it is ${state}`);
    const build = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], { stdio: "inherit" });
    on = build.status === 0 && addonState() === null;
    say(
      on
        ? "native kernels on"
        : `the build failed (reason above, also in build-status.json); native kernels stay off until ${setupCommand(root)} succeeds`,
    );
  }
}
process.exit(strict && !on && !dryRun ? 1 : 0);
