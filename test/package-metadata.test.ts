/**
 * The metadata every published package carries: one license (Apache-2.0, its text shipped in each
 * tarball and identical to the repository's), one repository URL with the package's directory, and a
 * `files` list that names the license.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";

const ROOT = join(import.meta.dirname, "..");
const PACKAGES = ["actors", "blas", "core", "sandbox", "verl-ts"] as const;

interface Manifest {
  name: string;
  license?: string;
  repository?: { type?: string; url?: string; directory?: string };
  files?: string[];
}

const manifest = (dir: string): Manifest =>
  JSON.parse(readFileSync(join(ROOT, dir, "package.json"), "utf8")) as Manifest;

const rootLicense = readFileSync(join(ROOT, "LICENSE"), "utf8");

test("the repository's LICENSE is the Apache License 2.0", (t) => {
  t.regex(rootLicense, /^\s*Apache License\s+Version 2\.0, January 2004/);
  t.regex(rootLicense, /END OF TERMS AND CONDITIONS/);
});

test("each package is Apache-2.0 and ships the repository's license text", (t) => {
  for (const dir of PACKAGES) {
    const m = manifest(join("packages", dir));
    t.is(m.license, "Apache-2.0", `${m.name} license`);
    t.true(m.files?.includes("LICENSE"), `${m.name} lists LICENSE in files`);
    t.is(readFileSync(join(ROOT, "packages", dir, "LICENSE"), "utf8"), rootLicense, `${m.name} LICENSE text`);
  }
});

test("every package names the same repository, with its own directory", (t) => {
  const urls = new Set<string | undefined>();
  for (const dir of PACKAGES) {
    const m = manifest(join("packages", dir));
    t.is(m.repository?.type, "git", m.name);
    t.is(m.repository?.directory, `packages/${dir}`, `${m.name} repository.directory`);
    urls.add(m.repository?.url);
  }
  t.deepEqual([...urls], ["git+https://github.com/torl-ts/torl-ts.git"]);
});
