import test from "ava";
import {
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
