import { readFileSync } from "node:fs";
import { parse, parseDocument, stringify } from "yaml";
import {
  type ConfigIssue,
  type ConfigNode,
  ConfigSchema,
  getPath,
  hasPath,
  isConfigNode,
  setPath,
  TrainerConfigError,
} from "./schema.js";
import type { TrainerConfig } from "./types.js";

const DEFAULTS_URL = new URL("./ppo-trainer.yaml", import.meta.url);
let builtin: ConfigSchema | undefined;

/** The schema of the built-in defaults (ppo-trainer.yaml next to this file: veRL's keys plus ToRL's). */
export function trainerConfigSchema(): ConfigSchema {
  builtin ??= ConfigSchema.fromYaml(readFileSync(DEFAULTS_URL, "utf8"), DEFAULTS_URL.pathname);
  return builtin;
}

/** One `a.b.c=value` override; `+a.b.c=value` adds a key the schema does not know. */
export interface ConfigOverride {
  key: string;
  value: unknown;
  add: boolean;
}

/**
 * Parses `a.b.c=value` arguments. The value is read as YAML, so `1e-6` is a number, `true` a boolean,
 * `[a,b]` a list, `null` null, and anything else a string.
 */
export function parseConfigOverrides(args: readonly string[]): ConfigOverride[] {
  const issues: ConfigIssue[] = [];
  const out: ConfigOverride[] = [];
  for (const arg of args) {
    const eq = arg.indexOf("=");
    const rawKey = eq < 0 ? arg : arg.slice(0, eq);
    const add = rawKey.startsWith("+");
    const key = add ? rawKey.slice(1) : rawKey;
    if (eq < 0 || !/^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$/.test(key)) {
      issues.push({ key: arg, message: `cannot read override "${arg}" (expected key.path=value)` });
      continue;
    }
    const text = arg.slice(eq + 1);
    let value: unknown;
    try {
      value = text === "" ? "" : parse(text);
    } catch {
      value = text;
    }
    out.push({ key, value, add });
  }
  if (issues.length) throw new TrainerConfigError(issues);
  return out;
}

/** Splits CLI arguments into YAML files (ending .yaml/.yml) and `k=v` overrides. */
export function splitConfigArgs(args: readonly string[]): { files: string[]; overrides: string[] } {
  const files: string[] = [];
  const overrides: string[] = [];
  for (const a of args) (/\.ya?ml$/i.test(a) && !a.includes("=") ? files : overrides).push(a);
  return { files, overrides };
}

/** Deep merge: maps merge key by key, anything else (lists too) replaces. Returns `base`. */
export function mergeConfig(base: ConfigNode, over: ConfigNode): ConfigNode {
  for (const [k, v] of Object.entries(over)) {
    if (isConfigNode(v) && isConfigNode(base[k])) mergeConfig(base[k] as ConfigNode, v);
    else base[k] = structuredClone(v);
  }
  return base;
}

/** Reads a YAML config file; a syntax error names the file and line. */
export function readConfigFile(path: string): ConfigNode {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new TrainerConfigError([
      { key: path, message: `cannot read config file ${path}: ${(e as Error).message}` },
    ]);
  }
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length) {
    const e = doc.errors[0]!;
    const line = e.linePos?.[0]?.line;
    throw new TrainerConfigError([
      {
        key: path,
        message: `${path}${line ? `:${line}` : ""}: YAML syntax error: ${e.message.split("\n")[0]}`,
      },
    ]);
  }
  const v = doc.toJSON() as unknown;
  if (v === null || v === undefined) return {};
  if (!isConfigNode(v))
    throw new TrainerConfigError([{ key: path, message: `${path}: the top level must be a map` }]);
  return v;
}

export interface LoadTrainerConfigOptions {
  /** The schema (defaults + types); the built-in trainer schema when omitted. */
  schema?: ConfigSchema;
  /** User YAML files, merged over the defaults in order. */
  files?: readonly string[];
  /** An object merged after the files (programmatic configs). */
  values?: ConfigNode;
  /** `a.b.c=value` overrides, applied last. */
  overrides?: readonly string[];
}

/**
 * Builds the trainer config: defaults, then each YAML file, then `values`, then the overrides; then
 * checks every key and type (all problems reported at once, each naming the key, what it accepts and a
 * "did you mean" hint) and resolves "${a.b}" references. Throws TrainerConfigError.
 */
export function loadTrainerConfig(opts: LoadTrainerConfigOptions = {}): TrainerConfig {
  const schema = opts.schema ?? trainerConfigSchema();
  const cfg = schema.defaults();
  for (const f of opts.files ?? []) mergeConfig(cfg, readConfigFile(f));
  if (opts.values) mergeConfig(cfg, opts.values);
  const added = new Set<string>();
  for (const o of parseConfigOverrides(opts.overrides ?? [])) {
    if (o.add) {
      if (schema.get(o.key) || hasPath(cfg, o.key)) {
        throw new TrainerConfigError([
          { key: o.key, message: `+${o.key}: the key already exists, override it without "+"` },
        ]);
      }
      added.add(o.key);
    }
    setPath(cfg, o.key, o.value);
  }
  let issues = schema.validate(cfg, added);
  if (issues.length) throw new TrainerConfigError(issues);
  issues = resolveInterpolations(cfg);
  if (issues.length) throw new TrainerConfigError(issues);
  issues = schema.validate(cfg, added);
  if (issues.length) throw new TrainerConfigError(issues);
  return cfg as TrainerConfig;
}

const INTERP = /\$\{([A-Za-z0-9_.-]+)\}/g;

/** Replaces "${a.b}" strings in place: a whole-string reference takes the value itself (any type). */
export function resolveInterpolations(cfg: ConfigNode): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const resolving = new Set<string>();
  const resolveKey = (key: string): unknown => {
    const v = getPath(cfg, key);
    if (typeof v !== "string" || !v.includes("${")) return v;
    if (resolving.has(key)) throw new Error(`circular reference through ${[...resolving, key].join(" -> ")}`);
    resolving.add(key);
    try {
      const full = /^\$\{([A-Za-z0-9_.-]+)\}$/.exec(v);
      const lookup = (ref: string) => {
        if (!hasPath(cfg, ref)) throw new Error(`${key} refers to \${${ref}}, which is not a key`);
        return resolveKey(ref);
      };
      const out = full ? lookup(full[1]!) : v.replace(INTERP, (_, ref: string) => String(lookup(ref)));
      setPath(cfg, key, out);
      return out;
    } finally {
      resolving.delete(key);
    }
  };
  const visit = (node: ConfigNode, prefix: string) => {
    for (const [k, v] of Object.entries(node)) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (isConfigNode(v)) visit(v, key);
      else if (typeof v === "string" && v.includes("${")) {
        try {
          resolveKey(key);
        } catch (e) {
          issues.push({ key, message: (e as Error).message });
        }
      }
    }
  };
  visit(cfg, "");
  return issues;
}

/** The value at a dotted key of a loaded config (undefined when absent). */
export function configValue<T = unknown>(cfg: TrainerConfig | ConfigNode, key: string): T {
  return getPath(cfg as ConfigNode, key) as T;
}

/** YAML text of a config (for writing next to a run). */
export function configToYaml(cfg: TrainerConfig | ConfigNode): string {
  return stringify(cfg);
}
