import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { missingNativeAddon } from "../../src/models/backend.js";

const ROOT = join(import.meta.dirname, "..", "..", "..", "..");
const script = (code: string, env: Record<string, string> = {}) =>
  spawnSync(process.execPath, ["--import=tsx", "--input-type=module", "-e", code], {
    cwd: join(ROOT, "packages", "verl-ts"),
    env: { ...process.env, ...env },
    encoding: "utf8",
  });

test("auto selection picks the best backend that starts here, prints it, and registers wasm gradient fallbacks", (t) => {
  const r = script(
    `import { selectBackend } from "./src/index.ts"; import * as tf from "@tensorflow/tfjs";
     const info = await selectBackend(); console.log(JSON.stringify({ name: info.name, threads: info.threads, skipped: info.skipped, k: !!tf.getKernel("UnsortedSegmentSum", "wasm") }));`,
    { TORL_BACKEND: "", TORL_WASM_THREADS: "2" },
  );
  t.is(r.status, 0, r.stderr);
  const info = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  t.is(info.name, "wasm"); // tfjs-node(-gpu) and webgpu are not installed on this machine
  t.is(info.threads, 1); // tfjs-backend-wasm has no threads under Node; asked for 2
  t.true(info.k);
  t.true(info.skipped.some((s: string) => s.startsWith("node-gpu:")));
  t.regex(r.stderr, /\[torl\] tensor backend: wasm \(asked for 2 threads, XNNPACK uses 1/);
});

test("TORL_BACKEND overrides the choice; a requested backend that is missing says what to install", (t) => {
  const ok = script(
    `import { selectBackend } from "./src/index.ts"; console.log((await selectBackend()).name);`,
    { TORL_BACKEND: "cpu" },
  );
  t.is(ok.stdout.trim(), "cpu");
  t.regex(ok.stderr, /tensor backend: cpu \(requested\)/);
  const bad = script(`import { selectBackend } from "./src/index.ts"; await selectBackend();`, {
    TORL_BACKEND: "node-gpu",
  });
  t.not(bad.status, 0);
  t.regex(
    bad.stderr,
    /BackendUnavailableError.*'node-gpu' is not available: install @tensorflow\/tfjs-node-gpu/,
  );
  const typo = script(`import { selectBackend } from "./src/index.ts"; await selectBackend();`, {
    TORL_BACKEND: "cuda",
  });
  t.regex(typo.stderr, /TORL_BACKEND must be one of/);
});

test("bench model --json --quick prints one JSON object with every figure last", (t) => {
  const out = execFileSync(
    process.execPath,
    ["--import=tsx", "examples/torl/src/cli.ts", "bench", "model", "--json", "--quick"],
    {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, TORL_BACKEND: "wasm" },
    },
  );
  const last = JSON.parse(out.trim().split("\n").at(-1)!);
  for (const k of [
    "matmul_gflops",
    "train_tokens_per_s",
    "train_flops_utilization",
    "decode_tokens_per_s",
    "decode_ms_per_token_ctx64",
    "decode_ms_per_token_ctx512",
  ])
    t.true(typeof last[k] === "number" && last[k] > 0, k);
});

test("a tfjs-node package installed without its native addon is refused at once, saying why", (t) => {
  // what an install without internet leaves: the package, but no libtensorflow and no addon
  const dir = mkdtempSync(join(tmpdir(), "tfjs-node-gpu-"));
  try {
    writeFileSync(join(dir, "package.json"), "{}");
    t.regex(
      missingNativeAddon(dir) ?? "",
      /without its native addon .*tfjs_binding\.node.*downloads libtensorflow/,
    );
    mkdirSync(join(dir, "lib", "napi-v8"), { recursive: true });
    writeFileSync(join(dir, "lib", "napi-v8", "tfjs_binding.node"), "");
    t.is(missingNativeAddon(dir), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
