/**
 * A node agent: registers the node's resources with the head, sends heartbeats, forks one worker
 * process per actor (CUDA_VISIBLE_DEVICES set to the assigned GPU ids) and reports how each exits.
 * What the workers print goes to their log files on this node and, through the head, to the drivers.
 */
import { type ChildProcess, fork } from "node:child_process";
import { closeSync, openSync, readdirSync, readSync, statSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { HeadError } from "../errors.js";
import { logWarn } from "../log.js";
import { childExecArgv, siblingModulePath } from "../module-files.js";
import { randomId } from "../runtime/ids.js";
import type { ActorSpec } from "../runtime/protocol.js";
import { UndecodableMessage } from "../wire/batch.js";
import { DealerLink } from "../wire/links.js";
import { clusterKeys, requireKeysToListen } from "../wire/security.js";
import { detectGpuIds } from "./detect-gpus.js";
import type { HeadToNode, LogsRead, NodeRegistered, NodeToHead, WorkerToNode } from "./messages.js";
import { type LogSource, logFileName, WorkerLogs } from "./worker-logs.js";

export interface NodeAgentOptions {
  headAddress: string;
  ip: string;
  numCpus?: number;
  numGpus?: number;
  /** Explicit GPU ids (default 0..numGpus-1; with neither given, detected with nvidia-smi). */
  gpuIds?: number[];
  resources?: Record<string, number>;
  nodeId?: string;
  heartbeatMs?: number;
  /** Where the workers' log files go (default: <TORL_LOG_DIR, else the temporary directory's torl/logs>/<node id>). */
  logDir?: string;
}

interface Worker {
  child: ChildProcess;
  incarnation: number;
  exited: boolean;
}

/** How long a node agent waits for the head to acknowledge its registration. */
const REGISTER_TIMEOUT_MS = 30_000;

const WORKER_MAIN = siblingModulePath(import.meta.url, "../runtime/worker-main");

export class NodeAgent {
  readonly nodeId: string;
  private link!: DealerLink;
  private workers = new Map<string, Worker>();
  private spare: ChildProcess | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  readonly resources: Record<string, number>;
  readonly gpuIds: number[];
  readonly logs: WorkerLogs;
  /** Who each worker process is, for its log lines: a spare is nobody until it gets an actor. */
  private logSources = new WeakMap<ChildProcess, LogSource>();
  onShutdownRequest: (() => void) | null = null;

  constructor(private opts: NodeAgentOptions) {
    this.nodeId = opts.nodeId ?? `node-${randomId(4)}`;
    this.gpuIds =
      opts.gpuIds ??
      (opts.numGpus !== undefined ? Array.from({ length: opts.numGpus }, (_, i) => i) : detectGpuIds());
    this.resources = { CPU: opts.numCpus ?? os.cpus().length, ...(opts.resources ?? {}) };
    const logRoot = process.env.TORL_LOG_DIR || join(os.tmpdir(), "torl", "logs");
    this.logs = new WorkerLogs(opts.logDir ?? join(logRoot, this.nodeId), (batches) =>
      this.link?.send({ t: "workerLog", batches }),
    );
  }

  /** Registers with the head; rejects with HeadError if the head does not answer within `registerTimeoutMs`. */
  async start(registerTimeoutMs = REGISTER_TIMEOUT_MS): Promise<void> {
    requireKeysToListen(this.opts.ip, `the workers of node ${this.nodeId} (its node IP)`);
    let timer: NodeJS.Timeout | undefined;
    const registered = new Promise<void>((resolve, reject) => {
      this.refused = (err) => {
        clearTimeout(timer);
        reject(err);
      };
      this.registered = (error) => {
        clearTimeout(timer);
        if (error)
          reject(new HeadError(`the head refused node ${this.nodeId}: ${error.name}: ${error.message}`));
        else resolve();
      };
      timer = setTimeout(() => {
        reject(
          new HeadError(
            `node ${this.nodeId}: no answer from the head at ${this.opts.headAddress} within ${registerTimeoutMs} ms; is it running and reachable?`,
          ),
        );
      }, registerTimeoutMs);
    });
    this.link = new DealerLink(
      `tcp://${this.opts.headAddress}`,
      (m) => this.onMessage(m),
      "head",
      (err) => this.refused(err),
    );
    this.link.send({
      t: "registerNode",
      rid: 0,
      nodeId: this.nodeId,
      ip: this.opts.ip,
      resources: this.resources,
      gpuIds: this.gpuIds,
      pid: process.pid,
    });
    const hb = this.opts.heartbeatMs ?? Number(process.env.TORL_HEARTBEAT_MS ?? 500);
    this.timer = setInterval(() => {
      this.link.send({ t: "nodeHeartbeat", nodeId: this.nodeId } satisfies NodeToHead);
      this.fenceIfCutOff();
    }, hb);
    this.timer.unref();
    try {
      await registered;
    } catch (e) {
      await this.stop();
      throw e;
    }
    this.refillSpare();
  }

  private registered: (error?: { name: string; message: string }) => void = () => {};
  /** The head's node timeout (from registration): silent this long, the head declares this node dead. */
  private headTimeoutMs = Number.POSITIVE_INFINITY;
  private lastAck = Date.now();
  private fenced = false;

  /**
   * No split brain: once the head has not answered for as long as its node timeout, it has declared
   * this node dead and restarts its actors elsewhere, so the copies here must stop now, not when the
   * link heals. The agent stays up; the head tells it to leave if it hears from it again.
   */
  private fenceIfCutOff(): void {
    const silentMs = Date.now() - this.lastAck;
    if (this.fenced || this.stopped || silentMs <= this.headTimeoutMs) return;
    this.fenced = true;
    const live = [...this.workers.values()].filter((w) => !w.exited);
    logWarn(
      `node ${this.nodeId}: no answer from the head for ${silentMs} ms (its node timeout is ${this.headTimeoutMs} ms): ` +
        `killing this node's ${live.length} workers, which the head has declared dead`,
    );
    for (const w of live) w.child.kill("SIGKILL");
    this.spare?.kill("SIGKILL");
    this.spare = null;
  }
  private refused: (err: Error) => void = () => {};

  private onMessage(raw: unknown): void {
    if (raw instanceof UndecodableMessage || !raw || typeof raw !== "object") {
      const reason = raw instanceof UndecodableMessage ? raw.reason : "a message that is not an object";
      logWarn(`node ${this.nodeId}: a message from the head could not be decoded: ${reason}`);
      this.link.send({ t: "undecodable", reason: `node ${this.nodeId}: ${reason}` });
      return;
    }
    // the head is the same version: its messages are HeadToNode (an unknown type is answered below)
    const m = raw as HeadToNode;
    switch (m.t) {
      case "re":
        if (m.rid === 0) {
          if (m.ok) {
            this.headTimeoutMs = Number(
              (m.v as NodeRegistered | null)?.nodeTimeoutMs ?? Number.POSITIVE_INFINITY,
            );
            this.lastAck = Date.now();
            this.registered(undefined);
          } else this.registered(m.e ?? { name: "HeadError", message: "refused" });
        }
        return;
      case "nodeHeartbeatAck":
        this.lastAck = Date.now();
        if (this.fenced) {
          // unreachable in practice: a head answers a fenced node's heartbeats with "shutdown"
          logWarn(`node ${this.nodeId}: the head answers again after this node fenced itself`);
        }
        return;
      case "startWorker":
        this.startWorker(m.spec, m.incarnation, m.gpuIds, m.resources, m.bundleIndex);
        return;
      case "readLogs":
        this.readLogs(m.qid, m.actorId, m.tailBytes);
        return;
      case "killWorker": {
        const w = this.workers.get(m.actorId);
        if (w && w.incarnation === m.incarnation && !w.exited) w.child.kill("SIGKILL");
        return;
      }
      case "shutdown":
        logWarn(`node ${this.nodeId}: the head asked this node to stop${m.reason ? ` (${m.reason})` : ""}`);
        void this.stop();
        this.onShutdownRequest?.();
        return;
      case "undecodable":
        logWarn(`node ${this.nodeId}: the head could not decode a message of this node: ${m.reason}`);
        return;
      case "refused":
        logWarn(`node ${this.nodeId}: the head refused '${m.request}': ${m.e?.name}: ${m.e?.message}`);
        return;
      default: {
        const type = (m as { t: unknown }).t;
        logWarn(`node ${this.nodeId}: unknown message '${type}' from the head`);
        this.link.send({ t: "undecodable", reason: `node ${this.nodeId}: unknown message '${type}'` });
      }
    }
  }

  private forkWorker(extraEnv: Record<string, string | undefined>): ChildProcess {
    const child = fork(WORKER_MAIN, [], {
      execArgv: childExecArgv(WORKER_MAIN),
      env: { ...process.env, ...extraEnv, TORL_WORKER: "1", TORL_NODE_ID: this.nodeId },
      serialization: "advanced",
      stdio: ["ignore", "pipe", "pipe", "ipc"],
    });
    const pid = child.pid ?? 0;
    const unassigned: LogSource = {
      actorId: "worker",
      className: null,
      name: undefined,
      pid,
      nodeId: this.nodeId,
    };
    this.logs.attach(child.stdout, child.stderr, () => this.logSources.get(child) ?? unassigned);
    return child;
  }

  /** The last `tailBytes` of each of this node's log files of `actorId` (all of them when undefined). */
  private readLogs(qid: number, actorId: string | undefined, tailBytes: number): void {
    try {
      const prefix = actorId === undefined ? "" : logFileName(actorId, 0, "out").replace(/0\.out$/, "");
      const names = readdirSync(this.logs.dir).filter(
        (n) => n.startsWith(prefix) && (n.endsWith(".out") || n.endsWith(".err")),
      );
      const files = names
        .map((name) => ({ name, st: statSync(join(this.logs.dir, name)) }))
        .sort((a, b) => a.st.mtimeMs - b.st.mtimeMs)
        .map(({ name, st }) => ({
          name,
          bytes: st.size,
          text: tail(join(this.logs.dir, name), st.size, tailBytes),
        }));
      const v: LogsRead = { nodeId: this.nodeId, dir: this.logs.dir, files };
      this.link.send({ t: "logsRead", qid, ok: true, v });
    } catch (e) {
      this.link.send({
        t: "logsRead",
        qid,
        ok: false,
        e: { name: (e as Error).name, message: (e as Error).message },
      });
    }
  }

  /** A booted, idle worker process kept ready so that new actors start fast (TORL_PREWARM=0 disables). */
  private refillSpare(): void {
    if (this.stopped || this.fenced || this.spare || process.env.TORL_PREWARM === "0") return;
    const child = this.forkWorker({});
    child.on("error", () => {});
    child.once("exit", () => {
      if (this.spare === child) this.spare = null;
    });
    this.spare = child;
  }

  private takeSpare(): ChildProcess | null {
    const s = this.spare;
    if (!s || s.exitCode !== null || s.signalCode !== null || !s.connected) return null;
    this.spare = null;
    s.removeAllListeners("exit");
    setTimeout(() => this.refillSpare(), 300).unref();
    return s;
  }

  private startWorker(
    spec: ActorSpec,
    incarnation: number,
    gpuIds: number[],
    resources: Record<string, number>,
    bundleIndex?: number,
  ): void {
    if (this.stopped || this.fenced) return;
    const env: Record<string, string> = { ...(spec.env ?? {}) };
    if (gpuIds.length > 0 || (resources.GPU ?? 0) > 0 || this.gpuIds.length > 0) {
      env.CUDA_VISIBLE_DEVICES = gpuIds.join(",");
    }
    const hasOwnEnv = spec.env && Object.keys(spec.env).length > 0;
    const child = (!hasOwnEnv && this.takeSpare()) || this.forkWorker(env);
    this.logSources.set(child, {
      actorId: spec.actorId,
      className: spec.className,
      name: spec.name,
      pid: child.pid ?? 0,
      nodeId: this.nodeId,
    });
    const w: Worker = { child, incarnation, exited: false };
    this.workers.set(spec.actorId, w);
    child.on("message", (raw) => {
      const msg = raw as WorkerToNode;
      if (msg?.t === "ready") {
        this.link.send({
          t: "actorReady",
          actorId: spec.actorId,
          incarnation,
          endpoint: msg.endpoint,
          pid: child.pid,
        });
      } else if (msg?.t === "failed") {
        this.link.send({ t: "actorFailed", actorId: spec.actorId, incarnation, error: msg.error });
      }
    });
    child.on("error", (e) => logWarn(`node ${this.nodeId}: worker for ${spec.actorId}: ${e.message}`));
    child.on("exit", (code, signal) => {
      w.exited = true;
      if (this.workers.get(spec.actorId) === w) this.workers.delete(spec.actorId);
      this.link.send({ t: "workerExit", actorId: spec.actorId, incarnation, code, signal, pid: child.pid });
    });
    child.send({
      t: "start",
      spec,
      incarnation,
      env,
      headAddress: this.opts.headAddress,
      // over the IPC channel, never argv: other users can read that in /proc
      keys: clusterKeys(),
      nodeId: this.nodeId,
      nodeIp: this.opts.ip,
      gpuIds,
      resources,
      bundleIndex,
    });
  }

  /** Stops every worker (SIGTERM, then SIGKILL after a grace period) and leaves the cluster. */
  async stop(graceMs = 1000): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.spare) {
      this.spare.kill("SIGKILL");
      this.spare = null;
    }
    const live = [...this.workers.values()].filter((w) => !w.exited);
    await Promise.all(
      live.map(
        (w) =>
          new Promise<void>((resolve) => {
            const t = setTimeout(() => {
              if (!w.exited) w.child.kill("SIGKILL");
            }, graceMs);
            w.child.once("exit", () => {
              clearTimeout(t);
              resolve();
            });
            w.child.kill("SIGTERM");
          }),
      ),
    );
    this.logs.close();
    // let the exit reports go out before closing
    await new Promise((r) => setTimeout(r, 20));
    this.link.close();
  }
}

/** The last `max` bytes of a file of `size` bytes (from the first whole line when cut). */
function tail(path: string, size: number, max: number): string {
  const start = Math.max(0, size - max);
  const buf = Buffer.alloc(size - start);
  const fd = openSync(path, "r");
  try {
    readSync(fd, buf, 0, buf.length, start);
  } finally {
    closeSync(fd);
  }
  const text = buf.toString("utf8");
  return start > 0 ? text.slice(text.indexOf("\n") + 1) : text;
}
