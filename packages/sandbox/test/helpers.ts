import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolvePython } from "../src/python.js";

export interface HostProcess {
  pid: number;
  uid: number;
  cmdline: string;
}

/** Every process on the host (the host's view of /proc), with its real uid and command line. */
export function hostProcesses(): HostProcess[] {
  const out: HostProcess[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = readFileSync(`/proc/${entry}/status`, "utf8");
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ").trim();
      out.push({ pid: Number(entry), uid, cmdline });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Host processes whose command line contains `marker`. */
export function leftovers(marker: string): HostProcess[] {
  return hostProcesses().filter((p) => p.cmdline.includes(marker));
}

/** Host processes running as one of `uids`. */
export function processesOf(uids: number[]): HostProcess[] {
  return hostProcesses().filter((p) => uids.includes(p.uid));
}

/** Polls `check` until it returns true or `ms` pass (for things that settle, never for speed). */
export async function eventually(check: () => boolean, ms = 15_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** A python3 that works until `broken(true)`: it then exits 3 at once, saying "python is broken" on stderr. */
export function flakyPython(): { python: string; broken: (on: boolean) => void; dispose: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "torl-flaky-python-"));
  const flag = join(dir, "broken");
  const python = join(dir, "python3");
  writeFileSync(
    python,
    `#!/bin/sh\n[ -e ${flag} ] && { echo "python is broken" >&2; exit 3; }\nexec ${resolvePython()} "$@"\n`,
  );
  chmodSync(python, 0o755);
  return {
    python,
    broken: (on) => (on ? writeFileSync(flag, "") : rmSync(flag, { force: true })),
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}
