import { readFileSync } from "node:fs";
import { parse, parseDocument, stringify } from "yaml";
import {
  type ConfigIssue,
  type ConfigNode,
  ConfigSchema,
  describeValue,
  didYouMean,
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

const LOAD_OPTIONS = ["schema", "files", "values", "overrides"] as const;

/**
 * Throws TrainerConfigError for options a loader (`fn`, taking `known`) would read wrongly: a misspelt
 * name (it would be ignored), a string where a list of strings goes (it would be read letter by
 * letter), `values` that is not a map, `schema` that is not a ConfigSchema.
 */
export function checkLoadOptions(opts: unknown, fn: string, known: readonly string[]): void {
  if (typeof opts !== "object" || opts === null || Array.isArray(opts)) {
    throw new TrainerConfigError([
      {
        key: fn,
        message: `${fn} takes an options object { ${known.join(", ")} }, got ${describeValue(opts)}`,
      },
    ]);
  }
  const issues: ConfigIssue[] = [];
  const o = opts as Record<string, unknown>;
  for (const [k, v] of Object.entries(o)) {
    if (!known.includes(k)) {
      const hint = didYouMean(k, known) || ` (its options: ${known.join(", ")})`;
      issues.push({ key: k, message: `unknown option "${k}" of ${fn}${hint}` });
    } else if (v === undefined) continue;
    else if (k === "files" || k === "overrides") {
      if (!Array.isArray(v) || v.some((e) => typeof e !== "string"))
        issues.push({ key: k, message: `${k} must be an array of strings, got ${describeValue(v)}` });
    } else if (k === "values") {
      if (!isConfigNode(v)) issues.push({ key: k, message: `values must be a map, got ${describeValue(v)}` });
    } else if (k === "schema" && !(v instanceof ConfigSchema)) {
      issues.push({
        key: k,
        message: `schema must be a ConfigSchema (trainerConfigSchema() or its extend(...)), got ${describeValue(v)}`,
      });
    }
  }
  if (issues.length) throw new TrainerConfigError(issues);
}

/**
 * Builds the trainer config: defaults, then each YAML file, then `values`, then the overrides; then
 * checks every key and type (all problems reported at once, each naming the key, what it accepts and a
 * "did you mean" hint) and resolves "${a.b}" references and "${oc.env:VAR}" / "${oc.env:VAR,default}"
 * environment variables. Throws TrainerConfigError, also for an unknown option name.
 */
export function loadTrainerConfig(opts: LoadTrainerConfigOptions = {}): TrainerConfig {
  checkLoadOptions(opts, "loadTrainerConfig", LOAD_OPTIONS);
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

/** One "${...}": its body is a key (a.b.c) or a resolver call (oc.env:VAR, oc.env:VAR,default). */
const INTERP = /\$\{([^{}]*)\}/g;
const INTERP_WHOLE = new RegExp(`^${INTERP.source}$`);
const KEY_REF = /^[A-Za-z0-9_.-]+$/;
const RESOLVER_CALL = /^([A-Za-z_][A-Za-z0-9_.]*):(.*)$/s;
// biome-ignore lint/suspicious/noTemplateCurlyInString: the forms an interpolation takes, for messages
const INTERP_FORMS = "${a.b}, ${oc.env:VAR} or ${oc.env:VAR,default}";

/**
 * OmegaConf's oc.env, as veRL configs use it: the variable's value (a string), else the default after
 * the first comma read as a YAML scalar (`null`, `7`, `'a,b'`); unset without a default is an error.
 */
function ocEnv(key: string, args: string): unknown {
  const comma = args.indexOf(",");
  const name = (comma < 0 ? args : args.slice(0, comma)).trim();
  if (!name) throw new Error(`${key}: \${oc.env:${args}} names no environment variable`);
  const value = process.env[name];
  if (value !== undefined) return value;
  if (comma < 0) {
    throw new Error(
      `${key} reads \${oc.env:${name}}, but the environment variable ${name} is not set (give a default after a comma: \${oc.env:${name},default})`,
    );
  }
  const text = args.slice(comma + 1).trim();
  try {
    return text === "" ? "" : parse(text);
  } catch {
    return text;
  }
}

const RESOLVERS = new Map<string, (key: string, args: string) => unknown>([["oc.env", ocEnv]]);

/**
 * Replaces "${a.b}" and "${oc.env:VAR[,default]}" in place: a string that is one of them whole takes
 * the value itself (any type), one inside other text its string form. Anything else inside "${...}"
 * (another resolver, nested or unclosed braces) is an issue naming the key, not text left as it is.
 */
export function resolveInterpolations(cfg: ConfigNode): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const resolving = new Set<string>();
  // a resolved value is final: an environment value holding "${" is text, not read again
  const resolved = new Set<string>();
  const resolveKey = (key: string): unknown => {
    const v = getPath(cfg, key);
    if (resolved.has(key) || typeof v !== "string" || !v.includes("${")) return v;
    if (resolving.has(key)) throw new Error(`circular reference through ${[...resolving, key].join(" -> ")}`);
    resolving.add(key);
    try {
      const unreadable = () =>
        new Error(`${key}: cannot read the interpolation in ${JSON.stringify(v)} (expected ${INTERP_FORMS})`);
      // "${" left once every ${...} is taken out (nested or unclosed) would otherwise stay as text
      if (v.replace(INTERP, "").includes("${")) throw unreadable();
      const value = (body: string): unknown => {
        if (KEY_REF.test(body)) {
          if (!hasPath(cfg, body)) throw new Error(`${key} refers to \${${body}}, which is not a key`);
          return resolveKey(body);
        }
        const call = RESOLVER_CALL.exec(body);
        if (!call) throw unreadable();
        const resolver = RESOLVERS.get(call[1]!);
        if (!resolver) {
          throw new Error(
            `${key} uses the resolver "${call[1]}" (in \${${body}}), which this loader does not have (it has: ${[...RESOLVERS.keys()].join(", ")})`,
          );
        }
        return resolver(key, call[2]!);
      };
      const whole = INTERP_WHOLE.exec(v);
      const out = whole ? value(whole[1]!) : v.replace(INTERP, (_, body: string) => String(value(body)));
      setPath(cfg, key, out);
      resolved.add(key);
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
          const message = (e as Error).message;
          // a key that refers to a broken one fails with its message: report it once
          if (!issues.some((i) => i.message === message)) issues.push({ key, message });
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
