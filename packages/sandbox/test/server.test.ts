import { execFile, spawnSync } from "node:child_process";
import { request } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { promisify } from "node:util";
import { UsageError } from "@torl-ts/core";
import test from "ava";
import {
  SandboxConfigError,
  SandboxExecutor,
  SandboxListenError,
  type SandboxServer,
  sandboxCommand,
  serveSandbox,
} from "../src/index.js";

const run = promisify(execFile);
const CLI = ["--import=tsx", "examples/torl/src/cli.ts"];

let ex: SandboxExecutor;
let srv: SandboxServer;
const LIMIT = 4096;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
  srv = await serveSandbox(ex, { port: 0, maxBodyBytes: LIMIT });
});

test.after.always(async () => {
  await srv?.close();
  await ex?.close();
});

function holdPort(): Promise<{ holder: Server; port: number }> {
  return new Promise((resolve) => {
    const holder = createServer().listen(0, "127.0.0.1", () => {
      resolve({ holder, port: (holder.address() as { port: number }).port });
    });
  });
}

/** POSTs `chunks` without a Content-Length (chunked), as a streaming client does. */
function postChunked(url: string, chunks: number, size: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/run_code`, { method: "POST" }, (res) => {
      let body = "";
      res.on("data", (c) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    let sent = 0;
    const push = () => {
      while (sent < chunks) {
        sent++;
        if (!req.write(Buffer.alloc(size, 120))) return void req.once("drain", push);
      }
      req.end();
    };
    push();
  });
}

test("a body over the limit gets 413 with a JSON message naming the limit and its flag, not a reset", async (t) => {
  for (const size of [LIMIT + 1, 8 << 20]) {
    const res = await fetch(`${srv.url}/run_code`, {
      method: "POST",
      body: JSON.stringify({ code: "#".repeat(size), language: "python" }),
    });
    t.is(res.status, 413, `body of ${size} bytes`);
    t.is(res.headers.get("content-type"), "application/json");
    const json = (await res.json()) as { status: string; message: string };
    t.is(json.status, "SandboxError");
    t.regex(json.message, new RegExp(`limit of ${LIMIT} bytes .*--max-body-bytes`));
  }
  // without Content-Length the limit is found while reading, and the reply still arrives
  const chunked = await postChunked(srv.url, 200, 16 << 10);
  t.is(chunked.status, 413);
  t.regex(chunked.body, /limit of 4096 bytes/);
  // the server goes on serving
  const ok = await fetch(`${srv.url}/run_code`, {
    method: "POST",
    body: JSON.stringify({ code: "print(6 * 7)", language: "python" }),
  });
  t.is(ok.status, 200);
  t.is(((await ok.json()) as { run_result: { stdout: string } }).run_result.stdout, "42\n");
});

test("serveSandbox on a port in use rejects with SandboxListenError naming the port", async (t) => {
  const { holder, port } = await holdPort();
  try {
    const error = await t.throwsAsync(serveSandbox(ex, { port }), { instanceOf: SandboxListenError });
    t.is(error?.code, "EADDRINUSE");
    t.is(error?.port, port);
    t.is(error?.message, `port ${port} is in use`);
  } finally {
    holder.close();
  }
  await t.throwsAsync(serveSandbox(ex, { maxBodyBytes: 0 }), {
    instanceOf: SandboxConfigError,
    message: /maxBodyBytes: must be a whole number >= 1, got 0/,
  });
});

test("pnpm torl sandbox serve on a port in use exits 2 with one error line: no stack, no hang", async (t) => {
  const { holder, port } = await holdPort();
  try {
    // spawnSync blocks this worker; the holder only needs the kernel's listen queue meanwhile
    const r = spawnSync(
      process.execPath,
      [
        "--import=tsx",
        "examples/torl/src/cli.ts",
        "sandbox",
        "serve",
        "--port",
        String(port),
        "--workers",
        "1",
      ],
      { cwd: process.cwd(), encoding: "utf8", timeout: 180_000 },
    );
    t.is(r.signal, null, "it exited by itself rather than hanging until killed");
    t.is(r.status, 2, r.stderr);
    t.regex(r.stderr, new RegExp(`^error: port ${port} is in use`, "m"));
    t.notRegex(r.stderr, /^\s+at /m, "no stack trace");
  } finally {
    holder.close();
  }
});

/** A raw connection that records what it received and when it was closed (ms after it opened). */
interface Held {
  socket: Socket;
  received: () => string;
  closed: Promise<number>;
}

function hold(port: number, send: string): Promise<Held> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let got = "";
    const socket = connect(port, "127.0.0.1");
    const closed = new Promise<number>((r) => socket.once("close", () => r(performance.now() - started)));
    socket.on("data", (c) => {
      got += c.toString();
    });
    socket.on("error", () => {});
    socket.once("connect", () => {
      if (send) socket.write(send);
      resolve({ socket, received: () => got, closed });
    });
    socket.once("error", reject);
  });
}

// serial: they time connections against a server in this process, so nothing else may hold its event loop
test.serial(
  "stalled connections (half a header, a body that never completes, idle keep-alive) are closed within the timeouts; requests meanwhile are served",
  async (t) => {
    const slow = await serveSandbox(ex, {
      port: 0,
      headersTimeoutMs: 1000,
      requestTimeoutMs: 2000,
      keepAliveTimeoutMs: 1000,
      maxConnections: 64,
    });
    try {
      const halfHeader = "POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: applic";
      const halfBody =
        'POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 200\r\n\r\n{"code": "pri';
      const stalled = await Promise.all(
        Array.from({ length: 50 }, (_, i) => hold(slow.port, i % 2 ? halfBody : halfHeader)),
      );
      // a complete request on a keep-alive connection, then silence
      const idle = await hold(slow.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      // meanwhile a normal request is served, on a run that lasts longer than the request timeout
      const res = await fetch(`${slow.url}/run_code`, {
        method: "POST",
        body: JSON.stringify({ code: "import time\ntime.sleep(2.5)\nprint('served')", run_timeout: 10 }),
      });
      t.is(res.status, 200);
      t.is(((await res.json()) as { run_result: { stdout: string } }).run_result.stdout, "served\n");
      // bound: the timeout plus the once-a-second check, with room for a loaded machine
      const bound = 2000 + 1000 + 5000;
      const closedAfter = await Promise.all(stalled.map((h) => h.closed));
      t.true(
        Math.max(...closedAfter) < bound,
        `stalled connections closed after ${closedAfter.map(Math.round)} ms`,
      );
      for (const h of stalled) t.regex(h.received(), /^HTTP\/1\.1 408 Request Timeout/);
      t.true((await idle.closed) < bound, "the idle keep-alive connection is closed");
      t.regex(idle.received(), /^HTTP\/1\.1 200 OK/);
    } finally {
      await slow.close();
    }
  },
);

test.serial(
  "a connection over the cap is answered 503 naming the limit; once one closes, requests are served again",
  async (t) => {
    const capped = await serveSandbox(ex, { port: 0, maxConnections: 3 });
    try {
      const held = await Promise.all([1, 2, 3].map(() => hold(capped.port, "")));
      const extra = await hold(capped.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      await extra.closed;
      t.regex(extra.received(), /^HTTP\/1\.1 503 Service Unavailable/);
      t.regex(
        extra.received(),
        /this server has 3 connections open, its limit \(sandbox serve --max-connections\)/,
      );
      held[0]!.socket.destroy();
      await held[0]!.closed;
      // the server sees the close a moment after the client
      let status = 0;
      for (let i = 0; i < 50 && status !== 200; i++) {
        const next = await hold(
          capped.port,
          "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        );
        await next.closed;
        status = Number(/^HTTP\/1\.1 (\d+)/.exec(next.received())?.[1]);
        if (status !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      t.is(status, 200);
      for (const h of held) h.socket.destroy();
    } finally {
      await capped.close();
    }
  },
);

test("bad connection limits are refused: SandboxConfigError from serveSandbox, exit 2 from sandbox serve", async (t) => {
  for (const [options, message] of [
    [{ maxConnections: 0 }, /maxConnections: must be a whole number >= 1, got 0/],
    [{ headersTimeoutMs: 1.5 }, /headersTimeoutMs: must be a whole number >= 1, got 1.5/],
    [{ headersTimeoutMs: Number.NaN }, /headersTimeoutMs: must be a whole number >= 1, got NaN/],
    // the request limits are checked as the executor checks them: none may refuse everything or be ignored
    [{ limits: { maxRunTimeout: -1 } }, /limits.maxRunTimeout: must be a number > 0, got -1/],
    [{ limits: { maxRunTimeout: Number.NaN } }, /limits.maxRunTimeout: must be a number > 0, got NaN/],
    [{ limits: { maxRunTimeout: "2" } }, /limits.maxRunTimeout: must be a number > 0, got "2"/],
    [{ limits: { maxRuntime: 5 } }, /limits.maxRuntime: no such limit/],
    [
      { headersTimeoutMs: 5000, requestTimeoutMs: 1000 },
      /headersTimeoutMs: 5000 ms is over requestTimeoutMs \(1000 ms\)/,
    ],
  ] as const) {
    await t.throwsAsync(serveSandbox(ex, { port: 0, ...(options as object) }), {
      instanceOf: SandboxConfigError,
      message,
    });
  }
  for (const [args, message] of [
    [["--max-connections", "0"], "--max-connections must be an integer >= 1, got '0'"],
    [["--headers-timeout", "0"], "--headers-timeout must be a number >= 0.001, got '0'"],
    [["--request-timeout", "x"], "--request-timeout must be a number >= 0.001, got 'x'"],
    [["--keep-alive-timeout", "-1"], "--keep-alive-timeout must be a number >= 0.001, got '-1'"],
    [["--max-files", "1.5"], "--max-files must be an integer >= 1, got '1.5'"],
    [["--setup-timeout", "0"], "--setup-timeout must be a number >= 0.001, got '0'"],
    [
      ["--headers-timeout", "30", "--request-timeout", "20"],
      "--headers-timeout (30 s) must be at most --request-timeout (20 s), which includes the headers",
    ],
  ] as const) {
    await t.throwsAsync(sandboxCommand.run(["serve", "--port", "0", ...args]), {
      instanceOf: UsageError,
      message,
    });
  }
  const r = await run(process.execPath, [
    ...CLI,
    "sandbox",
    "serve",
    "--port",
    "0",
    "--max-connections",
    "0",
  ]).catch((e: { code: number; stderr: string }) => e);
  t.is((r as { code: number }).code, 2);
  t.regex(
    r.stderr,
    /^error: --max-connections must be an integer >= 1, got '0' \(see pnpm torl sandbox --help\)\n$/,
  );
  for (const flag of [
    "--max-connections",
    "--headers-timeout",
    "--request-timeout",
    "--keep-alive-timeout",
    "--max-files",
    "--max-files-bytes",
    "--max-fetch-files",
    "--setup-timeout",
  ])
    t.true(sandboxCommand.usage.includes(flag), `--help shows ${flag}`);
});
