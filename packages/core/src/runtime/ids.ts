import { randomBytes } from "node:crypto";

/** A short random id (hex). */
export function randomId(bytes = 6): string {
  return randomBytes(bytes).toString("hex");
}
