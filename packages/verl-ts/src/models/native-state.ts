/**
 * Which backends run the native (OpenBLAS) kernels in this process: written once per backend by
 * installNativeMatmul (native-matmul.ts), read by the code that picks a native or a tfjs path. Its own
 * module so the kernels that ask (native-adam.ts and the layers) need not import the installer, which
 * imports them.
 */

export type NativeMatmulBackend = "wasm";

/** The outcome for one backend: which kernel its BatchMatMul runs, in words for the backend line. */
export type NativeMatmulState = { native: true; line: string } | { native: false; line: string };

const states = new Map<NativeMatmulBackend, NativeMatmulState>();

/** What installNativeMatmul decided for `backendName`, if it ran. */
export function nativeMatmulState(backendName: NativeMatmulBackend): NativeMatmulState | undefined {
  return states.get(backendName);
}

/** Records installNativeMatmul's outcome for `backendName` (once: a second install returns the first). */
export function setNativeMatmulState(backendName: NativeMatmulBackend, state: NativeMatmulState): void {
  states.set(backendName, state);
}

/** Whether `backendName` (a tfjs backend name) runs BatchMatMul on OpenBLAS in this process. */
export function nativeMatmulActive(backendName: string): boolean {
  return states.get(backendName as NativeMatmulBackend)?.native === true;
}
