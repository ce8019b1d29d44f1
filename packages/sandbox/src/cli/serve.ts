import { type CliCommand, defineCommand, UsageError } from "@torl-ts/core";
import { SandboxExecutor } from "../executor.js";
import { DEFAULT_LIMITS } from "../request.js";
import {
  DEFAULT_CONNECTION_LIMITS,
  DEFAULT_MAX_BODY_BYTES,
  SandboxListenError,
  type SandboxServer,
  serveSandbox,
} from "../server.js";

const SERVE_FLAGS = {
  port: { type: "integer", min: 0, max: 65535 },
  host: { type: "string" },
  workers: { type: "integer", min: 1 },
  "max-processes": { type: "integer", min: 1 },
  "max-output-bytes": { type: "integer", min: 1 },
  "max-body-bytes": { type: "integer", min: 1 },
  "max-memory-mb": { type: "integer", min: 1 },
  "max-run-timeout": { type: "integer", min: 1 },
  "max-files": { type: "integer", min: 1 },
  "max-files-bytes": { type: "integer", min: 1 },
  "max-fetch-files": { type: "integer", min: 1 },
  "setup-timeout": { type: "number", min: 0.001 },
  "max-connections": { type: "integer", min: 1 },
  "headers-timeout": { type: "number", min: 0.001 },
  "request-timeout": { type: "number", min: 0.001 },
  "keep-alive-timeout": { type: "number", min: 0.001 },
} as const;

const C = DEFAULT_CONNECTION_LIMITS;

/** `sandbox serve`: its flags are those after the word `serve`. */
const serveCommand = defineCommand({
  summary: "serve the SandboxFusion-compatible code execution API (POST /run_code, GET /health)",
  usage: [
    "usage: pnpm torl sandbox serve --port P [--host 127.0.0.1] [--workers N]",
    `                               [--max-processes 64] [--max-output-bytes 1048576] [--max-body-bytes ${DEFAULT_MAX_BODY_BYTES}]`,
    "                               [--max-memory-mb 8192] [--max-run-timeout 300]",
    `                               [--max-files ${DEFAULT_LIMITS.maxFiles}] [--max-files-bytes ${DEFAULT_LIMITS.maxFilesBytes}] [--max-fetch-files ${DEFAULT_LIMITS.maxFetchFiles}] [--setup-timeout ${DEFAULT_LIMITS.setupTimeout}]`,
    `                               [--max-connections ${C.maxConnections}] [--headers-timeout ${C.headersTimeoutMs / 1000}] [--request-timeout ${C.requestTimeoutMs / 1000}] [--keep-alive-timeout ${C.keepAliveTimeoutMs / 1000}]`,
    "",
    "Starts N warm Python interpreters (sympy and numpy imported) that fork an isolated child per run,",
    "and serves SandboxFusion's API on host:port (loopback unless --host says otherwise).",
    "  POST /run_code  {code, language: 'python', run_timeout, memory_limit_MB, stdin, files, fetch_files}",
    "  GET  /health    workers, queue, and which isolation protections are active",
    "Requests beyond N wait in a queue; none is dropped. Missing protections are printed at start.",
    "A request body over --max-body-bytes (default 64 MiB) is answered 413 {status, message}.",
    "A port already in use exits 2 with 'error: port P is in use' (--port 0 picks a free one).",
    "Per request: at most --max-files files of --max-files-bytes bytes in all (decoded) and",
    "--max-fetch-files fetch_files, else 400; files not written within --setup-timeout seconds fail that",
    "request (SandboxError), not the worker.",
    "Connections: at most --max-connections open (one more gets 503); a client that has not sent its",
    "headers within --headers-timeout seconds, or its whole request within --request-timeout seconds,",
    "gets 408 and is disconnected (checked every second); an idle keep-alive connection is closed after",
    "--keep-alive-timeout seconds. A run's own time is bounded by its run_timeout, not by these.",
  ].join("\n"),
  flags: SERVE_FLAGS,
  async run(flags) {
    // the most a request may ask for; more (or a limit <= 0) is answered 400
    const limits = {
      maxMemoryMB: flags["max-memory-mb"] ?? DEFAULT_LIMITS.maxMemoryMB,
      maxRunTimeout: flags["max-run-timeout"] ?? DEFAULT_LIMITS.maxRunTimeout,
      maxFiles: flags["max-files"] ?? DEFAULT_LIMITS.maxFiles,
      maxFilesBytes: flags["max-files-bytes"] ?? DEFAULT_LIMITS.maxFilesBytes,
      maxFetchFiles: flags["max-fetch-files"] ?? DEFAULT_LIMITS.maxFetchFiles,
      setupTimeout: flags["setup-timeout"] ?? DEFAULT_LIMITS.setupTimeout,
    };
    const ms = (flag: "headers-timeout" | "request-timeout" | "keep-alive-timeout", fallback: number) => {
      const s = flags[flag];
      return s === undefined ? fallback : Math.max(1, Math.round(s * 1000));
    };
    const connections = {
      maxConnections: flags["max-connections"] ?? C.maxConnections,
      headersTimeoutMs: ms("headers-timeout", C.headersTimeoutMs),
      requestTimeoutMs: ms("request-timeout", C.requestTimeoutMs),
      keepAliveTimeoutMs: ms("keep-alive-timeout", C.keepAliveTimeoutMs),
    };
    if (connections.headersTimeoutMs > connections.requestTimeoutMs) {
      throw new UsageError(
        `--headers-timeout (${connections.headersTimeoutMs / 1000} s) must be at most --request-timeout (${connections.requestTimeoutMs / 1000} s), which includes the headers`,
      );
    }
    const port = flags.port;
    if (port === undefined) throw new UsageError("--port is required");
    const workers = flags.workers ?? 2;
    const host = flags.host ?? "127.0.0.1";
    const maxBodyBytes = flags["max-body-bytes"] ?? DEFAULT_MAX_BODY_BYTES;
    console.log(`starting ${workers} sandbox worker(s)...`);
    const executor = await new SandboxExecutor({
      workers,
      maxProcesses: flags["max-processes"] ?? 64,
      maxOutputBytes: flags["max-output-bytes"] ?? 1 << 20,
      limits,
      log: (line) => console.error(`[sandbox] ${line}`),
    }).start();
    const health = executor.health();
    for (const [name, p] of Object.entries(health.protections)) {
      console.log(
        `  ${p.active ? "on " : "OFF"} ${name.padEnd(26)} ${p.active ? (p.how ?? "") : (p.reason ?? "")}`,
      );
    }
    if (health.warnings.length > 0) {
      console.error(
        `WARNING: sandbox isolation is incomplete on this machine:\n  ${health.warnings.join("\n  ")}`,
      );
    }
    let srv: SandboxServer;
    try {
      srv = await serveSandbox(executor, { host, port, maxBodyBytes, limits, ...connections });
    } catch (error) {
      await executor.close();
      if (!(error instanceof SandboxListenError)) throw error;
      // A setting the user chose that cannot work: a usage-class failure, one line, no stack.
      const hint = error.code === "EADDRINUSE" ? "; pick another --port, or --port 0 for a free one" : "";
      console.error(`error: ${error.message}${hint}`);
      return 2;
    }
    if (host !== "127.0.0.1" && host !== "localhost" && host !== "::1") {
      console.error(`WARNING: listening on ${host}, not loopback: anyone who can reach it can run code here`);
    }
    console.log(`sandbox serving on ${srv.url} (POST /run_code, GET /health)`);
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
    });
    console.log("stopping...");
    await srv.close();
    await executor.close();
  },
});

export const sandboxCommand: CliCommand = {
  summary: serveCommand.summary,
  usage: serveCommand.usage,
  async run(args) {
    if (args[0] !== "serve")
      throw new UsageError(args[0] ? `unknown subcommand '${args[0]}'` : "missing subcommand 'serve'");
    return serveCommand.run(args.slice(1));
  },
};
