import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { SandboxActorPool, SandboxConfigError, TokenBucket } from "../src/index.js";
import { flakyPython } from "./helpers.js";

let pool: SandboxActorPool;

test.before(async () => {
  await init({ numCpus: 4, resources: { sandbox: 4 } });
  pool = await SandboxActorPool.create({ actors: 2, workersPerActor: 1, resources: { sandbox: 1 } });
});

test.after.always(async () => {
  await pool?.close();
  await shutdown();
});

test.serial("runBatch spreads a batch over the sandbox actors and answers in order", async (t) => {
  const codes = Array.from(
    { length: 16 },
    (_, i) => `import sympy\nprint(sympy.factor(sympy.Symbol('x')**2 - ${i * i}))`,
  );
  const results = await pool.runBatch(codes.map((code) => ({ code, language: "python" })));
  t.is(results.length, 16);
  t.is(results[0]!.run_result?.stdout, "x**2\n");
  t.is(results[3]!.run_result?.stdout, "(x - 3)*(x + 3)\n");
  t.true(results.every((r) => r.status === "Success"));
  const health = await pool.health();
  t.is(health.length, 2);
  t.true(health.every((h) => h.workers.ready === 1));
});

test.serial("a bad request is rejected before it reaches an actor", async (t) => {
  await t.throwsAsync(pool.run({ code: "print(1)", language: "ruby" }), { message: /language/ });
});

test.serial(
  "failover: an actor killed with SIGKILL mid-batch has its calls retried on another",
  async (t) => {
    const pids = await pool.actorPids();
    t.is(pids.length, 2);
    const n = 12;
    const batch = pool.runBatch(
      Array.from({ length: n }, (_, i) => ({
        code: `import time\ntime.sleep(0.3)\nprint(${i})`,
        language: "python",
      })),
    );
    await new Promise((r) => setTimeout(r, 400));
    process.kill(pids[0]!, "SIGKILL");
    const results = await batch;
    t.deepEqual(
      results.map((r) => r.run_result?.stdout),
      Array.from({ length: n }, (_, i) => `${i}\n`),
    );
    t.true(pool.retried >= 1, `retried ${pool.retried}`);
    t.is(pool.replaced, 1);
    // the replacement comes up and the pool is whole again
    const after = await pool.runBatch(["print('a')", "print('b')", "print('c')", "print('d')"]);
    t.deepEqual(
      after.map((r) => r.run_result?.stdout),
      ["a\n", "b\n", "c\n", "d\n"],
    );
    // the replacement starts a node process and a warm interpreter: wait for it (not a speed check)
    for (let i = 0; i < 1200 && pool.size < 2; i++) await new Promise((r) => setTimeout(r, 100));
    const newPids = await pool.actorPids();
    t.is(newPids.length, 2);
    t.false(newPids.includes(pids[0]!));
  },
);

test("token bucket: starts at most `rate` per second after the burst (fake clock)", (t) => {
  let now = 0;
  const b = new TokenBucket(10, 2, () => now);
  t.true(b.tryTake());
  t.true(b.tryTake());
  t.false(b.tryTake());
  now += 50; // half a token
  t.false(b.tryTake());
  now += 50;
  t.true(b.tryTake());
  now += 10_000; // never more than the burst saved
  t.true(b.tryTake());
  t.true(b.tryTake());
  t.false(b.tryTake());
});

test.serial(
  "rate limiting: a pool limited to N per second never has started more than the bucket allows",
  async (t) => {
    const limited = await SandboxActorPool.create({ actors: 1, ratePerSecond: 5 });
    try {
      const starts: number[] = [];
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          const r = await limited.run("print(1)");
          starts.push(performance.now() - t0);
          return r;
        }),
      );
      // 8 requests with burst 5 at 5/s: the last can finish no earlier than 0.6 s after the first
      starts.sort((a, b) => a - b);
      t.true(starts[7]! >= 550, `8th finished at ${starts[7]} ms`);
    } finally {
      await limited.close();
    }
  },
);

test.serial("a pool whose every actor died answers SandboxError with the reason, never waits", async (t) => {
  const lone = await SandboxActorPool.create({ actors: 1, replaceDead: false });
  try {
    const [pid] = await lone.actorPids();
    process.kill(pid!, "SIGKILL");
    const answer = await lone.run("print(1)");
    t.is(answer.status, "SandboxError");
    t.regex(answer.message, /every sandbox actor of this pool has died \(replaceDead is false\)/);
    t.is((await lone.run("print(2)")).status, "SandboxError");
  } finally {
    await lone.close();
  }
});

test.serial(
  "a replacement actor that cannot start fails the waiting requests with why; a later one recovers",
  async (t) => {
    const { python, broken, dispose } = flakyPython();
    const flaky = await SandboxActorPool.create({ actors: 1, executor: { python, hugePages: false } });
    try {
      t.is((await flaky.run("print(1)")).run_result?.stdout, "1\n");
      broken(true);
      const [pid] = await flaky.actorPids();
      process.kill(pid!, "SIGKILL");
      const answer = await flaky.run("print(2)");
      t.is(answer.status, "SandboxError");
      t.regex(
        answer.message,
        /every sandbox actor of this pool has died and a replacement failed: .*python is broken/s,
      );
      broken(false);
      t.is((await flaky.run("print(3)")).run_result?.stdout, "3\n");
      t.is(flaky.size, 1);
    } finally {
      await flaky.close();
      dispose();
    }
  },
);

test("pool options that would leave requests waiting are refused before any actor starts", async (t) => {
  for (const [options, message] of [
    [{ maxInFlightPerActor: 0 }, /maxInFlightPerActor: must be a whole number >= 1, got 0/],
    [{ ratePerSecond: -1 }, /ratePerSecond: must be a number > 0, got -1/],
    [{ ratePerSecond: 0 }, /ratePerSecond: must be a number > 0, got 0/],
    [{ actors: 0 }, /actors: must be a whole number >= 1, got 0/],
    [{ actors: "1" }, /actors: must be a whole number >= 1, got "1"/],
    [{ maxAttempts: 0 }, /maxAttempts/],
    [{ workersPerActor: 1.5 }, /workersPerActor/],
    [{ replaceDead: "no" }, /replaceDead: must be true or false, got "no"/],
  ] as const)
    await t.throwsAsync(SandboxActorPool.create(options as never), {
      instanceOf: SandboxConfigError,
      message,
    });
  t.throws(() => new TokenBucket(0), { instanceOf: SandboxConfigError, message: /ratePerSecond/ });
  t.throws(() => new TokenBucket(5, 0.5), {
    instanceOf: SandboxConfigError,
    message: /burst: must be a number >= 1/,
  });
});
