/**
 * The one flag parser of every command: node:util's parseArgs (so `--flag value` and `--flag=value`
 * mean the same everywhere), plus typed values checked with the flag's name in the message.
 */
import { parseArgs } from "node:util";
import { checkAddress } from "../options.js";
import { UsageError } from "./command.js";
import { lastHeadAddress } from "./state.js";

export type FlagSpec =
  | { type: "boolean" }
  | { type: "string"; choices?: readonly string[] }
  /** HOST:PORT, a head's address (checkAddress). */
  | { type: "address" }
  | { type: "strings" }
  | { type: "integer"; min?: number; max?: number }
  | { type: "number"; min?: number; max?: number }
  | { type: "integers"; min?: number; max?: number }
  /** A JSON object of name to non-negative number, e.g. '{"sandbox": 4}'. */
  | { type: "resources" };

type FlagValue<S extends FlagSpec> = S extends { type: "boolean" }
  ? boolean
  : S extends { type: "string"; choices: readonly (infer C)[] }
    ? C
    : S extends { type: "string" | "address" }
      ? string
      : S extends { type: "strings" }
        ? string[]
        : S extends { type: "integer" | "number" }
          ? number
          : S extends { type: "integers" }
            ? number[]
            : Record<string, number>;

export type FlagValues<T extends Record<string, FlagSpec>> = { -readonly [K in keyof T]?: FlagValue<T[K]> };

/** parseArgs' messages say "option"; ours name the flag the way the user typed it. */
function usageErrorFrom(e: { code?: string; message: string }): UsageError {
  const flag = /'(--?[^' <]+)/.exec(e.message)?.[1];
  switch (e.code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return new UsageError(`unknown flag ${flag ?? e.message}`);
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL":
      return new UsageError(`unexpected argument '${/'([^']*)'/.exec(e.message)?.[1] ?? ""}'`);
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      if (/does not take an argument/.test(e.message)) return new UsageError(`${flag} takes no value`);
      if (/ambiguous/.test(e.message))
        return new UsageError(`${flag} needs a value; a value starting with '-' is written ${flag}=VALUE`);
      return new UsageError(`${flag} needs a value (write ${flag} VALUE or ${flag}=VALUE)`);
    default:
      return new UsageError(e.message);
  }
}

function toNumber(flag: string, raw: string, spec: { min?: number; max?: number }, integer: boolean): number {
  const n = raw.trim() === "" ? Number.NaN : Number(raw);
  const kind = integer ? "an integer" : "a number";
  const range =
    spec.min !== undefined && spec.max !== undefined
      ? ` in [${spec.min}, ${spec.max}]`
      : spec.min !== undefined
        ? ` >= ${spec.min}`
        : spec.max !== undefined
          ? ` <= ${spec.max}`
          : "";
  if (
    !Number.isFinite(n) ||
    (integer && !Number.isInteger(n)) ||
    (spec.min !== undefined && n < spec.min) ||
    (spec.max !== undefined && n > spec.max)
  )
    throw new UsageError(`--${flag} must be ${kind}${range}, got '${raw}'`);
  return n;
}

function toResources(flag: string, raw: string): Record<string, number> {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    throw new UsageError(`--${flag} must be JSON, e.g. '{"sandbox": 4}' (${(e as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new UsageError(`--${flag} must be a JSON object of resource name to amount`);
  for (const [k, v] of Object.entries(value))
    if (typeof v !== "number" || !(v >= 0))
      throw new UsageError(`--${flag}: '${k}' must be a non-negative number`);
  return value as Record<string, number>;
}

/**
 * Parses `args` against `spec`. Positionals (e.g. `key.path=value` overrides or a RUN_DIR) are
 * returned in order when `positionals` is true, and are a UsageError otherwise. Throws UsageError
 * naming the flag for an unknown flag, a missing value or a value of the wrong kind.
 */
export function parseFlags<const T extends Record<string, FlagSpec>>(
  args: string[],
  spec: T,
  options: { positionals?: boolean } = {},
): { flags: FlagValues<T>; positionals: string[] } {
  const nodeOptions: Record<string, { type: "string" | "boolean"; multiple?: boolean }> = {};
  for (const [name, s] of Object.entries(spec))
    nodeOptions[name] =
      s.type === "boolean" ? { type: "boolean" } : { type: "string", multiple: s.type === "strings" };
  // `--n -2` means `--n=-2`: a negative number is a value, never a flag (parseArgs calls it ambiguous).
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i]!.startsWith("--") ? args[i]!.slice(2) : "";
    const next = args[i + 1];
    if (nodeOptions[name]?.type === "string" && next !== undefined && /^-\d|^-\.\d/.test(next)) {
      joined.push(`${args[i]}=${next}`);
      i++;
    } else joined.push(args[i]!);
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: joined,
      options: nodeOptions,
      allowPositionals: !!options.positionals,
      strict: true,
    });
  } catch (e) {
    throw usageErrorFrom(e as { code?: string; message: string });
  }
  const flags: Record<string, unknown> = {};
  for (const [name, raw] of Object.entries(parsed.values)) {
    const s = spec[name]!;
    if (raw === undefined) continue;
    if (s.type === "boolean" || s.type === "strings") flags[name] = raw;
    else {
      const text = raw as string;
      if (s.type === "string") {
        if (s.choices && !s.choices.includes(text))
          throw new UsageError(`--${name} must be one of ${s.choices.join(", ")}; got '${text}'`);
        flags[name] = text;
      } else if (s.type === "address") flags[name] = checkAddress(`--${name}`, text);
      else if (s.type === "integer" || s.type === "number")
        flags[name] = toNumber(name, text, s, s.type === "integer");
      else if (s.type === "integers")
        flags[name] = text.split(",").map((part) => toNumber(name, part, s, true));
      else flags[name] = toResources(name, text);
    }
  }
  return { flags: flags as FlagValues<T>, positionals: parsed.positionals };
}

/**
 * The head a command talks to: --address, else TORL_ADDRESS, else the head last started on this
 * machine; none of them is a UsageError.
 */
export function headAddressFrom(flag: string | undefined): string {
  const fromEnv = process.env.TORL_ADDRESS?.trim();
  const address = flag ?? (fromEnv ? checkAddress("TORL_ADDRESS", fromEnv) : lastHeadAddress());
  if (!address) throw new UsageError("no head address: give --address HOST:PORT (no head was started here)");
  return address;
}
