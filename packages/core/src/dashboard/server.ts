/**
 * The dashboard: an HTTP server that shows the cluster (nodes, actors and the calls they run,
 * placement groups, objects) and its training runs (curves from metrics.jsonl, the phases of the last
 * step, the live trainer's current step), live, in a plain browser with nothing fetched from the
 * internet, and serves the same as JSON and as Prometheus metrics.
 *
 * It listens on loopback unless told otherwise; on any other address every request must carry the
 * token printed with its URL (the cluster's state names hosts, pids and code). Requests whose Host
 * header is not the dashboard's own are refused, so a web page cannot read it through DNS rebinding.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { ClusterStatus } from "../cluster/messages.js";
import { InputError } from "../errors.js";
import type { ProcessesReport } from "../observe/process-report.js";
import { isLoopbackHost } from "../wire/security.js";
import { DASHBOARD_PAGE } from "./page.js";
import { prometheusText } from "./prometheus.js";
import { type RunView, RunWatcher } from "./runs.js";

export interface DashboardOptions {
  /** Asks the head for the cluster's state (`clusterStatus` in a driver; the CLI uses a head client). */
  status: () => Promise<ClusterStatus>;
  /**
   * Asks the head for every process's report: running calls, objects, metrics, trainer activity
   * (`clusterProcesses` in a driver). Without it the page shows no calls or objects, and /metrics
   * only the head's view.
   */
  processes?: () => Promise<ProcessesReport>;
  /** Training run directories to show (each holds the metrics.jsonl a trainer writes). */
  runDirs?: readonly string[];
  /** Address to listen on (default 127.0.0.1). Any other than loopback requires the token. */
  host?: string;
  /** Port (default 8265, Ray's; 0 picks a free one). */
  port?: number;
  /** How often the page asks for news, in ms (default 1000). */
  refreshMs?: number;
  /** How long a status request may take before the page shows the head as unreachable (default 5000 ms). */
  statusTimeoutMs?: number;
}

export interface Dashboard {
  /** The page's address; with a token, carries it as `?token=`. */
  url: string;
  port: number;
  /** Set when listening beyond loopback: what every request must carry. */
  token: string | undefined;
  close(): Promise<void>;
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const host = options.host ?? "127.0.0.1";
  const port = options.port ?? 8265;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InputError(`dashboard port must be an integer from 0 to 65535, got ${port}`);
  }
  const refreshMs = options.refreshMs ?? 1000;
  if (!(refreshMs >= 100)) throw new InputError(`dashboard refreshMs must be >= 100, got ${refreshMs}`);
  const statusTimeoutMs = options.statusTimeoutMs ?? 5000;
  const token = isLoopbackHost(host) ? undefined : randomBytes(24).toString("hex");
  const watchers = (options.runDirs ?? []).map((d) => new RunWatcher(d));
  const runs = (): RunView[] => watchers.map((w) => w.refresh());

  const status = async (): Promise<{ status?: ClusterStatus; error?: string }> => {
    try {
      return { status: await withTimeout(options.status(), statusTimeoutMs, "the head's status") };
    } catch (e) {
      return { error: e instanceof Error ? e.message : String(e) };
    }
  };
  const processes = async (): Promise<{ processes?: ProcessesReport; processesError?: string }> => {
    if (!options.processes) return {};
    try {
      // the head waits a few seconds for silent processes: the page's deadline is longer
      const report = await withTimeout(options.processes(), statusTimeoutMs + 5000, "the processes' reports");
      return { processes: report };
    } catch (e) {
      return { processesError: e instanceof Error ? e.message : String(e) };
    }
  };
  const both = async () => {
    const [s, p] = await Promise.all([status(), processes()]);
    return { ...s, ...p };
  };

  let ownHosts: Set<string> = new Set();
  const authorized = (req: IncomingMessage, url: URL): boolean => {
    // on loopback, the Host header keeps out pages served elsewhere; beyond it, the token does
    if (!token) return ownHosts.has((req.headers.host ?? "").toLowerCase());
    const given =
      url.searchParams.get("token") ?? /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "";
    const a = Buffer.from(given);
    const b = Buffer.from(token);
    return a.length === b.length && timingSafeEqual(a, b);
  };

  const send = (res: ServerResponse, code: number, type: string, body: string): void => {
    res.writeHead(code, {
      "content-type": type,
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
      "content-security-policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
    });
    res.end(body);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://dashboard");
    if (!authorized(req, url)) {
      send(res, 403, "text/plain; charset=utf-8", "forbidden: wrong Host header or missing token\n");
      return;
    }
    if (req.method !== "GET") {
      send(res, 405, "text/plain; charset=utf-8", "only GET\n");
      return;
    }
    switch (url.pathname) {
      case "/":
        send(
          res,
          200,
          "text/html; charset=utf-8",
          DASHBOARD_PAGE.replace("__REFRESH_MS__", String(refreshMs)),
        );
        return;
      case "/api/status":
        send(res, 200, "application/json", JSON.stringify(await both()));
        return;
      case "/api/runs":
        send(res, 200, "application/json", JSON.stringify(runs()));
        return;
      case "/metrics": {
        const s = await both();
        send(
          res,
          200,
          "text/plain; version=0.0.4; charset=utf-8",
          prometheusText(s.status, runs(), s.processes),
        );
        return;
      }
      default:
        send(
          res,
          404,
          "text/plain; charset=utf-8",
          `no page ${url.pathname}: /, /api/status, /api/runs, /metrics\n`,
        );
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) send(res, 500, "text/plain; charset=utf-8", `${(e as Error).message}\n`);
      else res.destroy();
    });
  });
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        e.code === "EADDRINUSE"
          ? new InputError(
              `dashboard port ${port} on ${host} is in use: give another (--port, 0 picks a free one)`,
            )
          : e,
      ),
    );
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const shown = host.includes(":") ? `[${host}]` : host;
  ownHosts = new Set([`${shown}:${bound}`, `localhost:${bound}`, `127.0.0.1:${bound}`, `[::1]:${bound}`]);
  return {
    url: `http://${shown}:${bound}/${token ? `?token=${token}` : ""}`,
    port: bound,
    token,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
