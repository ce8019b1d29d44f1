/**
 * Which config keys some code reads, found in the source text (shared by the configuration tests).
 *
 * A key a.b.leaf counts as read by a source file that reads the property `leaf` (`.leaf` or `?.leaf`
 * not followed by an assignment, or `["leaf"]`) and mentions its section `b` as a word; or when a key
 * that is read has a default that refers to it (`${a.b.leaf}`). The config module itself (schema,
 * loader, checkers) and the reference generator do not count: they read every key to check it. Its
 * derived values (config/derived.ts: world size, mini-batch rows) do: the driver and workers use them.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { ConfigSchema } from "@torl-ts/verl";

const ROOT = new URL("../../../", import.meta.url).pathname;

/** Source files of every package and example, less the config module and the reference generator. */
export function sourceTexts(): { file: string; text: string }[] {
  const out: { file: string; text: string }[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.(ts|mjs)$/.test(name))
        out.push({ file: p.slice(ROOT.length), text: readFileSync(p, "utf8") });
    }
  };
  for (const group of ["packages", "examples"]) {
    for (const pkg of readdirSync(join(ROOT, group))) {
      const src = join(ROOT, group, pkg, "src");
      try {
        if (statSync(src).isDirectory()) walk(src);
      } catch {
        // a package without src/
      }
    }
  }
  const checker = (file: string) =>
    file.startsWith("packages/verl-ts/src/config/") && !file.endsWith("config/derived.ts");
  return out.filter((s) => !checker(s.file) && !s.file.endsWith("config-reference.ts"));
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Whether `text` reads key `key` by the rule above (interpolations aside). */
export function readsKey(text: string, key: string): boolean {
  const parts = key.split(".");
  const leaf = escapeRe(parts.at(-1)!);
  const section = parts.length > 1 ? escapeRe(parts.at(-2)!) : undefined;
  const read = new RegExp(`(?:\\?\\.|\\.)${leaf}\\b(?!\\s*=(?!=))|\\[\\s*"${leaf}"\\s*\\]`);
  return read.test(text) && (section === undefined || new RegExp(`\\b${section}\\b`).test(text));
}

/** The keys of `keys` that no source reads, directly or through a read key's "${...}" default. */
export function unreadKeys(
  schema: ConfigSchema,
  keys: readonly string[],
  sources: { text: string }[] = sourceTexts(),
): string[] {
  const read = new Set(schema.keys().filter((k) => sources.some((s) => readsKey(s.text, k))));
  // a key whose default refers to another makes that one read too (to a fixed point)
  for (let changed = true; changed; ) {
    changed = false;
    for (const k of read) {
      const d = schema.get(k)?.default;
      if (typeof d !== "string") continue;
      for (const m of d.matchAll(/\$\{([A-Za-z0-9_.-]+)\}/g)) {
        if (!read.has(m[1]!)) {
          read.add(m[1]!);
          changed = true;
        }
      }
    }
  }
  return keys.filter((k) => !read.has(k));
}
