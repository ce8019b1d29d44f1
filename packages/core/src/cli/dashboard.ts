/** `torl dashboard`: serves the cluster's dashboard (and /metrics) until interrupted. */
import { resolveJoinKeys } from "../cluster/key-file.js";
import type { ClusterStatus } from "../cluster/messages.js";
import { startDashboard } from "../dashboard/server.js";
import { HeadClient } from "../runtime/head-client.js";
import { setClusterKeys } from "../wire/security.js";
import { defineCommand } from "./define.js";
import { headAddressFrom } from "./flags.js";

const usage = `usage: pnpm torl dashboard [--address HOST:PORT] [--keys PATH] [--run DIR]... [--host ADDR] [--port N]

Serves a live page of the cluster (nodes and their resources, actors with their state, restarts,
pid, node and the call each is running, placement groups, objects with their owner, size and
holders) and of training runs (curves from each --run directory's metrics.jsonl, the phases of its
last step, a running trainer's current step), plus the same as Prometheus metrics at /metrics (each
process's calls, queues, object store, sandbox runs, trainer phases) and as JSON at /api/status and
/api/runs. Runs until interrupted.

  --address   the head (default: TORL_ADDRESS, else the head last started on this machine)
  --keys      the cluster's key file, for an authenticated cluster (as torl status)
  --run       a run directory to show; repeat for several
  --host      where to listen (default 127.0.0.1); any other address needs the token printed
              with the URL on every request (?token=, or Authorization: Bearer for Prometheus)
  --port      port (default 8265; 0 picks a free one)`;

export const dashboardCommand = defineCommand({
  summary: "serve a live dashboard of the cluster and its training runs (and /metrics)",
  usage,
  flags: {
    address: { type: "address" },
    keys: { type: "string" },
    run: { type: "strings" },
    host: { type: "string" },
    port: { type: "integer", min: 0, max: 65535 },
  },
  async run(f) {
    const address = headAddressFrom(f.address);
    setClusterKeys(resolveJoinKeys(f.keys, address));
    const client = new HeadClient(`tcp://${address}`, () => {});
    const dashboard = await startDashboard({
      status: () => client.request("status", {}, 5000) as Promise<ClusterStatus>,
      processes: () => client.request("processes", {}, 10_000),
      runDirs: f.run ?? [],
      host: f.host,
      port: f.port,
    });
    console.log(`dashboard of the head at ${address}: ${dashboard.url}`);
    console.log(`Prometheus metrics: ${dashboard.url.replace(/\/(\?|$)/, "/metrics$1")}`);
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
    });
    await dashboard.close();
    client.close();
    return 0;
  },
});
