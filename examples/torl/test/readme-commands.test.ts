/**
 * The commands printed in the examples' READMEs run as written: each one's --help works (exit 0, a
 * usage text), every flag it uses is one its usage documents, every repository path it names exists
 * from the repository root (where the READMEs say to run them), and `pnpm ava` lines name real tests.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const ROOT = new URL("../../../", import.meta.url).pathname;

/** README files whose command blocks are checked. */
function readmes(): string[] {
  const out: string[] = [];
  for (const ex of readdirSync(join(ROOT, "examples")))
    for (const f of readdirSync(join(ROOT, "examples", ex)))
      if (/^README.*\.md$/.test(f)) out.push(join("examples", ex, f));
  return out.sort();
}

/** `pnpm ...` lines of the fenced code blocks, comments dropped. */
export function documentedCommands(markdown: string): string[] {
  const out: string[] = [];
  let inBlock = false;
  for (const line of markdown.split("\n")) {
    if (/^```/.test(line)) {
      inBlock = !inBlock;
      continue;
    }
    const cmd = line.replace(/\s+#.*$/, "").trim();
    if (inBlock && cmd.startsWith("pnpm ")) out.push(cmd);
  }
  return out;
}

/** The node arguments that run a documented command, or undefined for `pnpm ava`. */
function nodeArgs(words: string[]): string[] | undefined {
  if (words[1] === "torl") return ["--import=tsx", "examples/torl/src/cli.ts", ...words.slice(2)];
  if (words[1] === "tsx") return ["--import=tsx", ...words.slice(2)];
  return undefined;
}

const cases = readmes().flatMap((file) =>
  documentedCommands(readFileSync(join(ROOT, file), "utf8")).map((cmd) => ({ file, cmd })),
);

test("the READMEs print commands (the check below has something to check)", (t) => {
  t.true(cases.length >= 8, `found ${cases.length}: ${cases.map((c) => c.cmd).join("; ")}`);
  t.true(cases.some((c) => c.file.endsWith("README-pretrain.md")));
});

for (const { file, cmd } of cases) {
  test(`${file}: ${cmd}`, async (t) => {
    const words = cmd.split(/\s+/);
    const args = words.slice(2);
    // Repository paths (relative, with a slash, not a key=value override, not a placeholder) must exist.
    for (const a of args.filter(
      (w) =>
        !w.startsWith("-") &&
        !w.startsWith("/") &&
        !w.includes("=") &&
        w.includes("/") &&
        !/[A-Z]{3}/.test(w),
    ))
      t.true(existsSync(join(ROOT, a)), `${a} does not exist from the repository root`);
    const node = nodeArgs(words);
    if (!node) {
      t.is(words[1], "ava", `unrecognised command form: ${cmd}`);
      return;
    }
    const { stdout } = await run("node", [...node, "--help"], { cwd: ROOT, timeout: 120_000 });
    t.regex(stdout, /^usage:/m);
    for (const flag of cmd.match(/--[a-z][a-z0-9-]*/g) ?? [])
      if (flag !== "--help") t.true(stdout.includes(flag), `${flag} is not in the usage text:\n${stdout}`);
  });
}
