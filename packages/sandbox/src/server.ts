import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { RunRequestError } from "./errors.js";
import type { SandboxExecutor } from "./executor.js";
import { DEFAULT_LIMITS, normalizeRequest, type RequestLimits } from "./request.js";

export interface ServerOptions {
  /** Default 127.0.0.1 (loopback only). */
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Largest request body accepted, bytes (default 64 MiB). */
  maxBodyBytes?: number;
  limits?: Partial<RequestLimits>;
}

/** A running SandboxFusion-compatible HTTP server. */
export interface SandboxServer {
  server: Server;
  host: string;
  port: number;
  url: string;
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > max) {
        reject(new RunRequestError("body", `larger than ${max} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * Serves `POST /run_code` (SandboxFusion request and response fields) and `GET /health` over the
 * executor. Requests beyond the executor's workers wait in its queue; none is dropped. A bad request
 * gets 400 with `{status: "SandboxError", message: <reason>}`.
 */
export async function serveSandbox(
  executor: SandboxExecutor,
  options: ServerOptions = {},
): Promise<SandboxServer> {
  const maxBody = options.maxBodyBytes ?? 64 << 20;
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const server = createServer(async (req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    try {
      if (path === "/health" || path === "/v1/ping") {
        if (req.method !== "GET") return send(res, 405, { message: "use GET" });
        const health = executor.health();
        return send(res, health.status === "down" ? 503 : 200, health);
      }
      if (path === "/run_code") {
        if (req.method !== "POST") return send(res, 405, { message: "use POST with a JSON body" });
        const raw = await readBody(req, maxBody);
        let body: unknown;
        try {
          body = JSON.parse(raw.toString("utf8"));
        } catch (error) {
          throw new RunRequestError("body", `not valid JSON (${(error as Error).message})`);
        }
        const request = normalizeRequest(body, limits);
        const response = await executor.runNormalized(request);
        return send(res, 200, response);
      }
      return send(res, 404, {
        message: `no route ${req.method} ${path}; routes: POST /run_code, GET /health`,
      });
    } catch (error) {
      if (error instanceof RunRequestError) {
        return send(res, 400, { status: "SandboxError", message: error.message });
      }
      return send(res, 500, { status: "SandboxError", message: (error as Error).message });
    }
  });
  server.keepAliveTimeout = 30_000;
  server.requestTimeout = 0;
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    host,
    port,
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
