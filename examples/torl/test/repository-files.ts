/** The repository's own files, for the tests that check something across all of them. */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export const REPOSITORY_ROOT = new URL("../../../", import.meta.url).pathname;

/**
 * Each file git tracks, and with `untracked` each new one it does not ignore, that `keep` accepts, with
 * its text (a file listed but absent from the work tree, e.g. deleted, is skipped).
 */
export function repositoryFiles(
  keep: (file: string) => boolean,
  options: { untracked?: boolean } = {},
): { file: string; text: string }[] {
  const args = ["ls-files", ...(options.untracked ? ["--cached", "--others", "--exclude-standard"] : [])];
  const out: { file: string; text: string }[] = [];
  for (const file of execFileSync("git", args, { cwd: REPOSITORY_ROOT, encoding: "utf8" }).split("\n")) {
    if (!file || !keep(file)) continue;
    try {
      out.push({ file, text: readFileSync(join(REPOSITORY_ROOT, file), "utf8") });
    } catch {
      // listed but not checked out
    }
  }
  return out;
}
