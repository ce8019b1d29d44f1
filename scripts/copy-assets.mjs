// Copies the files a package loads at run time from src/ to dist/ beside its built JavaScript
// (YAML defaults, JSONL corpora, plain-JS thread entries): everything that is neither TypeScript nor
// a README. Run from a package directory after `tsc -b`.
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";

const SKIP = /\.(ts|md)$/;

function walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const from = join(dir, entry.name);
    if (entry.isDirectory()) walk(from);
    else if (!SKIP.test(entry.name)) {
      const to = join("dist", relative("src", from));
      mkdirSync(dirname(to), { recursive: true });
      copyFileSync(from, to);
    }
  }
}

walk("src");
