/** `torl start`: start a head (`--head`) or a node agent joining one (`--address`), in the background. */
import { spawn } from "node:child_process";
import { openSync, rmSync } from "node:fs";
import path from "node:path";
import { defaultKeyFile, keyFileExists, readKeyFile, writeKeyFile } from "../cluster/key-file.js";
import { childExecArgv, siblingModulePath } from "../module-files.js";
import { generateClusterKeys, isLoopbackHost } from "../wire/security.js";
import { UsageError } from "./command.js";
import { type DaemonFailure, type DaemonOptions, PortInUseError, runDaemon } from "./daemon.js";
import { defineCommand } from "./define.js";
import { stateDir } from "./state.js";

const usage = `usage: pnpm torl start --head [--port P] [--host H] [options]
       pnpm torl start --address HOST:PORT [options]

Starts a cluster head (with a local node) or a node agent that joins the head at HOST:PORT.
Runs in the background and prints the address; \`pnpm torl stop\` stops what was started here.

options:
  --head                 start a head (control plane) and a node on this machine
  --port P               head port (default 6380; 0 = any free port)
  --host H               interface the head binds (default 127.0.0.1: this machine only). Any other
                         (e.g. 0.0.0.0) makes the cluster authenticated and encrypted (CURVE):
                         the head creates the cluster's keys, see --keys
  --keys PATH            the cluster's key file (default: TORL_CLUSTER_KEYS, else
                         cluster-keys.json in the state directory). A head creates it (mode 0600)
                         unless it exists; a node agent reads it
  --secure               require the keys even on loopback (other users of this machine then
                         cannot connect either)
  --address HOST:PORT    join the head there as a node agent
  --num-cpus N           CPUs this node offers (default: its cores)
  --num-gpus N           GPUs this node offers (ids 0..N-1; default: detected with nvidia-smi)
  --resources JSON       custom resources, e.g. '{"sandbox": 8}'
  --node-ip IP           address workers on this node listen on and the head is announced at
                         (default: --host when it names one address, else 127.0.0.1)
  --block                stay in the foreground`;

const DAEMON = siblingModulePath(import.meta.url, "./daemon");

/** The head or node process failed before it was ready (a runtime failure: exit 1). */
export class DaemonStartError extends Error {
  override name = "DaemonStartError";
  constructor(
    readonly role: "head" | "node",
    detail: string,
  ) {
    super(`the ${role} did not start: ${detail}`);
  }
}

/**
 * The key file a head uses: none on loopback (unless --secure); else the given or default file,
 * created with fresh keys when absent.
 */
function headKeyFile(host: string, given: string | undefined, secure: boolean): string | undefined {
  const file = given ?? process.env.TORL_CLUSTER_KEYS ?? defaultKeyFile();
  if (!secure && isLoopbackHost(host)) {
    // a plaintext head: keys left from an earlier cluster here would only confuse joiners
    if (!given && !process.env.TORL_CLUSTER_KEYS && keyFileExists(file)) rmSync(file);
    return undefined;
  }
  if (keyFileExists(file)) readKeyFile(file);
  else writeKeyFile(file, generateClusterKeys());
  return file;
}

/**
 * A node agent's key file when one is named (checked now, so a bad one is reported here); else the
 * daemon looks for the state directory's file of the head it joins.
 */
function joinKeyFile(given: string | undefined): string | undefined {
  const file = given ?? process.env.TORL_CLUSTER_KEYS;
  if (file) readKeyFile(file);
  return file;
}

export const startCommand = defineCommand({
  summary: "start a cluster head (--head) or a node agent (--address H:P)",
  usage,
  flags: {
    head: { type: "boolean" },
    port: { type: "integer", min: 0, max: 65535 },
    host: { type: "string" },
    address: { type: "address" },
    "num-cpus": { type: "number", min: 0 },
    "num-gpus": { type: "integer", min: 0 },
    resources: { type: "resources" },
    "node-ip": { type: "string" },
    keys: { type: "string" },
    secure: { type: "boolean" },
    block: { type: "boolean" },
  },
  async run(f) {
    if (!f.head && !f.address) throw new UsageError("give --head or --address HOST:PORT");
    if (f.head && f.address) throw new UsageError("--head and --address exclude each other");
    if (f.secure && !f.head) throw new UsageError("--secure is a head's flag; a node agent takes --keys");
    const role = f.head ? "head" : "node";
    const host: string = f.host ?? "127.0.0.1";
    const keysFile = f.head ? headKeyFile(host, f.keys, !!f.secure) : joinKeyFile(f.keys);
    const log = path.join(stateDir(), "logs", `${role}-${Date.now()}.log`);
    const opts: DaemonOptions = {
      head: !!f.head,
      address: f.address,
      port: f.port ?? 6380,
      host,
      nodeIp: f["node-ip"] ?? (host === "0.0.0.0" || host === "*" ? "127.0.0.1" : host),
      keysFile,
      numCpus: f["num-cpus"],
      numGpus: f["num-gpus"],
      resources: f.resources,
      log,
    };
    if (f.block) {
      await runDaemon(opts);
      await new Promise(() => {});
      return 0;
    }
    const fd = openSync(log, "a");
    const child = spawn(process.execPath, [...childExecArgv(DAEMON), DAEMON, JSON.stringify(opts)], {
      detached: true,
      stdio: ["ignore", fd, fd, "ipc"],
      env: process.env,
    });
    const ready = await new Promise<any>((resolve, reject) => {
      child.once("message", (m: { t: string } | DaemonFailure) => {
        if (m.t !== "failed") return resolve(m);
        const failure = m as DaemonFailure;
        reject(
          failure.kind === "port_in_use"
            ? new PortInUseError(opts.host, opts.port)
            : new DaemonStartError(role, `${failure.message}; see ${log}`),
        );
      });
      child.once("exit", (code) =>
        reject(new DaemonStartError(role, `it exited with code ${code} before it was ready; see ${log}`)),
      );
    });
    child.disconnect();
    child.unref();
    if (f.head) {
      console.log(`head started at ${ready.address} (pid ${ready.pid}, node ${ready.nodeId}); log ${log}`);
      if (keysFile) {
        console.log(`  authenticated and encrypted (CURVE); the cluster's keys are in ${keysFile}`);
        console.log(`  add a node:      pnpm torl start --address ${ready.address} --keys ${keysFile}`);
        console.log(`  connect a driver: init({ address: "${ready.address}", keys: "${keysFile}" })`);
        console.log("  (copy the key file to other machines over a secure channel; keep it mode 0600)");
      } else {
        console.log("  not authenticated: loopback only, any process on this machine can use it");
        console.log(`  add a node:      pnpm torl start --address ${ready.address}`);
        console.log(`  connect a driver: init({ address: "${ready.address}" })`);
      }
    } else {
      console.log(`node ${ready.nodeId} joined ${ready.address} (pid ${ready.pid}); log ${log}`);
    }
    console.log(JSON.stringify(ready));
  },
});
