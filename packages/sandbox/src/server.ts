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
  /** Largest request body accepted, bytes (default DEFAULT_MAX_BODY_BYTES); a larger one gets 413. */
  maxBodyBytes?: number;
  limits?: Partial<RequestLimits>;
}

/** Default request body limit: 64 MiB, room for `files` of a few tens of MB in base64. */
export const DEFAULT_MAX_BODY_BYTES = 64 << 20;

/** How long a refused (413) upload may keep sending before its connection is closed. */
const REFUSED_UPLOAD_DRAIN_MS = 5_000;

/** The server could not listen: `code` is the system's reason (EADDRINUSE: the port is taken). */
export class SandboxListenError extends Error {
  override name = "SandboxListenError";
  constructor(
    readonly host: string,
    readonly port: number,
    readonly code: string,
  ) {
    super(code === "EADDRINUSE" ? `port ${port} is in use` : `cannot listen on ${host}:${port} (${code})`);
  }
}

/** A request body over the server's limit (HTTP 413). */
class BodyTooLargeError extends Error {
  override name = "BodyTooLargeError";
  constructor(readonly limit: number) {
    super(
      `request body is larger than this server's limit of ${limit} bytes (set by sandbox serve --max-body-bytes)`,
    );
  }
}

/** A running SandboxFusion-compatible HTTP server. */
export interface SandboxServer {
  server: Server;
  host: string;
  port: number;
  url: string;
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body: unknown, close = false): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...(close ? { connection: "close" } : {}),
  });
  res.end(text);
}

/**
 * The body, or BodyTooLargeError as soon as it passes `max` bytes (at once when Content-Length says so).
 * On refusal the rest of the upload is read and dropped, so the client sees the 413 instead of a reset.
 */
function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const refuse = () => {
      req.removeAllListeners("data");
      req.resume();
      reject(new BodyTooLargeError(max));
    };
    if (Number(req.headers["content-length"] ?? 0) > max) return refuse();
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > max) return refuse();
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/** Answers 413, then closes the connection once the client stops sending (or after a bounded wait). */
function refuseBody(req: IncomingMessage, res: ServerResponse, error: BodyTooLargeError): void {
  send(res, 413, { status: "SandboxError", message: error.message }, true);
  if (req.complete) return;
  const timer = setTimeout(() => req.socket.destroy(), REFUSED_UPLOAD_DRAIN_MS);
  timer.unref();
  req.once("end", () => clearTimeout(timer));
  req.once("close", () => clearTimeout(timer));
}

/**
 * Serves `POST /run_code` (SandboxFusion request and response fields) and `GET /health` over the
 * executor. Requests beyond the executor's workers wait in its queue; none is dropped. A bad request
 * gets 400 with `{status: "SandboxError", message: <reason>}`, a body over `maxBodyBytes` 413 with the
 * same shape. Rejects with SandboxListenError when the port is taken or the address unusable.
 */
export async function serveSandbox(
  executor: SandboxExecutor,
  options: ServerOptions = {},
): Promise<SandboxServer> {
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isInteger(maxBody) || maxBody < 1) {
    throw new RangeError(`maxBodyBytes must be a positive integer, got ${maxBody}`);
  }
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
      if (error instanceof BodyTooLargeError) return refuseBody(req, res, error);
      if (error instanceof RunRequestError) {
        return send(res, 400, { status: "SandboxError", message: error.message });
      }
      return send(res, 500, { status: "SandboxError", message: (error as Error).message });
    }
  });
  server.keepAliveTimeout = 30_000;
  server.requestTimeout = 0;
  const host = options.host ?? "127.0.0.1";
  const wanted = options.port ?? 0;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(new SandboxListenError(host, wanted, error.code ?? error.message)),
    );
    server.listen(wanted, host, () => resolve());
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
