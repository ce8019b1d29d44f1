// init() checks what it is given before it opens anything (an address that is no HOST:PORT, resource
// amounts that are no numbers), and an init that fails closes what it opened, so the process can exit.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { init, isInitialized, ResourceRequestError, shutdown } from "@torl-ts/actors";
import test from "ava";

test.afterEach.always(async () => {
  await shutdown();
});

/** Runs `init(options)` in a child process; what it threw, and whether the process ended by itself. */
function initInChild(options: object, env: Record<string, string> = {}) {
  const code = `
import { init } from "@torl-ts/actors";
const t0 = Date.now();
try {
  await init(JSON.parse(process.argv[1]));
  console.log(JSON.stringify({ ok: true }));
} catch (e) {
  console.log(JSON.stringify({ name: e.name, message: e.message, ms: Date.now() - t0 }));
}
`;
  const started = Date.now();
  const r = spawnSync(
    process.execPath,
    ["--import", "tsx", "--input-type=module", "-e", code, JSON.stringify(options)],
    {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      encoding: "utf8",
      // a process that cannot exit is killed here (status null) instead of hanging the test
      timeout: 20_000,
      env: { ...process.env, ...env },
    },
  );
  const last = r.stdout.trim().split("\n").pop() || "{}";
  return { status: r.status, stderr: r.stderr, wallMs: Date.now() - started, result: JSON.parse(last) };
}

test("init refuses an address that is not HOST:PORT with a port from 1 to 65535, naming it, and the process exits", (t) => {
  for (const address of ["nonsense", "host:notaport", "127.0.0.1:99999", "127.0.0.1:0", ":6380"]) {
    const r = initInChild({ address });
    t.is(r.status, 0, `${address}: the process did not exit by itself (${r.stderr})`);
    t.is(r.result.name, "UsageError", address);
    t.is(
      r.result.message,
      `init({ address }) must be HOST:PORT (a port in [1, 65535]), got '${address}'`,
      address,
    );
    t.true(r.result.ms < 1000, `${address}: refused after ${r.result.ms} ms, not at once`);
  }
});

test("TORL_ADDRESS is checked the same way", (t) => {
  const r = initInChild({}, { TORL_ADDRESS: "nonsense" });
  t.is(r.status, 0, r.stderr);
  t.is(r.result.message, "TORL_ADDRESS must be HOST:PORT (a port in [1, 65535]), got 'nonsense'");
});

test("an init whose connection to the head cannot even be made names the address and leaves nothing open", (t) => {
  // passes the HOST:PORT check, but ZeroMQ refuses the endpoint (EINVAL) when it connects
  const r = initInChild({ address: "*:6380" });
  t.is(r.status, 0, `the process did not exit by itself (${r.stderr})`);
  t.is(r.result.name, "HeadError");
  t.regex(r.result.message, /cannot connect to the head at tcp:\/\/\*:6380: .*Invalid argument/);
});

const BAD_RESOURCES: Array<[Record<string, unknown>, RegExp]> = [
  [{ numCpus: "2" }, /^init\(\): numCpus must be a finite number >= 0, got "2"$/],
  [{ numCpus: -1 }, /^init\(\): numCpus must be a finite number >= 0, got -1$/],
  [{ numCpus: Number.NaN }, /numCpus must be a finite number >= 0, got NaN/],
  [{ numGpus: "1" }, /^init\(\): numGpus must be a whole number >= 0, got "1"$/],
  [{ numGpus: 0.5 }, /numGpus must be a whole number >= 0, got 0.5/],
  [{ resources: { x: "3" } }, /^init\(\): resources\.x must be a finite number >= 0, got "3"$/],
  [{ resources: { x: -3 } }, /resources\.x must be a finite number >= 0, got -3/],
  [{ resources: [1, 2] }, /^init\(\): resources must be an object of amounts, got \[1,2\]$/],
  [{ resources: "x" }, /resources must be an object of amounts, got "x"/],
  [{ resources: { CPU: 8 } }, /^init\(\): resources.CPU is not taken: give CPUs as numCpus$/],
];

test.serial(
  "init refuses resource amounts that are not numbers >= 0, naming the key, before starting anything",
  async (t) => {
    for (const [o, message] of BAD_RESOURCES) {
      await t.throwsAsync(init(o as never), { instanceOf: ResourceRequestError, message }, JSON.stringify(o));
      t.false(isInitialized(), JSON.stringify(o));
    }
    await t.throwsAsync(init({ numCPUs: 2 } as never), {
      instanceOf: TypeError,
      message: /^init\(\): unknown option "numCPUs" \(did you mean "numCpus"\?\)/,
    });
    t.false(isInitialized());
  },
);

test.serial("after an init that failed, init() works again in the same process", async (t) => {
  await t.throwsAsync(init({ address: "*:6380" }), {
    message: /cannot connect to the head at tcp:\/\/\*:6380/,
  });
  t.false(isInitialized());
  const info = await init({ numCpus: 1 });
  t.true(info.embedded);
});
