/**
 * Set-ups the model tests share: seeded values, the native addon or a reason, temp dirs removed after,
 * fixture scripts run in a process of their own.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadNativeBlas, type NativeBlas } from "@torl-ts/blas";
import test, { type ExecutionContext } from "ava";

/** n values uniform in [-scale, scale] from a small LCG (the same numbers on every machine). */
export function seededUniform(n: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    out[i] = ((s / 0x7fffffff) * 2 - 1) * scale;
  }
  return out;
}

/**
 * The OpenBLAS addon, or undefined after saying why it is not checked (a machine without
 * libopenblas-dev). CI builds it (.ci/setup.d/openblas.sh), so there its absence fails the test.
 */
export function nativeAddon(t: ExecutionContext): NativeBlas | undefined {
  const load = loadNativeBlas();
  if (load.ok) return load.blas;
  if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
  else t.log(`not checked: ${load.reason}`);
  t.pass();
  return undefined;
}

/** A maker of temp dirs named `prefix`-..., each removed after the file's tests. */
export function tempDirs(prefix: string): () => string {
  const made: string[] = [];
  test.after.always(() => {
    for (const d of made) rmSync(d, { recursive: true, force: true });
  });
  return () => {
    const d = mkdtempSync(join(tmpdir(), `${prefix}-`));
    made.push(d);
    return d;
  };
}

/**
 * Runs a TypeScript fixture script in a node process of its own (a backend per process: the Vulkan loader
 * reads its environment at process start; TORL_BACKEND cleared) and parses the last line it prints.
 */
export function runJsonScript<T>(
  script: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import=tsx", script, ...args], {
      env: { ...process.env, ...env, TORL_BACKEND: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      err += d;
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0)
        reject(new Error(`${script} ${args.join(" ")} exited with ${code}:\n${err.slice(-3000)}`));
      else resolve(JSON.parse(out.trim().split("\n").at(-1)!) as T);
    });
  });
}

/**
 * Runs a python script that uses transformers (offline, quiet) with `input` as JSON on stdin and parses
 * the last line it prints; or gives the reason it cannot run here (no python3, or no torch / transformers
 * / tokenizers / peft: CI has none of them, so there the comparison is not made; a machine may have
 * transformers without peft). Any other failure throws.
 */
export function runTransformers<T>(
  lines: string[],
  args: string[],
  input: unknown,
): { value: T } | { reason: string } {
  const r = spawnSync("python3", ["-c", lines.join("\n"), ...args], {
    input: JSON.stringify(input),
    encoding: "utf8",
    timeout: 600_000,
    env: { ...process.env, HF_HUB_OFFLINE: "1", TRANSFORMERS_VERBOSITY: "error" },
  });
  if (r.error) return { reason: `python3 did not run (${r.error.message})` };
  if (r.status !== 0) {
    const last = r.stderr.trim().split("\n").at(-1) ?? "";
    if (/No module named '(torch|transformers|tokenizers|peft)'/.test(last))
      return { reason: `python3: ${last}` };
    throw new Error(`python3 ${args.join(" ")} failed (exit ${r.status}):\n${r.stderr}`);
  }
  return { value: JSON.parse(r.stdout.trim().split("\n").at(-1)!) as T };
}

/** The token batch of a fixture's expected.json (`ids`, `mask`: [B][L] lists). */
export function fixtureBatch(expected: { ids: number[][]; mask: number[][] }): {
  ids: Int32Array;
  mask: Uint8Array;
  batch: number;
  length: number;
} {
  return {
    ids: Int32Array.from(expected.ids.flat()),
    mask: Uint8Array.from(expected.mask.flat()),
    batch: expected.ids.length,
    length: expected.ids[0]!.length,
  };
}

/**
 * Whether bfloat16 products past 8 rows run on AMX tiles here (the addon loaded, the CPU has them): their
 * results then have float32 accuracy in another summation order than sgemm's on the widened weights.
 */
export function amxProducts(): boolean {
  const load = loadNativeBlas();
  return load.ok && load.blas.amx().enabled;
}

/**
 * `f` with the addon's AMX tiles off (sgemm on widened tiles past 8 rows), restored after. The setting is
 * the process's: only in serial tests, or a concurrent one computes with the tiles off too.
 */
export async function withoutAmx<T>(f: () => Promise<T>): Promise<T> {
  const load = loadNativeBlas();
  if (!load.ok || !load.blas.amx().enabled) return f();
  load.blas.setAmx(false);
  try {
    return await f();
  } finally {
    load.blas.setAmx(true);
  }
}

/** max |a - b| / max(1, |b|) over the elements. */
export function maxRelativeDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!) / Math.max(1, Math.abs(b[i]!)));
  return m;
}
