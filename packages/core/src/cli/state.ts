/** Where `torl start` records the daemons it started on this machine (for `status` and `stop`). */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export interface DaemonRecord {
  pid: number;
  role: "head" | "node";
  address: string;
  nodeId?: string;
  log: string;
  /** The cluster's key file the daemon was started with (a secure cluster). */
  keys?: string;
}

export function stateDir(): string {
  const dir = process.env.TORL_STATE_DIR ?? path.join(os.tmpdir(), "torl", "cluster");
  mkdirSync(path.join(dir, "processes"), { recursive: true });
  mkdirSync(path.join(dir, "logs"), { recursive: true });
  return dir;
}

export function recordDaemon(r: DaemonRecord): void {
  writeFileSync(path.join(stateDir(), "processes", `${r.pid}.json`), JSON.stringify(r));
  if (r.role === "head") writeFileSync(path.join(stateDir(), "address"), r.address);
}

export function listDaemons(): DaemonRecord[] {
  const dir = path.join(stateDir(), "processes");
  const out: DaemonRecord[] = [];
  for (const f of readdirSync(dir)) {
    try {
      out.push(JSON.parse(readFileSync(path.join(dir, f), "utf8")));
    } catch {}
  }
  return out;
}

export function forgetDaemon(pid: number): void {
  rmSync(path.join(stateDir(), "processes", `${pid}.json`), { force: true });
}

export function lastHeadAddress(): string | null {
  try {
    return readFileSync(path.join(stateDir(), "address"), "utf8").trim() || null;
  } catch {
    return null;
  }
}

export function forgetHeadAddress(): void {
  rmSync(path.join(stateDir(), "address"), { force: true });
}
