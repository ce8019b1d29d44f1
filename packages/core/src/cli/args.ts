/** Tiny flag parser for the cluster commands: --flag value, --flag=value, boolean --flag. */
import { UsageError } from "../cli-command.js";

export interface FlagSpec {
  [name: string]: "string" | "number" | "boolean" | "json";
}

export function parseFlags(args: string[], spec: FlagSpec): Record<string, any> {
  const out: Record<string, any> = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (!a.startsWith("--")) throw new UsageError(`unexpected argument '${a}'`);
    let [name, value] = a.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    const kind = spec[name];
    if (!kind) throw new UsageError(`unknown flag --${name}`);
    if (kind === "boolean") {
      out[name] = value === undefined ? true : value !== "false";
      continue;
    }
    if (value === undefined) {
      value = args[++i];
      if (value === undefined) throw new UsageError(`--${name} needs a value`);
    }
    if (kind === "number") {
      const n = Number(value);
      if (!Number.isFinite(n) || n < 0)
        throw new UsageError(`--${name} must be a non-negative number, got '${value}'`);
      out[name] = n;
    } else if (kind === "json") {
      try {
        out[name] = JSON.parse(value);
      } catch (e) {
        throw new UsageError(`--${name} must be JSON, e.g. '{"sandbox": 4}' (${(e as Error).message})`);
      }
      if (typeof out[name] !== "object" || out[name] === null || Array.isArray(out[name])) {
        throw new UsageError(`--${name} must be a JSON object of resource name to amount`);
      }
      for (const [k, v] of Object.entries(out[name])) {
        if (typeof v !== "number" || v < 0)
          throw new UsageError(`--${name}: '${k}' must be a non-negative number`);
      }
    } else out[name] = value;
  }
  return out;
}
