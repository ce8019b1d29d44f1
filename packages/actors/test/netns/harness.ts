/**
 * A multi-host cluster on one machine, for partition tests: each member (head, node agents, the
 * driver) runs in its own Linux network namespace, joined through veth pairs to a bridge that
 * lives in a namespace of its own. Addresses come from 198.18.0.0/24 (RFC 2544's benchmarking
 * range), which exists only inside these namespaces: no traffic leaves them. A link is cut by
 * taking the member's bridge port down, and healed by bringing it up.
 *
 * Names carry the creating process's pid, so parallel runs do not clash, and namespaces left by a
 * run that died are removed by the next one.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

const PREFIX = "tp";

/** Why the harness cannot run here, or null when it can. */
export function netnsUnavailable(): string | null {
  if (process.platform !== "linux") return `network namespaces are Linux-only (this is ${process.platform})`;
  if (process.getuid?.() !== 0)
    return "creating network namespaces needs root (run the tests as root, as CI does)";
  try {
    execFileSync("ip", ["netns", "list"], { stdio: "pipe" });
  } catch (e) {
    return `the 'ip' tool (iproute2) is missing or cannot list namespaces: ${(e as Error).message}`;
  }
  const probe = `${PREFIX}${process.pid}probe`;
  try {
    execFileSync("ip", ["netns", "add", probe], { stdio: "pipe" });
    execFileSync("ip", ["netns", "del", probe], { stdio: "pipe" });
  } catch (e) {
    return `this kernel or container does not allow network namespaces: ${(e as Error).message.split("\n")[0]}`;
  }
  return null;
}

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: "pipe" });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Removes namespaces that runs which died left behind (their pid is in the name). */
function sweepStale(): void {
  const out = execFileSync("ip", ["netns", "list"], { encoding: "utf8" });
  for (const line of out.split("\n")) {
    const m = new RegExp(`^(${PREFIX}(\\d+)x\\S*)`).exec(line.trim());
    if (m && !alive(Number(m[2]))) {
      try {
        ip("netns", "del", m[1]!);
      } catch {}
    }
  }
}

export interface Member {
  name: string;
  /** The namespace it runs in. */
  ns: string;
  addr: string;
  /** Its port on the bridge (in the switch namespace): down = link cut. */
  port: string;
}

export class NetnsCluster {
  readonly tag: string;
  readonly switchNs: string;
  readonly members = new Map<string, Member>();
  readonly dir = mkdtempSync(path.join(os.tmpdir(), "torl-netns-"));
  private children: ChildProcess[] = [];
  private n = 0;

  constructor() {
    sweepStale();
    this.tag = `${PREFIX}${process.pid}x${(Date.now() % 1296).toString(36)}`;
    this.switchNs = `${this.tag}sw`;
    ip("netns", "add", this.switchNs);
    ip("-n", this.switchNs, "link", "add", "br0", "type", "bridge");
    ip("-n", this.switchNs, "link", "set", "br0", "up");
  }

  /** A new namespace on the bridge with address 198.18.0.`host`. */
  add(name: string, host: number): Member {
    const ns = `${this.tag}${name}`;
    const idx = ++this.n;
    // interface names are limited to 15 characters: keep the unique part short
    const port = `p${process.pid % 100000}${idx}`;
    const inside = `i${process.pid % 100000}${idx}`;
    ip("netns", "add", ns);
    ip("link", "add", inside, "netns", ns, "type", "veth", "peer", "name", port, "netns", this.switchNs);
    ip("-n", this.switchNs, "link", "set", port, "master", "br0");
    ip("-n", this.switchNs, "link", "set", port, "up");
    ip("-n", ns, "link", "set", "lo", "up");
    ip("-n", ns, "link", "set", inside, "name", "eth0");
    ip("-n", ns, "addr", "add", `198.18.0.${host}/24`, "dev", "eth0");
    ip("-n", ns, "link", "set", "eth0", "up");
    const m: Member = { name, ns, addr: `198.18.0.${host}`, port };
    this.members.set(name, m);
    return m;
  }

  member(name: string): Member {
    const m = this.members.get(name);
    if (!m) throw new Error(`no member '${name}' in the harness (members: ${[...this.members.keys()]})`);
    return m;
  }

  /** Cuts the member off the network: nothing it sends arrives, nothing arrives to it. */
  cut(name: string): void {
    ip("-n", this.switchNs, "link", "set", this.member(name).port, "down");
  }

  heal(name: string): void {
    ip("-n", this.switchNs, "link", "set", this.member(name).port, "up");
  }

  /** Runs a command inside a member's namespace; it and its children are killed on destroy(). */
  spawn(name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
    const child = spawn("ip", ["netns", "exec", this.member(name).ns, cmd, ...args], {
      env,
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    this.children.push(child);
    return child;
  }

  /** Kills every process started here (whole process groups) and deletes the namespaces and links. */
  destroy(): void {
    for (const c of this.children) {
      if (c.pid !== undefined) {
        try {
          process.kill(-c.pid, "SIGKILL");
        } catch {}
      }
    }
    // workers of a node agent are in the agent's process group only if it did not detach them:
    // processes still holding a namespace open are found and killed by their namespace
    for (const m of this.members.values()) {
      try {
        const pids = execFileSync("ip", ["netns", "pids", m.ns], { encoding: "utf8" })
          .split(/\s+/)
          .filter(Boolean);
        for (const p of pids) {
          try {
            process.kill(Number(p), "SIGKILL");
          } catch {}
        }
      } catch {}
    }
    for (const m of this.members.values()) {
      try {
        ip("netns", "del", m.ns);
      } catch {}
    }
    try {
      ip("netns", "del", this.switchNs);
    } catch {}
    rmSync(this.dir, { recursive: true, force: true });
  }
}
