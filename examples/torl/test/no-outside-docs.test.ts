/** The project's files cite no document outside the repository: each says what it means in its own words. */
import test from "ava";
import { repositoryFiles } from "./repository-files.js";

/** Documents that live beside the repository (design notes, style notes, a shared folder), not in it. */
const OUTSIDE = /\b(DESIGN|STYLE)\.md\b|\.\.\/shared\b|\bshared\/(data|reference)\b|torl-paper-notes/;

test("no tracked file cites the design or style notes or the shared folder beside the repository", (t) => {
  const files = repositoryFiles((f) => !/\.(parquet|safetensors|png|bin)$|pnpm-lock\.yaml$/.test(f));
  t.true(files.length > 100);
  const hits: string[] = [];
  for (const { file, text } of files)
    text.split("\n").forEach((line, i) => {
      if (OUTSIDE.test(line) && file !== "examples/torl/test/no-outside-docs.test.ts")
        hits.push(`${file}:${i + 1}: ${line.trim()}`);
    });
  t.deepEqual(hits, []);
});
