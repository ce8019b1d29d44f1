/** Headless Chromium: renders a local HTML file into a PNG (the report's render check). */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

/** The Chromium binary on PATH (Debian's `chromium`), or undefined. */
export function findChromium(): string | undefined {
  for (const name of ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]) {
    try {
      const p = execFileSync("which", [name], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim();
      if (p) return p;
    } catch {
      // not this one
    }
  }
  return undefined;
}

export class ChromiumError extends Error {
  override name = "ChromiumError";
}

/** Screenshots a local HTML file with headless Chromium (offline flags, a fresh profile). */
export async function screenshotHtml(
  htmlFile: string,
  pngFile: string,
  options: { width?: number; height?: number; timeoutMs?: number; chromium?: string } = {},
): Promise<void> {
  const bin = options.chromium ?? findChromium();
  if (!bin)
    throw new ChromiumError(
      "chromium not found on PATH (Debian: apt-get install -y chromium; see .ci/setup.d/chromium.sh)",
    );
  const profile = mkdtempSync(join(tmpdir(), "torl-chromium-"));
  const args = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    `--user-data-dir=${profile}`,
    `--screenshot=${resolve(pngFile)}`,
    `--window-size=${options.width ?? 1360},${options.height ?? 1400}`,
    pathToFileURL(resolve(htmlFile)).href,
  ];
  try {
    await new Promise<void>((ok, fail) => {
      const child = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      child.stderr.on("data", (d) => {
        err = (err + d).slice(-4000);
      });
      const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
      child.on("error", (e) => {
        clearTimeout(timer);
        fail(new ChromiumError(`cannot start ${bin}: ${e.message}`));
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        if (code === 0 && existsSync(pngFile)) ok();
        else
          fail(
            new ChromiumError(
              `${bin} exited with ${signal ?? code} and no screenshot: ${err.trim().slice(-1000)}`,
            ),
          );
      });
    });
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}
