/**
 * OpenBLAS's float32 matrix product and fused kernels of ours (AdamW step, log-softmax pick, RMSNorm,
 * SwiGLU gate, a decode step's attention) for Node, through a small Node-API addon built at install time (scripts/build.mjs).
 * Loading never throws: a machine where the addon did not build or libopenblas is missing gets
 * `{ ok: false, reason }`, and callers keep their own kernels.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** What the addon exports (src/gemm.cc). */
export interface NativeBlas {
  /**
   * For each i < batch: c[i] (m x n) = op(a[i]) (m x k) * op(b[i]) (k x n), row-major; a[i] starts at
   * i * strideA floats (0: one matrix shared by every entry), likewise b[i]; c is dense. With
   * `accumulate` true the product is added to what c holds (sgemm's beta = 1) instead of replacing it
   * (default false). Throws
   * a RangeError when an operand is shorter than the sizes say.
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
    accumulate?: boolean,
  ): void;
  /**
   * One AdamW update in one pass (weight decay 0: Adam): m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2
   * (in place), out <- param (1 - lr wd) - lr / (1 - b1^step) m / (sqrt(v) / sqrt(1 - b2^step) + eps).
   * `out` may be `param`. Values are computed in double and stored as float, like the same loop in JS.
   * `gradScale` (default 1; gradient clipping's coefficient) scales each gradient value, stored as float,
   * before use: the bits of scaling `grad` in a pass of its own first, without writing it.
   */
  adamw(
    param: Float32Array,
    grad: Float32Array,
    expAvg: Float32Array,
    expAvgSq: Float32Array,
    out: Float32Array,
    lr: number,
    beta1: number,
    beta2: number,
    eps: number,
    weightDecay: number,
    step: number,
    gradScale?: number,
  ): void;
  /**
   * For each row r of `logits` ([rows, vocab]) with t = targets[r]: stats[3r] = log softmax(row)[t],
   * stats[3r + 1] = the entropy of softmax(row), stats[3r + 2] = logsumexp(row). t = -1: a row nobody
   * scores, stats 0. Throws a RangeError for a target outside [0, vocab).
   */
  logSoftmaxPick(logits: Float32Array, targets: Int32Array, vocab: number, stats: Float32Array): void;
  /**
   * The gradient of logSoftmaxPick's log-probs and entropies (dStats, 3 per row, the third ignored) with
   * respect to the logits, written to dLogits (rows of target -1 get 0).
   */
  logSoftmaxPickGrad(
    logits: Float32Array,
    targets: Int32Array,
    vocab: number,
    stats: Float32Array,
    dStats: Float32Array,
    dLogits: Float32Array,
  ): void;
  /** RMSNorm of each row of x ([rows, w.length]): y = x / sqrt(mean(x^2) + eps) * w. */
  rmsNorm(x: Float32Array, w: Float32Array, eps: number, y: Float32Array): void;
  /** The gradient of rmsNorm: dx (as long as x) and dw (summed over rows) from dy. */
  rmsNormGrad(
    x: Float32Array,
    w: Float32Array,
    eps: number,
    dy: Float32Array,
    dx: Float32Array,
    dw: Float32Array,
  ): void;
  /** The SwiGLU gate, elementwise: y = g sigmoid(g) u. */
  swiglu(g: Float32Array, u: Float32Array, y: Float32Array): void;
  /** The gradient of swiglu: dg and du from dy. */
  swigluGrad(g: Float32Array, u: Float32Array, dy: Float32Array, dg: Float32Array, du: Float32Array): void;
  /**
   * One decode step's attention for one layer: adds the biases (an empty array: none) to q [B, H*D] and
   * k, v [B, KV*D], rotates q and k by cos, sin [B, D/2] (rotate_half form; q also scaled by 1/sqrt(D)),
   * writes row b's k and v into keys, values [B, KV, capacity, D] at slots[b] in place, and writes to
   * out [B, H*D] softmax(q K^T + mask) V over slots [0, span), mask [B, capacity] additive (every slot
   * < span <= capacity). Query head i reads kv head floor(i / (H / KV)).
   */
  decodeAttention(
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    qBias: Float32Array,
    kBias: Float32Array,
    vBias: Float32Array,
    cos: Float32Array,
    sin: Float32Array,
    keys: Float32Array,
    values: Float32Array,
    mask: Float32Array,
    out: Float32Array,
    batch: number,
    heads: number,
    kvHeads: number,
    headDim: number,
    capacity: number,
    slots: Int32Array,
    span: number,
  ): void;
  /**
   * out (m x n) = x (m x k) . W for a weight W held as bfloat16 bits (x, the sums and out stay float32): W
   * is [n, k] read transposed when `transposeW` (out[i][j] = x[i] . W[j]), else [k, n]. W is widened one
   * cache-sized tile at a time and each tile multiplied by OpenBLAS (src/matmul-bf16.cc): no float32 copy
   * of W is made, and the same shapes and values always give the same bits. Throws a RangeError when an
   * operand is shorter than m, n and k say.
   */
  matmulBf16(
    x: Float32Array,
    w: Uint16Array,
    out: Float32Array,
    m: number,
    n: number,
    k: number,
    transposeW: boolean,
  ): void;
  /**
   * matmulBf16(x, W, out, m, n, k, false) for a weight W [k, n] held in its tile layout (packBf16Tiles):
   * the same bits. Past 8 rows on AMX tiles the layout is what the tiles read, so nothing is packed per
   * product (a frozen weight laid out once: the reference policy's); elsewhere W is unpacked into a buffer
   * first. Throws a RangeError where k or n is not a multiple of 32 or an operand is shorter than m, n and
   * k say.
   */
  matmulBf16Tiles(
    x: Float32Array,
    tiles: Uint16Array,
    out: Float32Array,
    m: number,
    n: number,
    k: number,
  ): void;
  /**
   * out[i] = value `from` + i of the tile layout of W [k, n] (bfloat16 bits; k and n multiples of 32):
   * W's columns in strips of 32, each strip's rows in pairs, each pair's 32 columns in turn with the two
   * rows' values side by side, so W[p][j] lies at floor(j / 32) 32k + floor(p / 2) 64 + (j % 32) 2 + p % 2.
   * Any run of the layout (a rank's piece of a sharded weight) or all of it. Throws a RangeError where
   * the shape or the run does not fit.
   */
  packBf16Tiles(w: Uint16Array, k: number, n: number, from: number, out: Uint16Array): void;
  /** W [k, n] into `w` from its tile layout (packBf16Tiles' inverse, the whole weight). */
  unpackBf16Tiles(tiles: Uint16Array, k: number, n: number, w: Uint16Array): void;
  /**
   * Whether matmulBf16 past 8 rows runs on AMX tiles (Intel Xeons from Sapphire Rapids on, with a kernel
   * that grants them): supported, enabled (on by default where supported; TORL_BLAS_AMX=off turns it off),
   * and why not where unsupported.
   */
  amx(): { supported: boolean; enabled: boolean; reason: string };
  /** Turns the AMX tiles on or off for this process; turning them on where unsupported throws, naming why. */
  setAmx(enabled: boolean): void;
  /**
   * "bfloat16": every matmulBf16 from then on rounds x to bfloat16 (nearest even) before the product, as
   * PyTorch's bfloat16 compute does, which on AMX tiles takes one tile product instead of three;
   * "float32" (the default) multiplies x whole. Process-wide; anything else throws.
   */
  setActivationDtype(dtype: "float32" | "bfloat16"): void;
  /** What setActivationDtype set. */
  activationDtype(): "float32" | "bfloat16";
  /** out[i] = the float32 value of bfloat16 bits[i] (exact). Throws a RangeError when the lengths differ. */
  widenBf16(bits: Uint16Array, out: Float32Array): void;
  /**
   * bits[i] = values[i] rounded to bfloat16, to nearest even (NaN to the quiet NaN 0x7fc0, overflow to
   * infinity: torch's `.to(torch.bfloat16)`). Throws a RangeError when the lengths differ.
   */
  roundBf16(values: Float32Array, bits: Uint16Array): void;
  /** y[i] += x[i] (float32, the bits of the same JS loop). Throws a RangeError when the lengths differ. */
  addInto(x: Float32Array, y: Float32Array): void;
  /** The sum of x[i]^2 in double precision, in index order (the bits of the same JS loop). */
  sumSquares(x: Float32Array): number;
  /**
   * An ArrayBuffer over the first `length` bytes of the file open as `fd` (a file descriptor), mapped into
   * this process: its bytes are read where the file holds them, nothing is copied (for memory another
   * process wrote once, such as collective.publish's files in /dev/shm). Private: a write, which the
   * caller should not make, changes this process's copy of a page, never the file. Unmapped when the buffer
   * is garbage-collected. Map only bytes the file holds: past its end a read kills the process (SIGBUS).
   */
  mapFile(fd: number, length: number): ArrayBuffer;
  /**
   * The pages of a mapFile or reserveMapping buffer that hold bytes [byteOffset, byteOffset + byteLength)
   * leave this process's resident set: a file's pages are read from the file again, the others read as
   * zeros.
   */
  releaseMapped(buffer: ArrayBuffer, byteOffset: number, byteLength: number): void;
  /**
   * An ArrayBuffer of `length` bytes of private zero-filled memory, address space only until a page is
   * touched, into whose pages mapFileInto maps files: one array over the pieces of several files.
   */
  reserveMapping(length: number): ArrayBuffer;
  /**
   * Bytes [byteOffset, byteOffset + byteLength) of a reserveMapping buffer become file `fd`'s from
   * `fileOffset`, mapped as mapFile maps. byteOffset, fileOffset and byteLength are whole pages.
   */
  mapFileInto(
    buffer: ArrayBuffer,
    byteOffset: number,
    fd: number,
    fileOffset: number,
    byteLength: number,
  ): void;
  /** The bytes of a memory page here (mapFileInto's unit). */
  pageSize(): number;
  /**
   * Gives the kernel back every whole page malloc holds free (glibc's malloc_trim), inside its heaps
   * too: for after a phase whose transients do not come again. True when pages went back; false where
   * the C library is not glibc.
   */
  trimHeap(): boolean;
  /** The OpenBLAS build, the CPU kernel it runs and its thread count. */
  info(): { config: string; coreName: string; threads: number };
  /** Sets OpenBLAS's thread count for this process. */
  setThreads(threads: number): void;
}

/** Every function this package's source exports: an addon built from older source lacks some. */
const ADDON_FUNCTIONS: ReadonlyArray<keyof NativeBlas> = [
  "gemm",
  "adamw",
  "logSoftmaxPick",
  "logSoftmaxPickGrad",
  "rmsNorm",
  "rmsNormGrad",
  "swiglu",
  "swigluGrad",
  "decodeAttention",
  "matmulBf16",
  "matmulBf16Tiles",
  "packBf16Tiles",
  "unpackBf16Tiles",
  "amx",
  "setAmx",
  "setActivationDtype",
  "activationDtype",
  "widenBf16",
  "roundBf16",
  "addInto",
  "sumSquares",
  "mapFile",
  "releaseMapped",
  "reserveMapping",
  "mapFileInto",
  "pageSize",
  "trimHeap",
  "info",
  "setThreads",
];

export type BlasLoad =
  | { ok: true; blas: NativeBlas; coreName: string; config: string }
  | { ok: false; reason: string };

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const ADDON_PATH = join(packageRoot, "build", "Release", "torl_blas.node");

/**
 * matmulBf16 of at most this many rows runs the addon's own loops (a decode step's); past it, on AMX tiles
 * where they are on, each row of out depends on its own row of x alone: the same bits whatever other rows
 * share the call.
 */
export const MATMUL_BF16_FEW_ROWS = 8;

/**
 * The one command that installs what the build needs (where it can) and builds the addon: the
 * repository's `pnpm setup:native`, or this package's script by path where it is installed as a dependency.
 */
export function setupCommand(root: string = packageRoot): string {
  const workspace = resolve(root, "..", "..");
  if (existsSync(join(workspace, "pnpm-workspace.yaml")) && root === join(workspace, "packages", "blas"))
    return "pnpm setup:native";
  return `node ${join(root, "scripts", "setup-native.mjs")}`;
}

/**
 * Why there is no addon at `root`'s build/Release/torl_blas.node, from the build-status.json its install
 * script wrote, with the command that gets it: a status written before libopenblas-dev was installed
 * stays as it was (the package manager does not run the install script again), so the reason always
 * names the way back.
 */
export function addonMissingReason(root: string = packageRoot): string {
  const fix = `run ${setupCommand(root)}`;
  const statusPath = join(root, "build-status.json");
  if (!existsSync(statusPath)) return `the OpenBLAS addon was never built (${fix})`;
  try {
    const status = JSON.parse(readFileSync(statusPath, "utf8")) as { built?: boolean; reason?: string };
    if (status.built === false && status.reason)
      return `the OpenBLAS addon did not build: ${status.reason}; ${fix} to install what it needs and build it`;
  } catch {
    // An unreadable status file says no more than a missing one.
  }
  return `the OpenBLAS addon is missing at ${join(root, "build", "Release", "torl_blas.node")} (${fix})`;
}

/**
 * The addon's sources (binding.gyp, src/*.cc, src/*.h under `root`) changed after `addonPath` was built,
 * by modification time as make decides: a checkout that pulled new kernels without rebuilding would
 * otherwise run the old ones, with other numbers and no word said.
 */
export function sourcesNewerThan(addonPath: string, root: string = packageRoot): string[] {
  const built = statSync(addonPath).mtimeMs;
  const sources = [
    "binding.gyp",
    ...readdirSync(join(root, "src"))
      .filter((f) => f.endsWith(".cc") || f.endsWith(".h"))
      .map((f) => `src/${f}`),
  ];
  return sources.filter((f) => existsSync(join(root, f)) && statSync(join(root, f)).mtimeMs > built);
}

let loaded: BlasLoad | undefined;

/**
 * TORL_BLAS_AMX: "on" (fails where the machine has no AMX tiles), "off" (the float32 sgemm path past 8
 * rows, as on other CPUs), or unset (on where supported). Any other value throws: a misspelt setting
 * must not quietly leave the default in place.
 */
export function applyAmxSetting(
  blas: Pick<NativeBlas, "amx" | "setAmx">,
  env: NodeJS.ProcessEnv = process.env,
) {
  const value = env.TORL_BLAS_AMX?.trim() ?? "";
  if (value === "") return;
  if (value !== "on" && value !== "off")
    throw new Error(`TORL_BLAS_AMX must be "on" or "off" (or unset for on where supported), not "${value}"`);
  const { supported, reason } = blas.amx();
  if (value === "on" && !supported)
    throw new Error(`TORL_BLAS_AMX=on, but this machine has no AMX tiles: ${reason}`);
  blas.setAmx(value === "on");
}

/**
 * Loads the addon once per process and sets OpenBLAS to `threads` threads (default 1: this project
 * scales over processes, one per core). The result names OpenBLAS's CPU kernel, which OpenBLAS picks
 * from the processor at load time unless the environment's OPENBLAS_CORETYPE forces one.
 */
export function loadNativeBlas(threads = 1): BlasLoad {
  if (!loaded) loaded = load(threads);
  else if (loaded.ok) loaded.blas.setThreads(threads);
  // outside load's catch: a bad TORL_BLAS_AMX throws to the caller rather than turning the addon off
  if (loaded.ok) applyAmxSetting(loaded.blas);
  return loaded;
}

function load(threads: number): BlasLoad {
  let loaded: BlasLoad;
  if (!existsSync(ADDON_PATH)) {
    loaded = { ok: false, reason: addonMissingReason() };
    return loaded;
  }
  const newer = sourcesNewerThan(ADDON_PATH);
  if (newer.length) {
    loaded = {
      ok: false,
      reason: `the OpenBLAS addon at ${ADDON_PATH} is older than its sources (${newer.slice(0, 3).join(", ")}${newer.length > 3 ? ", ..." : ""} changed since it was built; run ${setupCommand()})`,
    };
    return loaded;
  }
  try {
    const blas = createRequire(import.meta.url)(ADDON_PATH) as NativeBlas;
    const missing = ADDON_FUNCTIONS.filter((f) => typeof blas[f] !== "function");
    if (missing.length) {
      loaded = {
        ok: false,
        reason: `the OpenBLAS addon at ${ADDON_PATH} was built from older source (no ${missing.join(", ")}; run ${setupCommand()})`,
      };
      return loaded;
    }
    blas.setThreads(threads);
    const { coreName, config } = blas.info();
    loaded = { ok: true, blas, coreName, config };
  } catch (error) {
    const why = (error as Error)?.message?.split("\n")[0] ?? String(error);
    loaded = { ok: false, reason: `the OpenBLAS addon did not load: ${why}` };
  }
  return loaded;
}

/**
 * The sum of x[i]^2 in double precision in the addon's order (sumSquares), written in JavaScript for
 * where the addon does not run: eight running sums, sum l over the indices l mod 8 of the whole chunks
 * of 8, added ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the rest in index order.
 */
export function sumSquaresInOrder(x: Float32Array): number {
  const acc = new Float64Array(8);
  const whole = x.length - (x.length % 8);
  for (let i = 0; i < whole; i += 8) for (let l = 0; l < 8; l++) acc[l]! += x[i + l]! * x[i + l]!;
  let s = acc[0]! + acc[1]! + (acc[2]! + acc[3]!) + (acc[4]! + acc[5]! + (acc[6]! + acc[7]!));
  for (let i = whole; i < x.length; i++) s += x[i]! * x[i]!;
  return s;
}

/** How OpenBLAS chose its kernel: forced by OPENBLAS_CORETYPE, or detected from the CPU. */
export function coreChoice(coreName: string, env: NodeJS.ProcessEnv = process.env): string {
  const forced = env.OPENBLAS_CORETYPE?.trim();
  return forced
    ? `${coreName} kernel, forced by OPENBLAS_CORETYPE=${forced}`
    : `${coreName} kernel, detected from the CPU`;
}
