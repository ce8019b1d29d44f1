/** The project's files cite no document outside the repository: each says what it means in its own words. */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";

const ROOT = new URL("../../../", import.meta.url).pathname;
/** Documents that live beside the repository (design notes, style notes, a shared folder), not in it. */
const OUTSIDE = /\b(DESIGN|STYLE)\.md\b|\.\.\/shared\b|\bshared\/(data|reference)\b|torl-paper-notes/;

test("no tracked file cites the design or style notes or the shared folder beside the repository", (t) => {
  const files = execFileSync("git", ["ls-files"], { cwd: ROOT, encoding: "utf8" })
    .split("\n")
    .filter((f) => f && !/\.(parquet|safetensors|png|bin)$|pnpm-lock\.yaml$/.test(f));
  t.true(files.length > 100);
  const hits: string[] = [];
  for (const f of files) {
    let text: string;
    try {
      text = readFileSync(join(ROOT, f), "utf8");
    } catch {
      continue; // listed but not checked out (a deleted file in the work tree)
    }
    text.split("\n").forEach((line, i) => {
      if (OUTSIDE.test(line) && f !== "examples/torl/test/no-outside-docs.test.ts")
        hits.push(`${f}:${i + 1}: ${line.trim()}`);
    });
  }
  t.deepEqual(hits, []);
});
