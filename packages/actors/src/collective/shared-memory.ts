/**
 * allGather and reduceScatter through shared memory, for a group whose members all share one host: each
 * rank writes what the others need into a file of its own in /dev/shm and reads what it needs of theirs
 * straight into its output (reduceScatter: and adds it there), two copies per byte in all, against the
 * ring's copies through ZeroMQ and the kernel's socket buffers.
 *
 * A member's files are unlinked as soon as they are made: only processes that hold them open can reach
 * them, and a peer opens them through `/proc/<pid>/fd/<fd>`, which Linux allows only to processes that
 * may read the owner's memory (the same user). So nothing is left behind when a member dies, and no
 * other user can open them. Where a member cannot make its files, or cannot open a peer's, the group
 * gathers through the ring (group.ts decides at formation, for every member alike).
 *
 * Reuse: a rank writes its two files in turn, call after call. It writes a file again two calls later,
 * once the call in between has returned; every peer took part in that one, so every peer has finished
 * reading the file (a member runs its collectives one at a time).
 */
import { closeSync, existsSync, openSync, readSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";

/** Where a member's files can be opened by its peers: its pid and the two files' descriptors. */
export interface SharedRegions {
  pid: number;
  fds: [number, number];
}

const SHM_DIR = "/dev/shm";
/** Largest read or write per system call (Node's limit is just under 2 GiB). */
const IO_CHUNK = 1 << 30;

/** A new file in /dev/shm, open for reading and writing and already unlinked (see the header); throws where none can be made. */
export function createSharedFile(): number {
  const path = join(SHM_DIR, `torl-collective-${process.pid}-${Math.random().toString(36).slice(2)}`);
  // wx: never an existing file; 0600: the owner only, and unlinked at once
  const fd = openSync(path, "wx+", 0o600);
  unlinkSync(path);
  return fd;
}

/** Opens a member's shared file, read-only, through /proc (its pid and the file's descriptor there). */
export function openPeerFile(pid: number, fd: number): number {
  return openSync(`/proc/${pid}/fd/${fd}`, "r");
}

/** Writes `bytes` into file `fd` from byte `at`. */
export function writeAllAt(fd: number, bytes: Uint8Array, at: number): void {
  for (let done = 0; done < bytes.length; ) {
    done += writeSync(fd, bytes, done, Math.min(IO_CHUNK, bytes.length - done), at + done);
  }
}

/** Reads `into.length` bytes of file `fd` from byte `at`; `whose` names the file in the error where it ends early. */
export function readAllAt(fd: number, into: Uint8Array, at: number, whose: string): void {
  for (let done = 0; done < into.length; ) {
    const n = readSync(fd, into, done, Math.min(IO_CHUNK, into.length - done), at + done);
    if (n === 0) throw new Error(`${whose} ended ${into.length - done} bytes early`);
    done += n;
  }
}

export class SharedGather {
  /** This member's two files, open for reading and writing (unlinked). */
  private readonly own: [number, number];
  /** Each peer's two files, opened read-only; undefined for this member. */
  private peers: ([number, number] | undefined)[] = [];
  private calls = 0;

  private constructor(own: [number, number]) {
    this.own = own;
  }

  /** A member's files, made and unlinked; null where there is no /dev/shm or it cannot be written. */
  static create(): SharedGather | null {
    if (!existsSync(SHM_DIR)) return null;
    const made: number[] = [];
    try {
      for (let k = 0; k < 2; k++) made.push(createSharedFile());
      return new SharedGather([made[0]!, made[1]!]);
    } catch {
      for (const fd of made) closeSync(fd);
      return null;
    }
  }

  get regions(): SharedRegions {
    return { pid: process.pid, fds: [this.own[0], this.own[1]] };
  }

  /** Opens every peer's files (`regions[rank]`, this member's own skipped); false, with nothing kept open, where one fails. */
  openPeers(regions: SharedRegions[], rank: number): boolean {
    const opened: ([number, number] | undefined)[] = [];
    try {
      for (const [r, reg] of regions.entries()) {
        if (r === rank) {
          opened.push(undefined);
          continue;
        }
        const a = openPeerFile(reg.pid, reg.fds[0]);
        try {
          opened.push([a, openPeerFile(reg.pid, reg.fds[1])]);
        } catch (err) {
          closeSync(a);
          throw err;
        }
      }
      this.peers = opened;
      return true;
    } catch {
      for (const p of opened) if (p) for (const fd of p) closeSync(fd);
      return false;
    }
  }

  /** Which of the two files this gather uses, the next the other. */
  nextSlot(): number {
    return this.calls++ % 2;
  }

  /** Writes `bytes` into this member's file `slot`, from byte `at` (default its start). */
  write(slot: number, bytes: Uint8Array, at = 0): void {
    writeAllAt(this.own[slot]!, bytes, at);
  }

  /** Reads `into.length` bytes of peer `origin`'s file `slot`, from byte `at` (default its start). */
  read(origin: number, slot: number, into: Uint8Array, at = 0): void {
    const fds = this.peers[origin];
    if (!fds) throw new Error(`no shared file of rank ${origin} is open here`);
    readAllAt(fds[slot]!, into, at, `rank ${origin}'s shared file`);
  }

  close(): void {
    for (const fd of this.own) closeSync(fd);
    for (const p of this.peers) if (p) for (const fd of p) closeSync(fd);
    this.peers = [];
  }
}
