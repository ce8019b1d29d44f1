/**
 * The checks of option objects the public API takes (init, actors, tasks, kill, get, wait): one
 * function per kind of option, each throwing where the option is given with a message that names
 * `where` (e.g. "actor Counter", "get()") and the option. An option accepted and then ignored, or
 * turned into something else, is worse than a refusal.
 */
import { UsageError } from "./errors.js";

/** A value as a message shows it: strings quoted, so "4" and 4 read differently. */
export function shown(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  try {
    return Array.isArray(v) ? JSON.stringify(v) : String(v);
  } catch {
    return typeof v;
  }
}

/** `opts` as a record: undefined gives {}; anything but a plain object is a TypeError. */
export function optionsObject(opts: unknown, where: string): Record<string, unknown> {
  if (opts === undefined) return {};
  if (opts === null || typeof opts !== "object" || Array.isArray(opts))
    throw new TypeError(`${where}: options must be an object, got ${shown(opts)}`);
  return opts as Record<string, unknown>;
}

/** `opts` checked to be an object (or undefined) of only the `known` keys; see refuseUnknownKeys. */
export function checkedOptions(
  opts: unknown,
  known: readonly string[],
  where: string,
): Record<string, unknown> {
  const o = optionsObject(opts, where);
  refuseUnknownKeys(o, known, where);
  return o;
}

/** Throws TypeError for the first key of `opts` not in `known`, with a did-you-mean and the list. */
export function refuseUnknownKeys(opts: object, known: readonly string[], where: string): void {
  for (const key of Object.keys(opts)) {
    if (known.includes(key)) continue;
    const near = closestKey(key, known);
    throw new TypeError(
      `${where}: unknown option "${key}"${near ? ` (did you mean "${near}"?)` : ""}; the options are: ${known.join(", ")}`,
    );
  }
}

/**
 * The known key `key` is most likely a typo of: the same letters in another case (numCPUs), or within
 * two edits (one for keys of up to four letters); undefined when none is that close.
 */
function closestKey(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const sameCase = known.find((k) => k.toLowerCase() === lower);
  if (sameCase) return sameCase;
  const limit = key.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestEdits = limit + 1;
  for (const k of known) {
    const edits = editDistance(lower, k.toLowerCase());
    if (edits < bestEdits) [best, bestEdits] = [k, edits];
  }
  return best;
}

/** Levenshtein distance, with a swap of two neighbouring letters counted as one edit. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** An integer option: undefined (left out) or an integer >= `min`, else RangeError. `note` explains a value. */
export function checkInteger(where: string, key: string, value: unknown, min: number, note = ""): void {
  if (value === undefined) return;
  if (!(Number.isInteger(value) && (value as number) >= min))
    throw new RangeError(`${where}: ${key} must be an integer >= ${min}${note}, got ${shown(value)}`);
}

/** A boolean option: undefined or true or false, else TypeError (the string "false" is not false). */
export function checkBoolean(where: string, key: string, value: unknown): void {
  if (value !== undefined && typeof value !== "boolean")
    throw new TypeError(`${where}: ${key} must be true or false, got ${shown(value)}`);
}

/** A name option: undefined or a non-empty string, else TypeError. */
export function checkName(where: string, key: string, value: unknown): void {
  if (value !== undefined && (typeof value !== "string" || value === ""))
    throw new TypeError(`${where}: ${key} must be a non-empty string, got ${shown(value)}`);
}

/**
 * Environment variables for a worker: an object of names to strings. A value of another type would
 * arrive as its string form ("undefined", "1"), so it is refused.
 */
export function checkEnv(where: string, value: unknown): void {
  if (value === undefined) return;
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new TypeError(
      `${where}: env must be an object of variable name to string value, got ${shown(value)}`,
    );
  for (const [k, v] of Object.entries(value)) {
    if (k === "" || k.includes("=") || k.includes("\0"))
      throw new TypeError(`${where}: env has a variable name that cannot be set: ${JSON.stringify(k)}`);
    if (typeof v !== "string")
      throw new TypeError(
        `${where}: env.${k} must be a string, got ${shown(v)}${v === undefined ? " (leave the key out to leave the variable as it is)" : ""}`,
      );
  }
}

/**
 * A head's address, HOST:PORT with a port in [1, 65535], or a UsageError naming `what` (the flag or
 * environment variable it came from). Every command that takes an address checks it here.
 */
export function checkAddress(what: string, raw: string): string {
  const port = /^[^:\s]+:(\d+)$/.exec(raw)?.[1];
  if (port === undefined || Number(port) < 1 || Number(port) > 65535)
    throw new UsageError(`${what} must be HOST:PORT (a port in [1, 65535]), got '${raw}'`);
  return raw;
}
