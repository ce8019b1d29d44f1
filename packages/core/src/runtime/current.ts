/** The one runtime of this process (driver or worker). */
import { NotInitializedError } from "../errors.js";
import type { Runtime } from "./runtime.js";

let current: Runtime | null = null;

export function currentRuntime(): Runtime {
  if (!current) throw new NotInitializedError();
  return current;
}

export function maybeRuntime(): Runtime | null {
  return current;
}

export function setRuntime(r: Runtime | null): void {
  current = r;
}
