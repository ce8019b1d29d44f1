/**
 * docs/configuration.md is the schema's: every key with its type, default and state (acts, or refused
 * unless at its default), the recipe's torl.* keys included; and a key the page says acts is read by
 * some code.
 */
import { readFileSync } from "node:fs";
import { ConfigSchema, sftConfigSchema } from "@torl-ts/verl";
import test from "ava";
import { configReference, keyState, sftConfigReference } from "../src/config-reference.js";
import { recipeConfigSchema } from "../src/recipe.js";
import { readsKey, unreadKeys } from "./config-reads.js";

const committed = () => readFileSync(new URL("../../../docs/configuration.md", import.meta.url), "utf8");

test("docs/configuration.md is what the schema generates: every key, the recipe's torl.* ones too", (t) => {
  // compared modulo table padding, so formatting the page with biome keeps it valid
  const normalize = (md: string) =>
    md
      .split("\n")
      .map((l) => l.replace(/ +/g, " ").replace(/-{3,}/g, "---").trimEnd())
      .join("\n");
  t.is(
    normalize(committed()),
    normalize(configReference()),
    "regenerate: pnpm tsx examples/torl/src/config-reference.ts > docs/configuration.md && pnpm biome format --write docs",
  );
  const keys = recipeConfigSchema().keys();
  t.true(keys.length > 200);
  t.true(keys.includes("torl.data"));
  for (const key of keys)
    t.regex(committed(), new RegExp(`^\\| \`${key.replace(/\./g, "\\.")}\` +\\|`, "m"), key);
});

test("every key has a meaning, and every refused key says what to do instead", (t) => {
  const page = committed();
  for (const row of page.split("\n").filter((l) => l.startsWith("| `"))) {
    const cells = row.split(/(?<!\\)\|/).map((c) => c.trim());
    t.not(cells[5], "", `no meaning: ${cells[1]}`);
    if (cells[4] === "**refused**") t.regex(cells[5]!, /^not supported here: .{10,}/, cells[1]!);
  }
});

test("a key the reference says acts is read by some code", (t) => {
  const schema = recipeConfigSchema();
  const acting = schema.keys().filter((k) => keyState(schema.get(k)!) === "acts");
  t.true(acting.length > 100);
  t.deepEqual(unreadKeys(schema, acting), []);
});

test("the read check finds a key nobody reads, and follows defaults that refer to other keys", (t) => {
  const schema = ConfigSchema.fromYaml(
    // biome-ignore lint/suspicious/noTemplateCurlyInString: YAML's interpolation syntax
    "a:\n  used: 1\n  unused: 2\n  alias: ${b.target}\nb:\n  target: 3\n  lonely: 4\n",
  );
  const sources = [{ text: "const x = cfg.a.used + cfg.a.alias;" }];
  t.deepEqual(unreadKeys(schema, schema.keys(), sources), ["a.unused", "b.lonely"]);
  t.true(readsKey("const s = cfg.trainer; s.logger.includes('x')", "trainer.logger"));
  t.false(readsKey("cfg.trainer.logger = ['console'];", "trainer.logger"), "a write is no read");
  t.false(readsKey("const c = opts.logger;", "trainer.logger"), "the section is never mentioned");
});

test("docs/sft.md is what the SFT trainer's schema generates; each key has a meaning and is read by some code", (t) => {
  const normalize = (md: string) =>
    md
      .split("\n")
      .map((l) => l.replace(/ +/g, " ").replace(/-{3,}/g, "---").trimEnd())
      .join("\n");
  const page = readFileSync(new URL("../../../docs/sft.md", import.meta.url), "utf8");
  t.is(
    normalize(page),
    normalize(sftConfigReference()),
    "regenerate: pnpm tsx examples/torl/src/config-reference.ts --sft > docs/sft.md && pnpm biome format --write docs",
  );
  const schema = sftConfigSchema();
  for (const key of schema.keys()) t.truthy(schema.get(key)!.doc, `no meaning: ${key}`);
  t.deepEqual(unreadKeys(schema, schema.keys()), []);
});
