/**
 * Whether the OpenBLAS addon's kernels are wanted (`TORL_NATIVE_MATMUL`) and the loaded addon, for
 * host-side users (the sharded optimizer, bf16 conversions). A module of its own, importing nothing of
 * the models: half-precision.ts uses it, and the kernel registrations (native-matmul.ts) import
 * half-precision.ts through the host kernels.
 */
import { loadNativeBlas, type NativeBlas } from "@torl-ts/blas";
import { BackendUnavailableError } from "./errors.js";

/**
 * The loaded addon when native kernels are wanted (TORL_NATIVE_MATMUL) and it loads, for host-side users
 * (the sharded optimizer); undefined otherwise.
 */
export function nativeBlas(): NativeBlas | undefined {
  if (!nativeMatmulWanted()) return undefined;
  const load = loadNativeBlas(1);
  return load.ok ? load.blas : undefined;
}

/**
 * `TORL_NATIVE_MATMUL`: `on` (default: use OpenBLAS where it loads) or `off`. Read before any backend is
 * tried, so a bad value stops the start instead of making `auto` skip to another backend.
 */
export function nativeMatmulWanted(): boolean {
  const v = process.env.TORL_NATIVE_MATMUL?.trim() ?? "";
  if (v === "" || v === "on") return true;
  if (v === "off") return false;
  throw new BackendUnavailableError("wasm", `TORL_NATIVE_MATMUL must be on or off, got '${v}'`);
}
