#!/usr/bin/env node
// Builds the OpenBLAS addon (build/Release/torl_blas.node) with node-gyp against the Node headers that
// ship with the machine's Node, so nothing is downloaded. Runs as this package's `install` script: a
// machine without a compiler or libopenblas-dev must still install, so a failed build is recorded in
// build-status.json (read by the loader, which then names the reason) and exits 0. `--strict` exits 1.
import { spawnSync } from "node:child_process";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setupCommand } from "./setup-command.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const statusFile = join(root, "build-status.json");
const strict = process.argv.includes("--strict");
const require = createRequire(import.meta.url);

function finish(built, reason) {
  // A failed build leaves no earlier addon behind: what loads must be what this machine built.
  if (!built) rmSync(join(root, "build"), { recursive: true, force: true });
  writeFileSync(statusFile, `${JSON.stringify({ built, reason, node: process.version }, null, 2)}\n`);
  console.log(
    `@torl-ts/blas: ${built ? "built build/Release/torl_blas.node" : `not built: ${reason}; training runs on the slower wasm kernels until ${setupCommand(root)} builds it`}`,
  );
  process.exit(!built && strict ? 1 : 0);
}

function run(cmd, args, input) {
  const r = spawnSync(cmd, args, { cwd: root, input, encoding: "utf8" });
  return {
    ok: r.status === 0,
    out: `${r.stdout ?? ""}${r.stderr ?? ""}`,
    missing: r.error?.code === "ENOENT",
  };
}

// Node's headers: the Debian nodejs package puts them in /usr/include/node, an official tarball in
// <prefix>/include/node; node-gyp would download them when neither is there, which must not happen.
const nodedir = resolve(dirname(process.execPath), "..");
if (!existsSync(join(nodedir, "include", "node", "node_api.h")))
  finish(false, `Node's headers are not at ${join(nodedir, "include", "node")} (install the nodejs headers)`);

const cxx = process.env.CXX || "c++";
const probe = run(cxx, ["-x", "c++", "-E", "-"], "#include <cblas.h>\n");
if (probe.missing) finish(false, `no C++ compiler '${cxx}' (g++ is not installed)`);
if (!probe.ok) finish(false, "cblas.h not found (libopenblas-dev is not installed)");

let gyp;
try {
  gyp = require.resolve("node-gyp/bin/node-gyp.js");
} catch {
  finish(false, "node-gyp is not installed (pnpm install in the repository root)");
}
const build = run(process.execPath, [gyp, "rebuild", `--nodedir=${nodedir}`, "--jobs=1"]);
if (!build.ok) {
  const lines = build.out.trim().split("\n");
  const error = lines.find((l) => /error|cannot find|undefined reference/i.test(l)) ?? lines.at(-1);
  finish(false, `node-gyp rebuild failed: ${error?.trim()}`);
}
finish(true, "");
