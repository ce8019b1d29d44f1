/**
 * The one code interpreter factory and the trainer's tool path: each actor_rollout_ref.rollout.tool.*
 * key acts on the tool a rollout worker builds (the spec rolloutToolSpec gives, instantiated as the
 * worker instantiates it), and what the driver refuses before any worker starts.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { init, shutdown } from "@torl-ts/actors";
import { type SandboxActorPool, SandboxExecutor } from "@torl-ts/sandbox";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import {
  checkToolSpec,
  createCodeInterpreterTool,
  EMPTY_OBSERVATION,
  instantiateTool,
  type PythonCodeInterpreter,
  rolloutToolSpec,
  type ToolResult,
} from "../../src/rollout/index.js";

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

/** The tool a rollout worker builds for a trainer config with these overrides (the trainer's own path). */
async function trainerTool(...overrides: string[]): Promise<PythonCodeInterpreter> {
  const spec = rolloutToolSpec(loadTrainerConfig({ overrides }));
  if (!spec) throw new Error("no tool");
  await checkToolSpec(spec);
  return (await instantiateTool(spec.module, spec.exportName!, spec.args!)) as PythonCodeInterpreter;
}

/** The interpreters in this process (starting sandbox actors is slow on a loaded machine); the keys act the same. */
const IN_PROCESS = [
  "actor_rollout_ref.rollout.tool.sandbox_actors=0",
  "actor_rollout_ref.rollout.tool.sandbox_workers=1",
];

async function runAll(tool: PythonCodeInterpreter, codes: string[]): Promise<ToolResult[]> {
  const items = await Promise.all(
    codes.map(async (code) => ({
      instanceId: await tool.create(),
      call: { name: tool.name, arguments: { code } },
    })),
  );
  return tool.executeBatch(items);
}

async function withTool<T>(
  tool: PythonCodeInterpreter,
  f: (tool: PythonCodeInterpreter) => Promise<T>,
): Promise<T> {
  try {
    return await f(tool);
  } finally {
    await tool.close();
  }
}

test.serial(
  "the trainer's default tool is the code interpreter on sandbox actors, sized by sandbox_actors and sandbox_workers",
  async (t) => {
    const spec = rolloutToolSpec(loadTrainerConfig({}));
    t.like(spec, { exportName: "createCodeInterpreterTool" });
    t.regex(spec!.module, /rollout\/code-interpreter-tool\.(ts|js)$/);
    t.is(
      rolloutToolSpec(
        loadTrainerConfig({ overrides: ["actor_rollout_ref.rollout.num_llm_calls_available=0"] }),
      ),
      null,
    );
    await withTool(
      await trainerTool(
        "actor_rollout_ref.rollout.tool.sandbox_actors=2",
        "actor_rollout_ref.rollout.tool.sandbox_workers=1",
      ),
      async (tool) => {
        const pool = tool.runner as SandboxActorPool;
        t.is((await pool.actorPids()).length, 2);
        t.deepEqual(
          (await pool.health()).map((h) => h.workers.total),
          [1, 1],
        );
        const [r] = await runAll(tool, ["print(6*7)"]);
        t.like(r, { observation: "42", success: true });
      },
    );
    await withTool(
      await trainerTool(
        "actor_rollout_ref.rollout.tool.sandbox_actors=0",
        "actor_rollout_ref.rollout.tool.sandbox_workers=1",
      ),
      async (tool) => {
        t.true(
          tool.runner instanceof SandboxExecutor,
          "0 sandbox actors: the interpreters run in this process",
        );
        t.is((tool.runner as SandboxExecutor).health().workers.total, 1);
      },
    );
  },
);

test.serial(
  "rollout.tool.run_timeout: a run over it times out through the trainer's tool path",
  async (t) => {
    const sleepy = "import time\ntime.sleep(3)\nprint('late')";
    await withTool(
      await trainerTool(...IN_PROCESS, "actor_rollout_ref.rollout.tool.run_timeout=1"),
      async (tool) => {
        const [r] = await runAll(tool, [sleepy]);
        t.like(r, { observation: EMPTY_OBSERVATION, success: false });
      },
    );
    await withTool(
      await trainerTool(...IN_PROCESS, "actor_rollout_ref.rollout.tool.run_timeout=8"),
      async (tool) => {
        const [r] = await runAll(tool, [sleepy]);
        t.like(r, { observation: "late", success: true });
      },
    );
  },
);

test.serial("rollout.tool.memory_limit_mb: a run allocating over it fails with MemoryError", async (t) => {
  const big = "x = bytearray(300 * 1024 * 1024)\nprint('allocated')";
  await withTool(
    await trainerTool(...IN_PROCESS, "actor_rollout_ref.rollout.tool.memory_limit_mb=128"),
    async (tool) => {
      const [r] = await runAll(tool, [big]);
      t.like(r, { observation: "MemoryError", success: false });
    },
  );
  await withTool(
    await trainerTool(...IN_PROCESS, "actor_rollout_ref.rollout.tool.memory_limit_mb=1024"),
    async (tool) => {
      const [r] = await runAll(tool, [big]);
      t.like(r, { observation: "allocated", success: true });
    },
  );
});

test.serial(
  "rollout.tool.stop and max_observation_chars: the trigger, the appended text and the cut",
  async (t) => {
    await withTool(
      await trainerTool(
        ...IN_PROCESS,
        "actor_rollout_ref.rollout.tool.stop=<run>",
        "actor_rollout_ref.rollout.tool.max_observation_chars=20",
      ),
      async (tool) => {
        t.deepEqual(tool.stop, ["<run>"]);
        const [r] = await runAll(tool, ["print('a' * 30 + 'z' * 30)"]);
        t.is(r!.observation, `${"a".repeat(10)}...${"z".repeat(10)}`);
        t.is(r!.text, `<run>\n${r!.observation}\n\`\`\`\n`);
      },
    );
  },
);

test.serial(
  "rollout.tool.max_concurrency over sandbox actors: runs in flight at once are capped",
  async (t) => {
    // each run prints when it started and ended; with one in flight the intervals follow each other
    const timed = "import time\ns = time.time()\ntime.sleep(0.5)\nprint(s, time.time())";
    await withTool(
      await trainerTool(
        "actor_rollout_ref.rollout.tool.max_concurrency=1",
        "actor_rollout_ref.rollout.tool.sandbox_workers=2",
      ),
      async (tool) => {
        const spans = (await runAll(tool, [timed, timed, timed])).map((r) =>
          r.observation.split(" ").map(Number),
        );
        spans.sort((a, b) => a[0]! - b[0]!);
        for (let i = 1; i < spans.length; i++)
          t.true(spans[i]![0]! >= spans[i - 1]![1]!, JSON.stringify(spans));
      },
    );
  },
);

/** A SandboxFusion-shaped server answering every run with `stdout`, counting the requests in flight. */
async function fakeServer(stdout: string): Promise<{ url: string; peak: () => number; server: Server }> {
  let active = 0;
  let peak = 0;
  const server = createServer((req, res) => {
    active++;
    peak = Math.max(peak, active);
    req.resume();
    req.on("end", () =>
      setTimeout(() => {
        active--;
        res.setHeader("content-type", "application/json");
        res.end(
          JSON.stringify({
            status: "Success",
            message: "",
            compile_result: null,
            run_result: { status: "Finished", execution_time: 0, return_code: 0, stdout, stderr: "" },
            executor_pod_name: null,
            files: {},
          }),
        );
      }, 100),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, peak: () => peak, server };
}

test.serial(
  "rollout.tool.sandbox_url and max_concurrency: the runs go to that server, so many at once",
  async (t) => {
    const { url, peak, server } = await fakeServer("from the server\n");
    try {
      await withTool(
        await trainerTool(
          `actor_rollout_ref.rollout.tool.sandbox_url=${url}`,
          "actor_rollout_ref.rollout.tool.max_concurrency=2",
        ),
        async (tool) => {
          const results = await runAll(tool, ["print(1)", "print(2)", "print(3)", "print(4)", "print(5)"]);
          t.deepEqual(
            results.map((r) => r.observation),
            Array(5).fill("from the server"),
          );
          t.is(peak(), 2);
        },
      );
    } finally {
      server.close();
    }
  },
);

test("the factory refuses what it does not read, naming the key", async (t) => {
  await t.throwsAsync(createCodeInterpreterTool({ timeout: 3 } as never), {
    message: /the code interpreter has no setting timeout/,
  });
  await t.throwsAsync(createCodeInterpreterTool({ name: "calculator" }), {
    message: /actor_rollout_ref\.rollout\.tool\.name is "calculator"/,
  });
  await t.throwsAsync(createCodeInterpreterTool({ config: { module: "x" } }), {
    message: /actor_rollout_ref\.rollout\.tool\.config has module/,
  });
  await t.throwsAsync(createCodeInterpreterTool({ run_timeout: 301 }), {
    message: /actor_rollout_ref\.rollout\.tool\.run_timeout 301 s is over this server's limit of 300 s/,
  });
  await t.throwsAsync(createCodeInterpreterTool({ memory_limit_mb: 0 }), {
    message: /actor_rollout_ref\.rollout\.tool\.memory_limit_mb must be a number > 0, got 0/,
  });
  // a server of one's own has its own maxima: only the built-in sandbox's are checked here
  t.is(
    (await createCodeInterpreterTool({ run_timeout: 600, sandbox_url: "http://127.0.0.1:9" })).options
      .runTimeout,
    600,
  );
  await t.throwsAsync(createCodeInterpreterTool({ sandbox_workers: 0 }), {
    message: /actor_rollout_ref\.rollout\.tool\.sandbox_workers must be an integer >= 1, got 0/,
  });
  await t.throwsAsync(createCodeInterpreterTool({ sandbox_url: "localhost:1" }), {
    message: /sandbox_url must be null or an http\(s\) URL/,
  });
});

test.serial(
  "the driver refuses a host without the Python the code interpreter needs, naming it",
  async (t) => {
    const spec = rolloutToolSpec(loadTrainerConfig({}))!;
    const before = process.env.TORL_SANDBOX_PYTHON;
    process.env.TORL_SANDBOX_PYTHON = "/nonexistent/python3";
    try {
      const e = await t.throwsAsync(checkToolSpec(spec));
      t.regex(e!.message, /needs Python 3, and \/nonexistent\/python3 is not installed/);
      t.regex(e!.message, /num_llm_calls_available=0 for no tool/);
      t.false(e!.message.includes("\n"), "one line");
      // with a server to run the code, no local Python is needed
      await checkToolSpec(
        rolloutToolSpec(
          loadTrainerConfig({ overrides: ["actor_rollout_ref.rollout.tool.sandbox_url=http://127.0.0.1:9"] }),
        )!,
      );
    } finally {
      if (before === undefined) delete process.env.TORL_SANDBOX_PYTHON;
      else process.env.TORL_SANDBOX_PYTHON = before;
    }
  },
);

test.serial(
  "rollout.tool.delay_ms makes every code run answer that much later (a batch once), and is refused below 0",
  async (t) => {
    const timedRun = async (tool: PythonCodeInterpreter, codes: string[]) => {
      const start = performance.now();
      const results = await runAll(tool, codes);
      return { results, ms: performance.now() - start };
    };
    await withTool(
      await trainerTool(...IN_PROCESS, "actor_rollout_ref.rollout.tool.delay_ms=400"),
      async (tool) => {
        t.is(tool.runner.constructor, Object, "the runner is wrapped");
        const { results, ms } = await timedRun(tool, ["print(6 * 7)", "print(1 + 1)"]);
        t.deepEqual(
          results.map((r) => r.observation.trim()),
          ["42", "2"],
        );
        // a lower bound only: the delay is added, never skipped (timers never fire early by more than a tick)
        t.true(ms >= 395, `${ms} ms`);
      },
    );
    await t.throwsAsync(createCodeInterpreterTool({ delay_ms: -1 }), {
      message: /actor_rollout_ref\.rollout\.tool\.delay_ms must be an integer >= 0, got -1/,
    });
  },
);
