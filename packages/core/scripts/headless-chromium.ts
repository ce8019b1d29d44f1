/**
 * Headless Chromium for the scripts that draw docs/pictures: run with `args`, resolve to its stdout.
 * Asynchronously: a script that serves the page itself (the dashboard) answers it from its own event
 * loop, which a synchronous run would block.
 */
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export function chromium(args: string[]): Promise<string> {
  const profile = mkdtempSync(join(tmpdir(), "torl-pic-"));
  const flags = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    `--user-data-dir=${profile}`,
  ];
  return new Promise((done, fail) =>
    execFile("chromium", [...flags, ...args], { timeout: 300_000, maxBuffer: 64 << 20 }, (err, stdout) =>
      err ? fail(err) : done(stdout),
    ),
  );
}
