// One request must not starve or kill its worker: bounded request files, a setup deadline that fails
// the request only, a maximum-size fetch, and output floods killed at run_timeout. Serial: each test
// times or loads the one worker.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { request } from "node:http";
import test from "ava";
import {
  DEFAULT_LIMITS,
  SandboxExecutor,
  type SandboxServer,
  SandboxWorker,
  SandboxWorkerDiedError,
  serveSandbox,
} from "../src/index.js";

let ex: SandboxExecutor;
let srv: SandboxServer;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
  srv = await serveSandbox(ex, { port: 0 });
});

test.after.always(async () => {
  await srv?.close();
  await ex?.close();
});

/** POSTs on a connection of its own (a pooled one may be closed by the server's keep-alive timeout meanwhile). */
function post(body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(`${srv.url}/run_code`, { method: "POST", agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString()) }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

function emptyFiles(n: number, dir = ""): Record<string, string> {
  return Object.fromEntries(Array.from({ length: n }, (_, i) => [`${dir}f${i}`, ""]));
}

test.serial(
  "files over the count, size or path bounds are answered 400 naming the limit, at once",
  async (t) => {
    const restarts = ex.health().restarts;
    const maxFilesBytes = 16 << 20;
    const big = Buffer.alloc(maxFilesBytes / 2 + 1).toString("base64");
    const cases: [unknown, RegExp][] = [
      // 200,000 empty files in a ~4 MB body: once written before the run, until the watchdog killed the worker
      [
        { code: "print(1)", files: emptyFiles(200_000) },
        /^files: 200000 files, over this server's limit of 1000 files per request$/,
      ],
      [{ code: "print(1)", files: emptyFiles(1001) }, /files: 1001 files, over this server's limit of 1000/],
      [
        { code: "print(1)", files: { "a.bin": big, "b.bin": big } },
        new RegExp(
          `files: ${maxFilesBytes + 2} bytes in all \\(decoded\\), over this server's limit of ${maxFilesBytes} bytes`,
        ),
      ],
      [
        { code: "print(1)", files: { [`${"d/".repeat(600)}x`]: "" } },
        /path of 1201 bytes is over the limit of 1024/,
      ],
      [{ code: "print(1)", files: { [`${"n".repeat(256)}`]: "" } }, /a name in the path is over 255 bytes/],
      [{ code: "print(1)", files: { "./": "" } }, /must be relative/],
      [
        { code: "print(1)", fetch_files: Array.from({ length: 9 }, (_, i) => `o${i}`) },
        /fetch_files: 9 paths, over this server's limit of 8 per request/,
      ],
    ];
    for (const [body, reason] of cases) {
      const started = Date.now();
      const { status, json } = await post(body);
      t.is(status, 400, String(reason));
      t.regex(String(json.message), reason);
      t.true(Date.now() - started < 20_000, "refused without running");
    }
    // the most files allowed are written and run
    const { json } = await post({
      code: "import os\nprint(len([n for n in os.listdir('d') if n.startswith('f')]))",
      files: emptyFiles(1000, "d/"),
    });
    t.is(json.status, "Success", JSON.stringify(json));
    t.is((json.run_result as { stdout: string }).stdout, "1000\n");
    t.is(ex.health().restarts, restarts, "no worker was restarted");
    t.is(DEFAULT_LIMITS.maxFilesBytes, maxFilesBytes);
  },
);

test.serial(
  "files not written within the setup deadline fail that request only: the worker answers the next",
  async (t) => {
    const quick = await new SandboxExecutor({
      workers: 1,
      log: () => {},
      limits: { setupTimeout: 0.001 },
    }).start();
    try {
      const files = Object.fromEntries(
        Array.from({ length: 1000 }, (_, i) => [`deep/${i % 10}/${i % 7}/${i}.txt`, "aGk="]),
      );
      const r = await quick.run({ code: "print('should not run')", files });
      t.is(r.status, "SandboxError");
      t.regex(
        r.message,
        /writing the request's files took over 0\.001 s \(\d+ of 1000 written\); the code was not run/,
      );
      t.is(r.run_result, null);
      const next = await quick.run({ code: "import os\nprint(os.path.exists('deep'))" });
      t.is(next.status, "Success");
      t.is(next.run_result?.stdout, "False\n", "the next run starts from a fresh directory");
      t.is(quick.health().restarts, 0, "the worker lived");
    } finally {
      await quick.close();
    }
  },
);

test.serial(
  "a fetch_files file of the maximum size (32 MiB) comes back whole and the worker lives",
  async (t) => {
    const restarts = ex.health().restarts;
    const { status, json } = await post({
      code: [
        "import hashlib, os",
        "data = os.urandom(32 << 20)",
        "open('big.bin', 'wb').write(data)",
        "print(hashlib.sha256(data).hexdigest())",
      ].join("\n"),
      fetch_files: ["big.bin"],
      run_timeout: 30,
    });
    t.is(status, 200);
    t.is(json.status, "Success", String(json.message));
    const file = Buffer.from((json.files as Record<string, string>)["big.bin"] ?? "", "base64");
    t.is(file.length, 32 << 20);
    const sha = (json.run_result as { stdout: string }).stdout.trim();
    t.is(createHash("sha256").update(file).digest("hex"), sha);
    t.is(ex.health().restarts, restarts, "no worker was restarted");
  },
);

/** Host pids of processes whose name (comm) is `name`. */
function processesNamed(name: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === name) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

// each flood names itself, so that the test can see from the host whether it still lives
const NAME_ME = "import ctypes\nctypes.CDLL(None).prctl(15, b'torlflood', 0, 0, 0)\n";

// The bound checked here: a flooding run is killed at run_timeout and answered within run_timeout +
// FLOOD_GRACE_S (docs/sandbox.md, "Limits"); generous, for a loaded machine.
const FLOOD_GRACE_S = 8;
const FLOODS: Record<string, string> = {
  "splice from /dev/zero into stdout and stderr": [
    "import os, threading",
    "zero = os.open('/dev/zero', os.O_RDONLY)",
    "def flood(fd):",
    "    while True:",
    "        os.splice(zero, fd, 1 << 20)",
    "threading.Thread(target=flood, args=(2,), daemon=True).start()",
    "flood(1)",
  ].join("\n"),
  "a plain write loop": "import os\nb = b'x' * 65536\nwhile True:\n    os.write(1, b)",
  "print in a loop": "while True:\n    print('y' * 1000)",
};

for (const [name, code] of Object.entries(FLOODS)) {
  test.serial(
    `a run flooding its output (${name}) is killed at run_timeout and answered within the grace`,
    async (t) => {
      const timeout = 2;
      const restarts = ex.health().restarts;
      const started = performance.now();
      const { json } = await post({ code: NAME_ME + code, run_timeout: timeout });
      const wall = (performance.now() - started) / 1000;
      t.log(`answered after ${wall.toFixed(2)} s`);
      // the run is killed before its answer is sent: none of its processes outlives the answer
      t.deepEqual(processesNamed("torlflood"), [], "no process of the run is left");
      t.is(json.status, "Failed", String(json.message));
      const run = json.run_result as { status: string; stdout: string; execution_time: number };
      t.is(run.status, "TimeLimitExceeded");
      t.regex(
        String(json.message),
        /run exceeded run_timeout of 2 s and was killed; stdout truncated to 1048576 of \d+ bytes/,
      );
      t.is(run.stdout.length, 1 << 20);
      t.true(
        wall < timeout + FLOOD_GRACE_S,
        `answered ${wall.toFixed(2)} s after the request (bound ${timeout + FLOOD_GRACE_S} s)`,
      );
      t.is(ex.health().restarts, restarts, "the worker was not killed by its watchdog");
    },
  );
}

test.serial(
  "a worker that stops answering is still ended by its watchdog after the setup deadline, run_timeout and grace",
  async (t) => {
    const worker = new SandboxWorker({ name: `torl-${process.pid}-watchdog`, watchdogGraceMs: 500 });
    await worker.start();
    // the process that answers: the outer process's child (pid 1 of the worker's pid namespace), or itself
    const children = readFileSync(`/proc/${worker.pid}/task/${worker.pid}/children`, "utf8").trim();
    const server = Number(children.split(" ")[0] || worker.pid);
    process.kill(server, "SIGSTOP");
    const started = performance.now();
    const error = await t.throwsAsync(
      worker.run({
        code: "print(1)",
        run_timeout: 0.5,
        memory_limit_MB: 256,
        stdin: "",
        files: {},
        fetch_files: [],
        setup_timeout: 0.5,
      }),
      { instanceOf: SandboxWorkerDiedError },
    );
    const waited = performance.now() - started;
    t.regex(error?.message ?? "", /watchdog: no answer 500 ms after the run's timeout/);
    t.true(waited >= 1400, `not before setup_timeout + run_timeout + grace (${Math.round(waited)} ms)`);
    t.false(worker.alive);
  },
);
