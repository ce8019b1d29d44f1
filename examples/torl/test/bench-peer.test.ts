import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";

const ROOT = join(import.meta.dirname, "..", "..", "..");

test("bench peer without an importable torch says how to get it and reports the torl-ts figures alone", (t) => {
  // A torch module that fails to import stands in for a python3 without torch.
  const fakes = mkdtempSync(join(tmpdir(), "torl-no-torch-"));
  writeFileSync(join(fakes, "torch.py"), "raise ImportError('no torch in this test')\n");
  try {
    const r = spawnSync(
      process.execPath,
      ["--import=tsx", "examples/torl/src/cli.ts", "bench", "peer", "--quick", "--json"],
      {
        cwd: ROOT,
        encoding: "utf8",
        env: { ...process.env, PYTHONPATH: fakes, TORL_BACKEND: "wasm" },
        timeout: 600_000,
      },
    );
    t.is(r.status, 0, r.stderr);
    t.regex(r.stdout, /PyTorch side skipped: python3 cannot import torch; to compare with PyTorch, install/);
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as Record<string, number | string>;
    t.regex(String(last.torch), /^not run: /);
    t.regex(String(last.backend), /^wasm .*; native kernels (on|off): /);
    for (const model of ["tiny", "mid"])
      for (const figure of ["train", "decode_b1", "decode_b64"]) {
        const key = `${model}_${figure}_tokens_per_s_torl`;
        t.true(typeof last[key] === "number" && (last[key] as number) > 0, key);
        t.false(`${model}_${figure}_tokens_per_s_torch` in last);
        t.false(`${model}_${figure}_ratio` in last);
      }
  } finally {
    rmSync(fakes, { recursive: true, force: true });
  }
});

test("bench peer refuses a bad --repeats and an unknown flag with its usage", (t) => {
  const run = (...args: string[]) =>
    spawnSync(process.execPath, ["--import=tsx", "examples/torl/src/cli.ts", "bench", "peer", ...args], {
      cwd: ROOT,
      encoding: "utf8",
    });
  const bad = run("--repeats", "0");
  t.is(bad.status, 2);
  t.regex(bad.stderr, /--repeats must be an integer >= 1, got '0'/);
  const unknown = run("--fast");
  t.is(unknown.status, 2);
  t.regex(unknown.stderr, /unknown flag --fast \(see pnpm torl bench peer --help\)/);
});
