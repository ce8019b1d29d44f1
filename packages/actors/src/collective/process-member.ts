/**
 * A plain child process that runs exported functions on request: a `CollectiveMember` that needs
 * no actor runtime. Used to test and benchmark the ring transport on its own, and handy wherever
 * a few worker processes are enough.
 */
import { type ChildProcess, fork } from "node:child_process";
import { childExecArgv, siblingModulePath } from "@torl-ts/core";
import type { CollectiveMember } from "./group.js";

/** An exception thrown by the function in the child, carried back with its stack. */
export class ProcessMemberError extends Error {
  constructor(
    message: string,
    readonly remoteName: string,
    readonly remoteStack: string | undefined,
    readonly pid: number | undefined,
  ) {
    super(message);
    this.name = "ProcessMemberError";
  }
}

/** The child exited (or could not start) while calls were pending. */
export class ProcessMemberExitedError extends Error {
  constructor(
    readonly pid: number | undefined,
    readonly exitCode: number | null,
    readonly signal: NodeJS.Signals | null,
  ) {
    super(`process member ${pid} exited (code ${exitCode}, signal ${signal}) with calls pending`);
    this.name = "ProcessMemberExitedError";
  }
}

interface Reply {
  id: number;
  ok: boolean;
  value?: unknown;
  error?: { name: string; message: string; stack?: string };
}

const CHILD = siblingModulePath(import.meta.url, "./process-member-child");

export interface ProcessMemberOptions {
  /** Extra environment variables for the child. */
  env?: Record<string, string>;
}

export class ProcessMember implements CollectiveMember {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: unknown) => void }
  >();
  private exit: ProcessMemberExitedError | undefined;
  private readonly exited: Promise<void>;

  private constructor(private readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        this.exit = new ProcessMemberExitedError(child.pid, code, signal);
        for (const p of this.pending.values()) p.reject(this.exit);
        this.pending.clear();
        resolve();
      });
    });
    child.on("message", (msg: Reply) => {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.value);
      else {
        const e = msg.error!;
        const err = new ProcessMemberError(`${e.name}: ${e.message}`, e.name, e.stack, child.pid);
        p.reject(err);
      }
    });
  }

  /** Starts a child (with the same TypeScript loader as this process) and waits until it listens. */
  static async spawn(options: ProcessMemberOptions = {}): Promise<ProcessMember> {
    const child = fork(CHILD, [], {
      execArgv: childExecArgv(CHILD),
      serialization: "advanced",
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: { ...process.env, ...options.env },
    });
    const member = new ProcessMember(child);
    await member.invoke("node:process", "cwd", []);
    return member;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Calls `exportName(...args)` of `moduleUrl` in the child; resolves to its (awaited) result. */
  invoke(moduleUrl: string, exportName: string, args: unknown[]): Promise<unknown> {
    if (this.exit) return Promise.reject(this.exit);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, moduleUrl, exportName, args }, (err) => {
        if (err && this.pending.delete(id)) reject(err);
      });
    });
  }

  /** Ends the child: asks it to exit, then SIGKILLs it after `graceMs`. */
  async close(graceMs = 2000): Promise<void> {
    if (this.exit) return;
    if (this.child.connected) this.child.disconnect();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Kills the child at once (for fault tests). */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    this.child.kill(signal);
  }
}
