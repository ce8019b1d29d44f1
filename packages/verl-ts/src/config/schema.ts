import { InputError } from "@torl-ts/core";
import { isMap, isScalar, type Node, parseDocument, type YAMLMap } from "yaml";

/** One accepted type of a config key. */
export type ConfigTypeSpec =
  | { kind: "int" | "float" | "bool" | "string" | "any" | "null" | "map" }
  | { kind: "list"; of: ConfigTypeSpec[] }
  | { kind: "enum"; values: string[] };

/** A leaf key of the schema: its accepted types, its default, its doc comment, where it was declared. */
export interface ConfigKeySpec {
  key: string;
  types: ConfigTypeSpec[];
  default: unknown;
  doc?: string;
  source: string;
  /**
   * Set for a key this implementation does not support: what to do instead. Such a key is accepted only
   * at its default (checkUnsupportedKeys refuses anything else, quoting this text).
   */
  unsupported?: string;
}

export type ConfigNode = { [key: string]: unknown };

/** A key-level problem found while loading or validating a config. */
export interface ConfigIssue {
  key: string;
  message: string;
}

/** A bad config: unknown keys, wrong types, bad override syntax, unreadable files. Lists every issue. */
export class TrainerConfigError extends InputError {
  override name = "TrainerConfigError";
  constructor(readonly issues: ConfigIssue[]) {
    super(
      issues.length === 1
        ? `invalid config: ${issues[0]!.message}`
        : `invalid config (${issues.length} problems):\n${issues.map((i) => `  - ${i.message}`).join("\n")}`,
    );
  }
}

export function formatConfigType(types: ConfigTypeSpec[]): string {
  return types
    .map((t) => {
      if (t.kind === "list") return t.of.length ? `list[${formatConfigType(t.of)}]` : "list";
      if (t.kind === "enum") return `one of ${t.values.map((v) => JSON.stringify(v)).join(", ")}`;
      if (t.kind === "map") return "a map";
      return t.kind;
    })
    .join(" | ");
}

/** Parses "int | null", "list[string]", "enum(a, b)" ... */
export function parseConfigType(spec: string, where = "type"): ConfigTypeSpec[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of spec) {
    if (ch === "(" || ch === "[") depth++;
    if (ch === ")" || ch === "]") depth--;
    if (ch === "|" && depth === 0) {
      parts.push(cur);
      cur = "";
    } else cur += ch;
  }
  parts.push(cur);
  return parts.map((raw) => {
    const p = raw.trim();
    if (["int", "float", "bool", "string", "any", "null", "map"].includes(p)) {
      return { kind: p } as ConfigTypeSpec;
    }
    if (p === "list") return { kind: "list", of: [] };
    const list = /^list\[(.*)\]$/.exec(p);
    if (list) return { kind: "list", of: parseConfigType(list[1]!, where) };
    const en = /^enum\((.*)\)$/.exec(p);
    if (en) return { kind: "enum", values: en[1]!.split(",").map((s) => s.trim()) };
    throw new Error(`${where}: cannot read type "${p}"`);
  });
}

const INTERP_FULL = /^\$\{([A-Za-z0-9_.-]+)\}$/;

function inferType(value: unknown, token: string): ConfigTypeSpec[] {
  if (value === null) return [{ kind: "any" }, { kind: "null" }];
  if (typeof value === "boolean") return [{ kind: "bool" }];
  if (typeof value === "number") return [{ kind: /^[-+]?[0-9]+$/.test(token.trim()) ? "int" : "float" }];
  if (typeof value === "string") return [{ kind: "string" }];
  if (Array.isArray(value)) {
    const kinds = new Set(
      value.map((v) => (typeof v === "number" ? "float" : typeof v === "string" ? "string" : "any")),
    );
    const of: ConfigTypeSpec[] =
      kinds.size === 1 ? [{ kind: [...kinds][0] as "float" | "string" | "any" }] : [{ kind: "any" }];
    return [{ kind: "list", of }];
  }
  return [{ kind: "map" }];
}

/** The marker line of a doc comment that makes a key (or a whole section) refused unless at its default. */
const UNSUPPORTED_MARK = /^\s*unsupported:\s*/;

/** The marker line that makes a sub-section of an unsupported section act after all. */
const SUPPORTED_MARK = /^\s*supported\s*$/;

/**
 * Splits a doc comment into its documentation and the text after an "unsupported:" line; a "supported"
 * line gives "" (the key or section acts even inside an unsupported section).
 */
function splitDoc(comment: string | undefined): { doc?: string; unsupported?: string } {
  if (!comment) return {};
  const lines = comment.split("\n").map((l) => l.replace(/^\s*#?\s?/, ""));
  const supported = lines.findIndex((l) => SUPPORTED_MARK.test(l));
  if (supported >= 0)
    return {
      doc:
        lines
          .filter((_, i) => i !== supported)
          .join("\n")
          .trim() || undefined,
      unsupported: "",
    };
  const at = lines.findIndex((l) => UNSUPPORTED_MARK.test(l));
  if (at < 0) return { doc: lines.join("\n").trim() || undefined };
  const doc = lines.slice(0, at).join("\n").trim();
  const unsupported = [lines[at]!.replace(UNSUPPORTED_MARK, ""), ...lines.slice(at + 1)].join(" ").trim();
  return { doc: doc || undefined, unsupported };
}

function typeComment(node: Node | null | undefined): string | undefined {
  const c = (node as { comment?: string } | null)?.comment;
  const m = c ? /type:\s*(.+)$/m.exec(c) : null;
  return m ? m[1]!.trim() : undefined;
}

/**
 * The set of known config keys, read from a defaults YAML. Types come from the defaults (and from
 * "# type: ..." comments), the comment lines above a key are its documentation. A comment line
 * "unsupported: <what to do instead>" above a key (or a section: every key below it) marks what this
 * implementation refuses unless left at its default; a line "supported" above a key or sub-section of
 * such a section makes it act again. Extend it with more defaults YAML (a recipe's own
 * keys) via `extend`.
 */
export class ConfigSchema {
  private constructor(
    private readonly specs: Map<string, ConfigKeySpec>,
    private readonly sections: Set<string>,
  ) {}

  static fromYaml(text: string, source = "<defaults>"): ConfigSchema {
    return new ConfigSchema(new Map(), new Set()).extend(text, source);
  }

  /** A new schema with the keys of `text` added (a key declared again takes the new default/type). */
  extend(text: string, source = "<extension>"): ConfigSchema {
    const specs = new Map(this.specs);
    const sections = new Set(this.sections);
    const doc = parseDocument(text);
    if (doc.errors.length) throw new Error(`${source}: ${doc.errors[0]!.message}`);
    const walk = (map: YAMLMap, prefix: string, inherited: string | undefined) => {
      map.items.forEach((pair, i) => {
        const k = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
        const key = prefix ? `${prefix}.${k}` : k;
        const node = pair.value as Node | null;
        // the comment above a map's first key is attached to the map itself
        const before =
          (pair.key as { commentBefore?: string } | null)?.commentBefore ??
          (i === 0 ? map.commentBefore : undefined);
        const { doc, unsupported: own } = splitDoc(before ?? undefined);
        const declared = typeComment(node);
        if (isMap(node) && node.items.length > 0 && !declared) {
          if (specs.has(key))
            throw new Error(`${source}: "${key}" is a key in the schema, cannot make it a section`);
          sections.add(key);
          walk(node, key, own ?? inherited);
          return;
        }
        if (sections.has(key))
          throw new Error(`${source}: "${key}" is a section in the schema, cannot make it a key`);
        const value = node ? (node.toJSON() as unknown) : null;
        const token = node?.range ? text.slice(node.range[0], node.range[1]) : "";
        let types: ConfigTypeSpec[];
        if (declared) types = parseConfigType(declared, `${source}: ${key}`);
        else if (typeof value === "string" && INTERP_FULL.test(value))
          types = [{ kind: "any" }]; // resolved below
        else types = inferType(value, token);
        const unsupported = own ?? inherited;
        specs.set(key, { key, types, default: value, doc, source, ...(unsupported ? { unsupported } : {}) });
        for (let p = key.lastIndexOf("."); p > 0; p = key.lastIndexOf(".", p - 1))
          sections.add(key.slice(0, p));
      });
    };
    if (isMap(doc.contents)) walk(doc.contents, "", undefined);
    else if (doc.contents !== null) throw new Error(`${source}: the defaults must be a YAML mapping`);
    // Interpolated defaults ("${a.b}") take the type of the key they point at.
    for (const spec of specs.values()) {
      const m = typeof spec.default === "string" ? INTERP_FULL.exec(spec.default) : null;
      if (m && spec.types.length === 1 && spec.types[0]!.kind === "any") {
        const seen = new Set([spec.key]);
        let target = specs.get(m[1]!);
        while (target && typeof target.default === "string" && INTERP_FULL.test(target.default)) {
          const next = INTERP_FULL.exec(target.default)![1]!;
          if (seen.has(next)) break;
          seen.add(next);
          target = specs.get(next);
        }
        if (target && !(target.types.length === 1 && target.types[0]!.kind === "any")) {
          spec.types = target.types;
        }
      }
    }
    return new ConfigSchema(specs, sections);
  }

  /** All leaf keys, dotted. */
  keys(): string[] {
    return [...this.specs.keys()];
  }

  get(key: string): ConfigKeySpec | undefined {
    return this.specs.get(key);
  }

  isSection(key: string): boolean {
    return this.sections.has(key);
  }

  /** The defaults as a nested object (a fresh copy). */
  defaults(): ConfigNode {
    const out: ConfigNode = {};
    for (const s of this.specs.values()) setPath(out, s.key, structuredClone(s.default));
    return out;
  }

  /**
   * The known key `key` most likely stands for, for "did you mean" hints: the same key under another
   * section (rollout.n: actor_rollout_ref.rollout.n), a typo of its last part or of the whole key
   * (within typoLimit edits); undefined when none is that close.
   */
  suggest(key: string): string | undefined {
    const leaf = key.slice(key.lastIndexOf(".") + 1);
    const all = [...this.specs.keys(), ...this.sections];
    let best: string | undefined;
    let bestScore = Infinity;
    for (const k of all) {
      const kLeaf = k.slice(k.lastIndexOf(".") + 1);
      const leafEdits = editDistance(leaf, kLeaf);
      const keyEdits = editDistance(key, k);
      const scores = [
        k.endsWith(`.${key}`) ? 0 : Infinity,
        // the leaf elsewhere, or a typo of it: ranked after a typo of the whole key of as many edits
        leafEdits <= typoLimit(leaf) ? leafEdits + (kLeaf === leaf ? 1 : 2) : Infinity,
        keyEdits <= typoLimit(key) ? keyEdits : Infinity,
      ];
      const score = Math.min(...scores);
      if (score < bestScore) {
        bestScore = score;
        best = k;
      }
    }
    return best;
  }

  /**
   * Checks `cfg` against the schema: every leaf is a known key with an accepted type (free-form maps
   * take anything below them). Strings that hold numbers are not coerced; numbers and booleans given to
   * a string key are turned into strings. Returns the issues (empty when the config is valid).
   */
  validate(cfg: ConfigNode, allowExtra: ReadonlySet<string> = new Set()): ConfigIssue[] {
    const issues: ConfigIssue[] = [];
    const visit = (node: ConfigNode, prefix: string) => {
      for (const [k, value] of Object.entries(node)) {
        const key = prefix ? `${prefix}.${k}` : k;
        if ([...allowExtra].some((e) => key === e || key.startsWith(`${e}.`))) continue;
        const spec = this.specs.get(key);
        if (spec) {
          const r = checkValue(value, spec.types);
          if (r.ok) node[k] = r.value;
          else {
            issues.push({
              key,
              message: `${key} expects ${formatConfigType(spec.types)}, got ${describeValue(value)}`,
            });
          }
        } else if (this.sections.has(key)) {
          if (!isPlainObject(value)) {
            const below = this.keys()
              .filter((s) => s.startsWith(`${key}.`))
              .map((s) => s.slice(key.length + 1).split(".")[0]!);
            issues.push({
              key,
              message: `${key} is a section (keys: ${[...new Set(below)].join(", ")}), got ${describeValue(value)}`,
            });
          } else visit(value, key);
        } else if (isPlainObject(value) && Object.keys(value).length > 0) {
          visit(value, key); // report the unknown leaves below, each with its own hint
        } else {
          const hint = this.suggest(key);
          issues.push({ key, message: `unknown key "${key}"${hint ? ` (did you mean "${hint}"?)` : ""}` });
        }
      }
    };
    visit(cfg, "");
    return issues;
  }
}

function isPlainObject(v: unknown): v is ConfigNode {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A value as a message shows it: its kind and text (NaN and the infinities as such, not JSON's null). */
export function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "number" && !Number.isFinite(v)) return `${v} (not a finite number)`;
  if (Array.isArray(v)) return `a list ${jsonText(v)}`;
  if (typeof v === "object") return "a map";
  return `${typeof v} ${JSON.stringify(v)}`;
}

const NON_FINITE = "\u0000non-finite:";

/** JSON text, but with NaN and the infinities written as such (JSON.stringify writes null). */
function jsonText(v: unknown): string {
  const text = JSON.stringify(v, (_, x) =>
    typeof x === "number" && !Number.isFinite(x) ? `${NON_FINITE}${x}` : x,
  );
  return text.replace(/"\\u0000non-finite:(NaN|-?Infinity)"/g, "$1");
}

function checkValue(v: unknown, types: ConfigTypeSpec[]): { ok: true; value: unknown } | { ok: false } {
  for (const t of types) {
    const r = checkOne(v, t);
    if (r.ok) return r;
  }
  // a number or boolean given to a string key becomes that string
  if (typeof v === "number" || typeof v === "boolean") {
    if (types.some((t) => t.kind === "string")) return { ok: true, value: String(v) };
    const en = types.find((t) => t.kind === "enum") as { values: string[] } | undefined;
    if (en?.values.includes(String(v))) return { ok: true, value: String(v) };
  }
  return { ok: false };
}

function checkOne(v: unknown, t: ConfigTypeSpec): { ok: true; value: unknown } | { ok: false } {
  const ok = { ok: true as const, value: v };
  if (typeof v === "string" && /\$\{[^}]+\}/.test(v)) return ok; // interpolation, checked after resolution
  switch (t.kind) {
    case "any":
      return ok;
    case "null":
      return v === null ? ok : { ok: false };
    case "int":
      return typeof v === "number" && Number.isInteger(v) ? ok : { ok: false };
    case "float":
      return typeof v === "number" && Number.isFinite(v) ? ok : { ok: false };
    case "bool":
      return typeof v === "boolean" ? ok : { ok: false };
    case "string":
      return typeof v === "string" ? ok : { ok: false };
    case "map":
      return isPlainObject(v) ? ok : { ok: false };
    case "enum":
      return typeof v === "string" && t.values.includes(v) ? ok : { ok: false };
    case "list": {
      if (!Array.isArray(v)) return { ok: false };
      if (t.of.length === 0) return ok;
      const out: unknown[] = [];
      for (const e of v) {
        const r = checkValue(e, t.of);
        if (!r.ok) return { ok: false };
        out.push(r.value);
      }
      return { ok: true, value: out };
    }
  }
}

export function getPath(node: ConfigNode, key: string): unknown {
  let cur: unknown = node;
  for (const part of key.split(".")) {
    if (!isPlainObject(cur) || !(part in cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

export function hasPath(node: ConfigNode, key: string): boolean {
  let cur: unknown = node;
  for (const part of key.split(".")) {
    if (!isPlainObject(cur) || !(part in cur)) return false;
    cur = cur[part];
  }
  return true;
}

export function setPath(node: ConfigNode, key: string, value: unknown): void {
  const parts = key.split(".");
  let cur = node;
  for (const part of parts.slice(0, -1)) {
    if (!isPlainObject(cur[part])) cur[part] = {};
    cur = cur[part] as ConfigNode;
  }
  cur[parts[parts.length - 1]!] = value;
}

/** The edits a typo of `name` may hold: one per three letters, at least one. */
export function typoLimit(name: string): number {
  return Math.max(1, Math.floor(name.length / 3));
}

/**
 * The known name that `name` is most likely a typo of: within typoLimit(name) edits (a swap of two
 * letters is one), or a prefix of it, or it of `name`, of three letters or more (tir_base of
 * tir_base_0309); undefined when none is that close, for a hint to a name that is no typo misleads
 * ("nope" is two edits from "opo").
 */
export function closestName(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestScore = Infinity;
  for (const k of known) {
    const prefix = Math.min(k.length, name.length) >= 3 && (k.startsWith(name) || name.startsWith(k));
    const edits = prefix ? 1 : editDistance(name, k);
    if (edits <= typoLimit(name) && edits < bestScore) {
      bestScore = edits;
      best = k;
    }
  }
  return best;
}

/** ` (did you mean "<closest>"?)` after a message that lists the choices, or "" when none is close. */
export function didYouMean(name: string, known: readonly string[]): string {
  const c = closestName(name, known);
  return c === undefined ? "" : ` (did you mean "${c}"?)`;
}

export function editDistance(a: string, b: string): number {
  // optimal string alignment: insert, delete, substitute, or swap two adjacent letters, each costs 1
  // (a swap is the commonest typo: "gpro" is one edit from "grpo", two from "gpg")
  let before = new Array<number>(b.length + 1).fill(0);
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, before[j - 2]! + 1);
      cur.push(d);
    }
    before = prev;
    prev = cur;
  }
  return prev[b.length]!;
}

export { isPlainObject as isConfigNode };
