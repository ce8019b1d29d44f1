/**
 * OpenBLAS's float32 matrix product for Node, through a small Node-API addon built at install time
 * (scripts/build.mjs). Loading never throws: a machine where the addon did not build or libopenblas is
 * missing gets `{ ok: false, reason }`, and callers keep their own kernels.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** What the addon exports (src/gemm.cc). */
export interface NativeBlas {
  /**
   * For each i < batch: c[i] (m x n) = op(a[i]) (m x k) * op(b[i]) (k x n), row-major; a[i] starts at
   * i * strideA floats (0: one matrix shared by every entry), likewise b[i]; c is dense. Throws a
   * RangeError when an operand is shorter than the sizes say.
   */
  gemm(
    a: Float32Array,
    b: Float32Array,
    c: Float32Array,
    batch: number,
    m: number,
    n: number,
    k: number,
    transposeA: boolean,
    transposeB: boolean,
    strideA: number,
    strideB: number,
  ): void;
  /** The OpenBLAS build, the CPU kernel it runs and its thread count. */
  info(): { config: string; coreName: string; threads: number };
  /** Sets OpenBLAS's thread count for this process. */
  setThreads(threads: number): void;
}

export type BlasLoad =
  | { ok: true; blas: NativeBlas; coreName: string; config: string }
  | { ok: false; reason: string };

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const ADDON_PATH = join(packageRoot, "build", "Release", "torl_blas.node");
const STATUS_PATH = join(packageRoot, "build-status.json");

function notBuiltReason(): string {
  const rebuild = "pnpm --filter @torl-ts/blas build:addon";
  if (!existsSync(STATUS_PATH)) return `the OpenBLAS addon was never built (run ${rebuild})`;
  try {
    const status = JSON.parse(readFileSync(STATUS_PATH, "utf8")) as { built?: boolean; reason?: string };
    if (status.built === false && status.reason) return `the OpenBLAS addon did not build: ${status.reason}`;
  } catch {
    // An unreadable status file says no more than a missing one.
  }
  return `the OpenBLAS addon is missing at ${ADDON_PATH} (run ${rebuild})`;
}

let loaded: BlasLoad | undefined;

/**
 * Loads the addon once per process and sets OpenBLAS to `threads` threads (default 1: this project
 * scales over processes, one per core). The result names OpenBLAS's CPU kernel, which OpenBLAS picks
 * from the processor at load time unless the environment's OPENBLAS_CORETYPE forces one.
 */
export function loadNativeBlas(threads = 1): BlasLoad {
  if (loaded) {
    if (loaded.ok) loaded.blas.setThreads(threads);
    return loaded;
  }
  if (!existsSync(ADDON_PATH)) {
    loaded = { ok: false, reason: notBuiltReason() };
    return loaded;
  }
  try {
    const blas = createRequire(import.meta.url)(ADDON_PATH) as NativeBlas;
    blas.setThreads(threads);
    const { coreName, config } = blas.info();
    loaded = { ok: true, blas, coreName, config };
  } catch (error) {
    const why = (error as Error)?.message?.split("\n")[0] ?? String(error);
    loaded = { ok: false, reason: `the OpenBLAS addon did not load: ${why}` };
  }
  return loaded;
}

/** How OpenBLAS chose its kernel: forced by OPENBLAS_CORETYPE, or detected from the CPU. */
export function coreChoice(coreName: string, env: NodeJS.ProcessEnv = process.env): string {
  const forced = env.OPENBLAS_CORETYPE?.trim();
  return forced
    ? `${coreName} kernel, forced by OPENBLAS_CORETYPE=${forced}`
    : `${coreName} kernel, detected from the CPU`;
}
