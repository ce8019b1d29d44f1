import { readdirSync, readFileSync } from "node:fs";

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
