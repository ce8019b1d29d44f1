/**
 * The documents a user reads (README.md, docs/ without the generated API pages, and every README under
 * packages/ and examples/) speak to users: they name code by commit and machines by what they are, never
 * by the internal history of the work (which session or round wrote the code, whose runs loaded the
 * machine that day, figures "in the issue notes").
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import test from "ava";

const ROOT = join(import.meta.dirname, "..");

/** Words that date or place a result by the history of the work, each with what to write instead. */
const INTERNAL_HISTORY: ReadonlyArray<[RegExp, string]> = [
  [/\bsessions?\s*\d/i, "name the commit"],
  [/\b(?:this|that|last|next|previous|earlier|later) session\b/i, "name the commit"],
  [/\bissue notes?\b/i, "put the figure in the docs"],
  [/\bhelpers?'s\b|\bhelpers'/i, "say what loaded the machine"],
  [/\b(?:first|second|third|fourth|fifth|last|previous|next) (?:round|wave)\b/i, "name the commit"],
  [/\bwaves?\s*\d/i, "name the commit"],
  [/\bround of (?:work|fixes|changes)\b/i, "name the commit"],
  [/\bthis sitting\b/i, "say when by commit"],
  [/\bthat day\b/i, "say what the machine was doing"],
  [/\bthe lead's\b/i, "say what was measured, and where"],
  [/\bafter the merge\b/i, "name the commit"],
];

const SKIP_DIRS = new Set(["node_modules", "dist", ".git", "api"]);

function markdownUnder(dir: string, keep: (name: string) => boolean): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (!SKIP_DIRS.has(e.name)) out.push(...markdownUnder(p, keep));
    } else if (e.isFile() && keep(e.name)) out.push(p);
  }
  return out;
}

/** The user documents: README.md, docs/**\/*.md except docs/api/, README*.md under packages/ and examples/. */
function userDocuments(root = ROOT): string[] {
  const readme = (n: string) => /^README.*\.md$/i.test(n);
  return [
    join(root, "README.md"),
    ...markdownUnder(join(root, "docs"), (n) => n.endsWith(".md")),
    ...markdownUnder(join(root, "packages"), readme),
    ...markdownUnder(join(root, "examples"), readme),
  ];
}

/** Every line of `text` that matches a pattern (its first match), as `file:line: words (what to write instead)`. */
function historyLines(file: string, text: string): string[] {
  const hits: string[] = [];
  text.split("\n").forEach((line, i) => {
    for (const [re, instead] of INTERNAL_HISTORY) {
      const m = re.exec(line);
      if (m) {
        hits.push(`${file}:${i + 1}: "${m[0]}" (${instead})`);
        break;
      }
    }
  });
  return hits;
}

test("the user documents date nothing by internal history (sessions, rounds, helpers, issue notes)", (t) => {
  const files = userDocuments();
  t.true(files.length > 10, `${files.length} documents found`);
  for (const f of [
    "README.md",
    "docs/gpus.md",
    "packages/verl-ts/README.md",
    "examples/torl/README-pretrain.md",
  ])
    t.true(files.includes(join(ROOT, f)), `${f} is scanned`);
  t.false(
    files.some((f) => relative(ROOT, f).startsWith(join("docs", "api"))),
    "docs/api (generated) is not scanned",
  );
  const hits = files.flatMap((f) => historyLines(relative(ROOT, f), readFileSync(f, "utf8")));
  t.deepEqual(hits, [], `internal history in user documents:\n${hits.join("\n")}`);
});

test("the scan names file and line, and passes what users may read", (t) => {
  t.deepEqual(historyLines("x.md", "ok\nOn session 6's code it ran"), [
    `x.md:2: "session 6" (name the commit)`,
  ]);
  t.deepEqual(historyLines("y.md", "figures are in the issue notes"), [
    `y.md:1: "issue notes" (put the figure in the docs)`,
  ]);
  for (const bad of [
    "sessions 6-8",
    "while eight helpers' test runs loaded it",
    "the helper's runs",
    "the second round of fixes",
    "a third wave",
    "measured in this sitting",
    "Earlier that day",
  ])
    t.is(historyLines("z.md", bad).length, 1, bad);
  for (const fine of [
    "daemons in their own session die too",
    "the timing helpers the model uses",
    "the call in this round's text",
    "When a round of generation hits the stop string",
    "commit 6c2aaf5 on a 2-core AMD EPYC guest",
  ])
    t.deepEqual(historyLines("z.md", fine), [], fine);
});
