import { spawnSync } from "node:child_process";
import { request } from "node:http";
import { createServer, type Server } from "node:net";
import test from "ava";
import { SandboxExecutor, SandboxListenError, type SandboxServer, serveSandbox } from "../src/index.js";

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
  await t.throwsAsync(serveSandbox(ex, { maxBodyBytes: 0 }), { instanceOf: RangeError });
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
