import { once } from "node:events";
import { type AddressInfo, createServer, type Socket } from "node:net";
import test from "ava";
import {
  RunRequestError,
  SandboxConfigError,
  SandboxExecutor,
  SandboxFusionClient,
  SandboxHttpError,
  type SandboxServer,
  serveSandbox,
} from "../src/index.js";

let ex: SandboxExecutor;
let srv: SandboxServer;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 2, log: () => {} }).start();
  srv = await serveSandbox(ex, { port: 0 });
});

test.after.always(async () => {
  await srv?.close();
  await ex?.close();
});

async function post(body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${srv.url}/run_code`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

test("listens on loopback by default", (t) => {
  t.is(srv.host, "127.0.0.1");
});

test("POST /run_code answers with SandboxFusion's fields", async (t) => {
  const files = { "data/in.txt": Buffer.from("21\n").toString("base64") };
  const { status, json } = await post({
    code: "n = int(open('data/in.txt').read()) * int(input())\nprint(n)\nopen('out.txt','w').write(str(n))",
    language: "python",
    stdin: "2\n",
    files,
    fetch_files: ["out.txt"],
    run_timeout: 5,
    memory_limit_MB: 256,
  });
  t.is(status, 200);
  t.is(json.status, "Success");
  t.is(json.message, "");
  t.is(json.compile_result, null);
  const run = json.run_result as Record<string, unknown>;
  t.is(run.status, "Finished");
  t.is(run.return_code, 0);
  t.is(run.stdout, "42\n");
  t.is(run.stderr, "");
  t.is(typeof run.execution_time, "number");
  t.deepEqual(json.files, { "out.txt": Buffer.from("42").toString("base64") });
});

test("a failing program is Failed/Finished with its exit code and traceback", async (t) => {
  const { json } = await post({ code: "import sys\nprint('a')\nsys.exit(3)", language: "python" });
  t.is(json.status, "Failed");
  t.like(json.run_result as object, { status: "Finished", return_code: 3, stdout: "a\n" });
  const err = await post({ code: "1/0", language: "python" });
  t.regex((err.json.run_result as { stderr: string }).stderr, /ZeroDivisionError: division by zero\n$/);
});

test("a timeout is TimeLimitExceeded", async (t) => {
  const { json } = await post({ code: "while True: pass", language: "python", run_timeout: 0.5 });
  t.is(json.status, "Failed");
  t.like(json.run_result as object, { status: "TimeLimitExceeded", return_code: null });
});

test("a bad request gets 400 with the reason", async (t) => {
  const cases: [unknown, RegExp][] = [
    ["{not json", /not valid JSON/],
    [{ language: "python" }, /code: is required/],
    [{ code: "print(1)", language: "cobol" }, /language: 'cobol' is not supported/],
    [{ code: "print(1)", run_timeout: "ten" }, /run_timeout: must be a finite number/],
    [{ code: "print(1)", run_timeout: -1 }, /run_timeout: must be > 0/],
    [{ code: "print(1)", run_timeout: 301 }, /run_timeout: 301 s is over this server's limit of 300 s/],
    [{ code: "print(1)", memory_limit_MB: 0 }, /memory_limit_MB: must be > 0 MB, got 0/],
    [{ code: "print(1)", memory_limit_MB: -1 }, /memory_limit_MB: must be > 0 MB, got -1/],
    [{ code: "print(1)", memory_limit_MB: "512" }, /memory_limit_MB: must be a finite number/],
    [
      { code: "print(1)", memory_limit_MB: 1e9 },
      /memory_limit_MB: 1000000000 MB is over this server's limit of 8192 MB/,
    ],
    [{ code: "print(1)", files: { "../etc/x": "aGk=" } }, /must be relative/],
    [{ code: "print(1)", files: { "a.txt": "not base64!" } }, /base64/],
    [[1, 2], /body: must be a JSON object/],
    [
      { code: "print(1)", runtimeout: 60 },
      /runtimeout: no such field; a request's fields are code, language/,
    ],
  ];
  for (const [body, reason] of cases) {
    const { status, json } = await post(body);
    t.is(status, 400, JSON.stringify(body));
    t.regex(String(json.message), reason);
  }
  const get = await fetch(`${srv.url}/run_code`);
  t.is(get.status, 405);
  t.is((await fetch(`${srv.url}/nope`)).status, 404);
});

test("GET /health reports workers and the protections in force", async (t) => {
  const res = await fetch(`${srv.url}/health`);
  t.is(res.status, 200);
  const h = (await res.json()) as {
    status: string;
    workers: { total: number };
    protections: Record<string, unknown>;
  };
  t.is(h.workers.total, 2);
  t.truthy(h.protections.network_namespace);
  t.truthy(h.protections.filesystem);
});

test("more concurrent requests than workers are queued, none dropped", async (t) => {
  const n = 24;
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      post({ code: `import time\ntime.sleep(0.05)\nprint(${i})`, language: "python" }),
    ),
  );
  t.deepEqual(
    results.map((r) => r.status),
    Array(n).fill(200),
  );
  t.deepEqual(
    results.map((r) => (r.json.run_result as { stdout: string }).stdout),
    Array.from({ length: n }, (_, i) => `${i}\n`),
  );
});

test("SandboxFusionClient (the external-server backend) works against this server", async (t) => {
  const client = new SandboxFusionClient(srv.url, { concurrency: 4 });
  const r = await client.run("print(sum(range(10)))");
  t.is(r.status, "Success");
  t.is(r.run_result?.stdout, "45\n");
  const many = await Promise.all(Array.from({ length: 8 }, (_, i) => client.run(`print(${i} * 2)`)));
  t.deepEqual(
    many.map((x) => x.run_result?.stdout),
    Array.from({ length: 8 }, (_, i) => `${i * 2}\n`),
  );
  const health = await client.health();
  t.is(health.workers.total, 2);
  const bad = await t.throwsAsync(client.run({ code: "print(1)", language: "cobol" }), {
    instanceOf: SandboxHttpError,
  });
  t.is(bad?.httpStatus, 400);
  const down = new SandboxFusionClient("http://127.0.0.1:1", { attempts: 2 });
  const e = await t.throwsAsync(down.run("print(1)"), { instanceOf: SandboxHttpError });
  t.is(e?.httpStatus, null);
});

test("SandboxFusionClient: options and URLs are checked, a silent server times out, failures say why", async (t) => {
  for (const [options, message] of [
    [{ concurrency: 0 }, /concurrency: must be a whole number >= 1, got 0/],
    [{ attempts: 0 }, /attempts: must be a whole number >= 1, got 0/],
    [{ attempts: "3" }, /attempts: must be a whole number >= 1, got "3"/],
    [
      { extraTimeoutMs: Number.POSITIVE_INFINITY },
      /extraTimeoutMs: must be a whole number >= 0, got Infinity/,
    ],
    [{ healthTimeoutMs: -1 }, /healthTimeoutMs/],
    [{ atempts: 2 }, /atempts: no such option; the options are extraTimeoutMs, attempts, concurrency/],
  ] as const)
    t.throws(() => new SandboxFusionClient("http://127.0.0.1:1", options as never), {
      instanceOf: SandboxConfigError,
      message,
    });
  for (const url of ["localhost:8080", "ftp://127.0.0.1/", "", "not a url"])
    t.throws(() => new SandboxFusionClient(url), {
      instanceOf: SandboxConfigError,
      message: /http:\/\/ or https:\/\//,
    });
  // a bad time limit is the caller's, refused here: not sent, not retried as a transport failure
  const client = new SandboxFusionClient(srv.url);
  await t.throwsAsync(client.run({ code: "print(1)", run_timeout: Number.NaN }), {
    instanceOf: RunRequestError,
    message: /run_timeout: must be a finite number > 0, got NaN/,
  });
  // refused connections name their cause and how many tries failed (a port just given back is closed)
  const closed = createServer().listen(0, "127.0.0.1");
  await once(closed, "listening");
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const down = new SandboxFusionClient(`http://127.0.0.1:${closedPort}`, { attempts: 2 });
  await t.throwsAsync(down.run("print(1)"), {
    instanceOf: SandboxHttpError,
    message: /ECONNREFUSED.*2 attempts, all failed/,
  });
  // a server that takes the connection and never answers: health() gives up at its limit
  const held: Socket[] = [];
  const silent = createServer((socket) => held.push(socket)).listen(0, "127.0.0.1");
  await once(silent, "listening");
  try {
    const port = (silent.address() as AddressInfo).port;
    const mute = new SandboxFusionClient(`http://127.0.0.1:${port}`, {
      healthTimeoutMs: 300,
      extraTimeoutMs: 0,
      attempts: 1,
    });
    await t.throwsAsync(mute.health(), { instanceOf: SandboxHttpError, message: /no answer within 300 ms/ });
    await t.throwsAsync(mute.run({ code: "print(1)", run_timeout: 0.3 }), {
      instanceOf: SandboxHttpError,
      message: /no answer within 300 ms \(1 attempt, all failed\)/,
    });
  } finally {
    for (const socket of held) socket.destroy();
    silent.close();
  }
});

test("a server whose executor has closed answers 503 saying so, not 500", async (t) => {
  const gone = await new SandboxExecutor({ workers: 1, log: () => {}, hugePages: false }).start();
  const server = await serveSandbox(gone, { port: 0 });
  try {
    await gone.close();
    const res = await fetch(`${server.url}/run_code`, {
      method: "POST",
      body: JSON.stringify({ code: "print(1)" }),
    });
    t.is(res.status, 503);
    t.deepEqual(await res.json(), { status: "SandboxError", message: "the sandbox executor is closed" });
  } finally {
    await server.close();
  }
});
