/**
 * The long-running process behind `torl start`: a head (plus its local node agent) or a node agent
 * joining a head. Tells its parent (if any) when it is ready, stops cleanly on SIGTERM/SIGINT.
 */

import { Head } from "../cluster/head.js";
import { defaultKeyFile, readKeyFile, resolveJoinKeys, writeKeyFile } from "../cluster/key-file.js";
import { NodeAgent } from "../cluster/node-agent.js";
import { setLogRole } from "../log.js";
import { setClusterKeys } from "../wire/security.js";
import { InputError } from "./command.js";
import { forgetDaemon, recordDaemon } from "./state.js";

export interface DaemonOptions {
  head: boolean;
  address?: string;
  port: number;
  host: string;
  nodeIp: string;
  numCpus?: number;
  numGpus?: number;
  resources?: Record<string, number>;
  /** The cluster's key file (never the keys themselves: this travels in argv). */
  keysFile?: string;
  log: string;
}

/** The head's port is taken by another process: bad input (exit 2), with what to do. */
export class PortInUseError extends InputError {
  override name = "PortInUseError";
  constructor(
    readonly host: string,
    readonly port: number,
  ) {
    super(`port ${port} is in use on ${host}; stop what holds it or give another --port (0 = any free port)`);
  }
}

/** What the daemon tells its parent over IPC when it cannot start. */
export interface DaemonFailure {
  t: "failed";
  kind: "port_in_use" | "other";
  message: string;
}

export async function runDaemon(o: DaemonOptions): Promise<void> {
  let head: Head | null = null;
  let address = o.address ?? "";
  const keys = o.keysFile ? readKeyFile(o.keysFile) : o.head ? null : resolveJoinKeys(undefined, address);
  setClusterKeys(keys && { publicKey: keys.publicKey, secretKey: keys.secretKey });
  if (o.head) {
    setLogRole("head");
    head = new Head({ host: o.host, port: o.port });
    let bound: string;
    try {
      bound = await head.start();
    } catch (e) {
      if ((e as { code?: string }).code === "EADDRINUSE") throw new PortInUseError(o.host, o.port);
      throw e;
    }
    address = `${o.nodeIp}:${bound.split(":").pop()}`;
    head.address = address;
    // the state directory's key file names its head, so local joiners can find it by address
    if (keys && o.keysFile === defaultKeyFile()) writeKeyFile(o.keysFile, { ...keys, address });
  } else setLogRole("node");
  const node = new NodeAgent({
    headAddress: address,
    ip: o.nodeIp,
    numCpus: o.numCpus,
    numGpus: o.numGpus,
    resources: o.resources,
  });
  await node.start();
  recordDaemon({
    pid: process.pid,
    role: o.head ? "head" : "node",
    address,
    nodeId: node.nodeId,
    log: o.log,
    ...(o.keysFile ? { keys: o.keysFile } : {}),
  });
  let stopping = false;
  const stop = async (why: string) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`[torl ${o.head ? "head" : "node"} ${process.pid}] stopping (${why})\n`);
    await node.stop();
    head?.stop();
    forgetDaemon(process.pid);
    setTimeout(() => process.exit(0), 100);
  };
  node.onShutdownRequest = () => void stop("the head asked");
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  const ready = { t: "ready", address, nodeId: node.nodeId, pid: process.pid };
  process.stdout.write(`${JSON.stringify(ready)}\n`);
  if (process.send) process.send(ready);
}

// Run as a script: options come as one JSON argument.
if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split("/").pop()!) && process.argv[2]) {
  runDaemon(JSON.parse(process.argv[2])).catch((e) => {
    process.stderr.write(`torl daemon failed: ${(e as Error).stack}\n`);
    const failure: DaemonFailure = {
      t: "failed",
      kind: e instanceof PortInUseError ? "port_in_use" : "other",
      message: `${(e as Error).name}: ${(e as Error).message}`,
    };
    if (process.send) process.send(failure, () => process.exit(1));
    else process.exit(1);
  });
}
