import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { checkedOption, RunRequestError, SandboxClosedError, SandboxConfigError } from "./errors.js";
import type { SandboxExecutor } from "./executor.js";
import { normalizeRequest, type RequestLimits, resolveLimits } from "./request.js";

export interface ServerOptions {
  /** Default 127.0.0.1 (loopback only). */
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Largest request body accepted, bytes (default DEFAULT_MAX_BODY_BYTES); a larger one gets 413. */
  maxBodyBytes?: number;
  limits?: Partial<RequestLimits>;
  /** Most connections open at once (default 256); one more is answered 503 and closed. */
  maxConnections?: number;
  /** ms a client may take to send a request's headers (default 10 s); then 408 and the connection closes. */
  headersTimeoutMs?: number;
  /** ms a client may take to send a whole request, body included (default 60 s); then 408 and close. */
  requestTimeoutMs?: number;
  /** ms an idle keep-alive connection is kept open between requests (default 15 s). */
  keepAliveTimeoutMs?: number;
}

/** Default request body limit: 64 MiB, room for `files` of a few tens of MB in base64. */
export const DEFAULT_MAX_BODY_BYTES = 64 << 20;

/** How many connections a server holds at once and how long a client may take (ms). */
export interface ConnectionLimits {
  maxConnections: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
}

/** Default connection limits; a run's own time (up to run_timeout) is not bounded by them. */
export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = {
  maxConnections: 256,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 15_000,
};

/** How often the header and request timeouts are checked, at most (ms): a stalled client is cut within its timeout plus this. */
const TIMEOUT_CHECK_MS = 1_000;

/** How long a connection refused for the connection limit may linger after its 503, ms. */
const REFUSED_LINGER_MS = 1_000;

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

/** The connection limits of `options` with defaults; throws SandboxConfigError naming a bad one. */
function connectionLimits(options: ServerOptions): ConnectionLimits {
  const limits = { ...DEFAULT_CONNECTION_LIMITS };
  for (const key of Object.keys(limits) as (keyof ConnectionLimits)[]) {
    limits[key] = checkedOption(key, options[key], DEFAULT_CONNECTION_LIMITS[key]);
  }
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new SandboxConfigError(
      "headersTimeoutMs",
      `${limits.headersTimeoutMs} ms is over requestTimeoutMs (${limits.requestTimeoutMs} ms), which includes the headers`,
    );
  }
  return limits;
}

/** Answers a connection over the limit with 503 and closes it (it is not counted). */
function refuseConnection(socket: Socket, max: number): void {
  const body = JSON.stringify({
    status: "SandboxError",
    message: `this server has ${max} connections open, its limit (sandbox serve --max-connections); try again later`,
  });
  socket.end(
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n" +
      `connection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
}

/**
 * Serves `POST /run_code` (SandboxFusion request and response fields) and `GET /health` over the
 * executor. Requests beyond the executor's workers wait in its queue; none is dropped. A bad request
 * gets 400 with `{status: "SandboxError", message: <reason>}`, a body over `maxBodyBytes` 413 with the
 * same shape. Slow clients are cut off: headers not sent within `headersTimeoutMs` or a request not
 * sent within `requestTimeoutMs` get 408 and the connection is closed (within the timeout plus 1 s); a
 * connection beyond `maxConnections` is answered 503 and closed. The time a run takes is not bounded
 * by these (it is bounded by its run_timeout). Rejects with SandboxListenError when the port is taken
 * or the address unusable, SandboxConfigError for a bad limit.
 */
export async function serveSandbox(
  executor: SandboxExecutor,
  options: ServerOptions = {},
): Promise<SandboxServer> {
  const maxBody = checkedOption("maxBodyBytes", options.maxBodyBytes, DEFAULT_MAX_BODY_BYTES);
  const limits = resolveLimits(options.limits);
  const conn = connectionLimits(options);
  const refused = new WeakSet<Socket>();
  // how often stalled connections are looked for (read when it starts listening)
  const checkMs = Math.min(TIMEOUT_CHECK_MS, conn.headersTimeoutMs);
  const server = createServer({ connectionsCheckingInterval: checkMs }, async (req, res) => {
    // a connection refused for the limit has had its 503 already
    if (refused.has(req.socket)) return;
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
      // the executor behind this server is closed: the service is gone, not the request at fault
      if (error instanceof SandboxClosedError)
        return send(res, 503, { status: "SandboxError", message: error.message });
      return send(res, 500, { status: "SandboxError", message: (error as Error).message });
    }
  });
  server.headersTimeout = conn.headersTimeoutMs;
  server.requestTimeout = conn.requestTimeoutMs;
  server.keepAliveTimeout = conn.keepAliveTimeoutMs;
  let open = 0;
  server.on("connection", (socket: Socket) => {
    if (open >= conn.maxConnections) {
      refused.add(socket);
      return refuseConnection(socket, conn.maxConnections);
    }
    open++;
    socket.once("close", () => open--);
  });
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
