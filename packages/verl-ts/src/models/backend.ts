/**
 * Tensor backend selection. Best available first: tfjs-node-gpu (CUDA), WebGPU (Dawn through the `webgpu`
 * package), tfjs-node (libtensorflow on CPU), wasm (XNNPACK, SIMD), plain JS cpu. `TORL_BACKEND` or an
 * explicit name overrides; a requested backend that cannot start throws with what to install.
 */
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { BackendUnavailableError } from "./errors.js";
import { installNativeMatmul, nativeMatmulWanted } from "./native-matmul.js";

export type BackendName = "node-gpu" | "node" | "webgpu" | "wasm" | "cpu";
export const BACKEND_NAMES: readonly BackendName[] = ["node-gpu", "webgpu", "node", "wasm", "cpu"];

export interface BackendInfo {
  /** Our name for it. */
  name: BackendName;
  /** tfjs's registered backend name (`tensorflow`, `webgpu`, `wasm`, `cpu`). */
  tfName: string;
  /** Threads the backend computes with (wasm: XNNPACK's pool; node: libtensorflow decides). */
  threads: number;
  /** What was tried before it and why each was skipped. */
  skipped: string[];
  /** The one line printed at selection. */
  line: string;
  /** wasm: whether BatchMatMul runs on OpenBLAS (see native-matmul.ts). */
  nativeMatmul?: boolean;
  /** The device it computes on, where the backend names one (webgpu: the adapter's description). */
  device?: string;
}

export interface BackendOptions {
  /** `auto` (default) or one name; falls back to env `TORL_BACKEND`. */
  backend?: BackendName | "auto";
  /** wasm threads to ask XNNPACK for (env `TORL_WASM_THREADS`, default the core count). */
  wasmThreads?: number;
  /** Where to print the choice; default stderr. `null` prints nothing. */
  log?: ((line: string) => void) | null;
}

const INSTALL: Record<BackendName, string> = {
  "node-gpu":
    "install @tensorflow/tfjs-node-gpu (pnpm --filter @torl-ts/verl add @tensorflow/tfjs-node-gpu; needs internet at install time, CUDA 11.2 and cuDNN 8.1)",
  node: "install @tensorflow/tfjs-node (pnpm --filter @torl-ts/verl add @tensorflow/tfjs-node; downloads libtensorflow at install time)",
  webgpu:
    "install the `webgpu` package and @tensorflow/tfjs-backend-webgpu (pnpm --filter @torl-ts/verl add webgpu @tensorflow/tfjs-backend-webgpu) on a machine with a GPU adapter",
  wasm: "install @tensorflow/tfjs-backend-wasm",
  cpu: "the cpu backend ships with @tensorflow/tfjs",
};

let current: BackendInfo | undefined;
let pending: Promise<BackendInfo> | undefined;

/** The backend chosen so far in this process, if any. */
export function currentBackend(): BackendInfo | undefined {
  return current;
}

/** Dynamic import by a runtime name, so optional packages need not be installed for this file to load. */
async function importOptional(name: string): Promise<any> {
  return import(name);
}

/**
 * Why the tfjs-node package in `packageDir` cannot start, or null. Its install script downloads
 * libtensorflow and builds the native addon; where that could not run (no internet, builds not allowed)
 * the package is there without the addon, and importing it would load all of tfjs (seconds) before
 * failing. This looks for the addon first.
 */
export function missingNativeAddon(packageDir: string): string | null {
  const lib = join(packageDir, "lib");
  const found =
    existsSync(lib) &&
    readdirSync(lib).some((d) => d.startsWith("napi-v") && existsSync(join(lib, d, "tfjs_binding.node")));
  if (found) return null;
  return `installed without its native addon (${join(lib, "napi-v*", "tfjs_binding.node")}): its install script downloads libtensorflow, and it did not run or failed; reinstall it where the install can reach the internet`;
}

const requireHere = createRequire(import.meta.url);

/** Imports @tensorflow/tfjs-node or -gpu, refusing at once one that is installed without its addon. */
async function importTfjsNode(name: string): Promise<void> {
  let dir: string | null = null;
  try {
    dir = dirname(requireHere.resolve(`${name}/package.json`));
  } catch {
    // not installed: the import below says so
  }
  const missing = dir ? missingNativeAddon(dir) : null;
  if (missing) throw new Error(`${name} is ${missing}`);
  await importOptional(name);
}

function envBackend(): BackendName | "auto" | undefined {
  const v = process.env.TORL_BACKEND?.trim();
  if (!v) return undefined;
  if (v === "auto" || (BACKEND_NAMES as readonly string[]).includes(v)) return v as BackendName | "auto";
  throw new BackendUnavailableError(v, `TORL_BACKEND must be one of auto, ${BACKEND_NAMES.join(", ")}`);
}

async function tryStart(
  name: BackendName,
  wasmThreads: number,
  auto: boolean,
): Promise<{ tfName: string; threads: number; matmul?: { native: boolean; line: string }; device?: string }> {
  switch (name) {
    case "node-gpu": {
      await importTfjsNode("@tensorflow/tfjs-node-gpu");
      if (!(await tf.setBackend("tensorflow"))) throw new Error("backend 'tensorflow' did not start");
      return { tfName: "tensorflow", threads: availableParallelism() };
    }
    case "node": {
      await importTfjsNode("@tensorflow/tfjs-node");
      if (!(await tf.setBackend("tensorflow"))) throw new Error("backend 'tensorflow' did not start");
      return { tfName: "tensorflow", threads: availableParallelism() };
    }
    case "webgpu": {
      // Probing Dawn on a Linux box without GPU device nodes only prints Vulkan loader warnings.
      if (auto && process.platform === "linux" && !["/dev/dri", "/dev/nvidia0"].some((p) => existsSync(p)))
        throw new Error("no GPU device (/dev/dri, /dev/nvidia0) visible");
      const g = globalThis as any;
      // WebGPU has no device index: a worker binds to its GPU by adapter name (TORL_WEBGPU_ADAPTER, a
      // Dawn flag); Dawn refuses an unknown name and lists the adapters it sees.
      const wanted = process.env.TORL_WEBGPU_ADAPTER?.trim();
      if (!g.navigator?.gpu) {
        const dawn = await importOptional("webgpu");
        Object.assign(g, dawn.globals);
        if (!g.navigator) g.navigator = {};
        g.navigator.gpu = dawn.create(wanted ? [`adapter=${wanted}`] : []);
      }
      let adapter: any;
      try {
        adapter = await g.navigator.gpu.requestAdapter();
      } catch (error) {
        // Dawn's message lists the adapters it sees on its following lines: keep them on one line.
        const lines = String((error as Error)?.message ?? error)
          .split("\n")
          .map((l) => l.trim());
        throw new Error(`TORL_WEBGPU_ADAPTER='${wanted ?? ""}': ${lines.filter(Boolean).join("; ")}`);
      }
      if (!adapter)
        throw new Error(
          wanted
            ? `no WebGPU adapter named '${wanted}' (TORL_WEBGPU_ADAPTER; Dawn prints the adapters it sees on stderr)`
            : "no WebGPU adapter (no GPU visible to Dawn)",
        );
      if (auto && (adapter.isFallbackAdapter || adapter.info?.isFallbackAdapter))
        throw new Error("only a software (fallback) WebGPU adapter: slower than wasm");
      await importOptional("@tensorflow/tfjs-backend-webgpu");
      if (!(await tf.setBackend("webgpu"))) throw new Error("backend 'webgpu' did not start");
      const device = [adapter.info?.vendor, adapter.info?.description].filter(Boolean).join(" ") || "unnamed";
      return { tfName: "webgpu", threads: 1, device };
    }
    case "wasm": {
      const wasm = await import("@tensorflow/tfjs-backend-wasm");
      // Must precede initialisation. In Node, tfjs-backend-wasm reports no thread support
      // (WASM_HAS_MULTITHREAD_SUPPORT is false under IS_NODE, tfjs issue 3830), so XNNPACK runs on one
      // thread whatever is asked; use several processes to use several cores.
      wasm.setThreadsCount(wasmThreads);
      if (!(await tf.setBackend("wasm"))) throw new Error("backend 'wasm' did not start");
      registerWasmFallbacks();
      return { tfName: "wasm", threads: wasm.getThreadsCount(), matmul: installNativeMatmul("wasm") };
    }
    case "cpu": {
      if (!(await tf.setBackend("cpu"))) throw new Error("backend 'cpu' did not start");
      return { tfName: "cpu", threads: 1 };
    }
  }
}

/**
 * Chooses and starts the tensor backend once per process (later calls return the first choice unless a
 * different explicit name is asked). Prints one line naming the choice.
 */
export async function selectBackend(options: BackendOptions = {}): Promise<BackendInfo> {
  const requested = options.backend ?? envBackend() ?? "auto";
  if (current && (requested === "auto" || requested === current.name)) return current;
  if (pending) {
    const got = await pending;
    if (requested === "auto" || requested === got.name) return got;
  }
  pending = start(requested, options);
  try {
    current = await pending;
    return current;
  } finally {
    pending = undefined;
  }
}

async function start(requested: BackendName | "auto", options: BackendOptions): Promise<BackendInfo> {
  const wasmThreads =
    options.wasmThreads ?? (Number(process.env.TORL_WASM_THREADS) || availableParallelism());
  const log = options.log === undefined ? (line: string) => process.stderr.write(`${line}\n`) : options.log;
  nativeMatmulWanted();
  const candidates = requested === "auto" ? BACKEND_NAMES : [requested];
  const skipped: string[] = [];
  for (const name of candidates) {
    try {
      const { tfName, threads, matmul, device } = await tryStart(name, wasmThreads, requested === "auto");
      const extra =
        name === "wasm"
          ? ` (asked for ${wasmThreads} threads, XNNPACK uses ${threads}: Node has no wasm threads in tfjs; scale with processes)`
          : "";
      const on = device ? ` on ${device}` : "";
      const line = `[torl] tensor backend: ${name}${on}${extra}${requested === "auto" ? "" : " (requested)"}; ${matmul?.line ?? `native kernels: not used on ${name} (the OpenBLAS kernels run on wasm)`}`;
      const info: BackendInfo = {
        name,
        tfName,
        threads,
        skipped,
        line,
        nativeMatmul: matmul?.native,
        ...(device ? { device } : {}),
      };
      log?.(line);
      return info;
    } catch (error) {
      const why = (error as Error)?.message?.split("\n")[0] ?? String(error);
      if (requested !== "auto") throw new BackendUnavailableError(name, `${INSTALL[name]}; (${why})`, error);
      skipped.push(`${name}: ${why}`);
    }
  }
  throw new BackendUnavailableError("auto", "no tensor backend could start", skipped);
}

let fallbacksRegistered = false;

/**
 * Kernels the wasm backend lacks but training needs. UnsortedSegmentSum is the gradient of gather (the
 * embedding lookup); it runs here in JS on the wasm heap, which is cheap next to the matmuls.
 */
export function registerWasmFallbacks(): void {
  if (fallbacksRegistered || tf.getKernel("UnsortedSegmentSum", "wasm")) return;
  fallbacksRegistered = true;
  tf.registerKernel({
    kernelName: "UnsortedSegmentSum",
    backendName: "wasm",
    kernelFunc: ({ inputs, attrs, backend }) => {
      const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
      const numSegments = (attrs as { numSegments: number }).numSegments;
      const b = backend as any;
      const n = segmentIds.shape.reduce((p, q) => p * q, 1);
      const outShape = [numSegments, ...x.shape.slice(segmentIds.shape.length)];
      // Allocate first: growing the wasm heap would detach earlier views.
      const out = b.makeOutput(outShape, x.dtype) as tf.TensorInfo;
      const xs = b.typedArrayFromHeap(x) as Float32Array | Int32Array;
      const ids = b.typedArrayFromHeap(segmentIds) as Int32Array;
      const inner = n === 0 ? 0 : xs.length / n;
      const os = b.typedArrayFromHeap(out) as Float32Array | Int32Array;
      os.fill(0);
      for (let i = 0; i < n; i++) {
        const s = ids[i]!;
        if (s < 0 || s >= numSegments) continue;
        const src = i * inner;
        const dst = s * inner;
        for (let j = 0; j < inner; j++) os[dst + j]! += xs[src + j]!;
      }
      return out;
    },
  });
}
