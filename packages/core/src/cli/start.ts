/** `torl start`: start a head (`--head`) or a node agent joining one (`--address`), in the background. */
import { spawn } from "node:child_process";
import { openSync } from "node:fs";
import path from "node:path";
import { type CliCommand, UsageError } from "../cli-command.js";
import { childExecArgv, siblingModulePath } from "../module-files.js";
import { type DaemonFailure, type DaemonOptions, PortInUseError, runDaemon } from "./daemon.js";
import { parseFlags } from "./flags.js";
import { stateDir } from "./state.js";

const usage = `usage: pnpm torl start --head [--port P] [--host H] [options]
       pnpm torl start --address HOST:PORT [options]

Starts a cluster head (with a local node) or a node agent that joins the head at HOST:PORT.
Runs in the background and prints the address; \`pnpm torl stop\` stops what was started here.

options:
  --head                 start a head (control plane) and a node on this machine
  --port P               head port (default 6380; 0 = any free port)
  --host H               interface the head binds (default 0.0.0.0)
  --address HOST:PORT    join the head there as a node agent
  --num-cpus N           CPUs this node offers (default: its cores)
  --num-gpus N           GPUs this node offers (ids 0..N-1; default: detected with nvidia-smi)
  --resources JSON       custom resources, e.g. '{"sandbox": 8}'
  --node-ip IP           address workers on this node listen on (default 127.0.0.1)
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

export const startCommand: CliCommand = {
  summary: "start a cluster head (--head) or a node agent (--address H:P)",
  usage,
  async run(args) {
    const { flags: f } = parseFlags(args, {
      head: { type: "boolean" },
      port: { type: "integer", min: 0, max: 65535 },
      host: { type: "string" },
      address: { type: "string" },
      "num-cpus": { type: "number", min: 0 },
      "num-gpus": { type: "integer", min: 0 },
      resources: { type: "resources" },
      "node-ip": { type: "string" },
      block: { type: "boolean" },
    });
    if (!f.head && !f.address) throw new UsageError("give --head or --address HOST:PORT");
    if (f.head && f.address) throw new UsageError("--head and --address exclude each other");
    if (f.address && !/^[^:\s]+:\d+$/.test(f.address))
      throw new UsageError(`--address must be HOST:PORT, got '${f.address}'`);
    const role = f.head ? "head" : "node";
    const log = path.join(stateDir(), "logs", `${role}-${Date.now()}.log`);
    const opts: DaemonOptions = {
      head: !!f.head,
      address: f.address,
      port: f.port ?? 6380,
      host: f.host ?? "0.0.0.0",
      nodeIp: f["node-ip"] ?? "127.0.0.1",
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
      console.log(`  add a node:      pnpm torl start --address ${ready.address}`);
      console.log(`  connect a driver: init({ address: "${ready.address}" })`);
    } else {
      console.log(`node ${ready.nodeId} joined ${ready.address} (pid ${ready.pid}); log ${log}`);
    }
    console.log(JSON.stringify(ready));
    return 0;
  },
};
