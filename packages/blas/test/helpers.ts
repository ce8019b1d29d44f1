// Shared by the addon's tests.
import type { ExecutionContext } from "ava";
import { loadNativeBlas, type NativeBlas } from "../src/index.js";

/** The addon, or undefined (the test then passes, logging why) where it is not built; CI must build it. */
export function addon(t: ExecutionContext): NativeBlas | undefined {
  const load = loadNativeBlas();
  if (load.ok) return load.blas;
  if (process.env.CI) t.fail(`CI must build the OpenBLAS addon: ${load.reason}`);
  else t.log(`not checked: ${load.reason}`);
  t.pass();
  return undefined;
}
