/**
 * The Tool extension point as a user's `--tool` / TrainerOptions.tool module meets it: a tool of the
 * wrong shape is refused where it is built (naming module#export and the member), every call into it is
 * bounded by actor_rollout_ref.rollout.tool.call_timeout and its results are checked (naming the tool and
 * the method), a failed release fails the rollout, and the spec's args and relative module are checked
 * or resolved in the driver.
 */
import { dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { InputError } from "@torl-ts/core";
import test from "ava";
import { loadTrainerConfig } from "../../src/config/index.js";
import { buildByteBpeTokenizer, Qwen2Model, selectBackend } from "../../src/models/index.js";
import {
  buildRolloutTool,
  checkToolSpec,
  rolloutToolSpec,
  type Tool,
  ToolError,
  ToolExecutionError,
  type ToolSpec,
  ToolTimeoutError,
  tirRollout,
} from "../../src/rollout/index.js";
import { tinyTestConfig } from "../models/tiny-config.js";
import { configurableTool } from "./fixtures/contract-tools.js";

const FIXTURE = fileURLToPath(new URL("./fixtures/contract-tools.ts", import.meta.url));
const MODULE = pathToFileURL(FIXTURE).href;
const tok = buildByteBpeTokenizer();
const EOS = tok.eosTokenId!;
const Q = tok.encode("Q")[0]!;
let model: Qwen2Model;

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  model = Qwen2Model.random(tinyTestConfig(tok.vocabSize), { seed: 5, std: 0.6 });
});

const cfg = (...overrides: string[]) =>
  loadTrainerConfig({ overrides: ["actor_rollout_ref.rollout.tool.call_timeout=0.05", ...overrides] });

const spec = (exportName: string, ...args: unknown[]): ToolSpec => ({ module: MODULE, exportName, args });

/** A rollout whose every row writes "Q" (the trigger), then EOS once the tool's text is appended. */
const rollout = (tool: Tool) =>
  tirRollout(model, tok, [tok.encode("hi"), tok.encode("yo")], {
    tool,
    maxResponseLength: 16,
    logitsProcessor: (_i, response, logits) => {
      logits.fill(-1e9);
      logits[response.length === 0 ? Q : EOS] = 0;
    },
  });

const call = { name: "configurable", arguments: {} };

test("a tool call that never settles fails after call_timeout, naming the tool, module#export, the method and the key", async (t) => {
  const where = `configurable \\(${MODULE.replace(/[.]/g, "\\.")}#configurableTool\\)`;
  for (const hang of ["create", "execute", "release"] as const) {
    const tool = await buildRolloutTool(spec("configurableTool", { hang }), cfg());
    const pending =
      hang === "create" ? tool.create() : hang === "execute" ? tool.execute("i", call) : tool.release("i");
    const e = await t.throwsAsync(pending, { instanceOf: ToolTimeoutError });
    t.regex(
      e!.message,
      new RegExp(
        `^tool ${where}: ${hang} did not finish within 0\\.05 s; raise actor_rollout_ref\\.rollout\\.tool\\.call_timeout`,
      ),
    );
  }
  // a whole executeBatch gets call_timeout per call it holds, max_concurrency at a time
  const batched = await buildRolloutTool(
    spec("configurableTool", { hang: "executeBatch" }),
    cfg("actor_rollout_ref.rollout.tool.max_concurrency=2"),
  );
  const t0 = performance.now();
  const items = [1, 2, 3].map((i) => ({ instanceId: `i${i}`, call }));
  await t.throwsAsync(batched.executeBatch!(items), {
    instanceOf: ToolTimeoutError,
    message:
      /executeBatch did not finish within 0\.1 s \(3 call\(s\), 0\.05 s per call, 2 at a time\); raise actor_rollout_ref\.rollout\.tool\.call_timeout/,
  });
  t.true(performance.now() - t0 >= 95);
  // in a rollout the step fails instead of waiting forever
  const hung = await buildRolloutTool(spec("configurableTool", { hang: "execute" }), cfg());
  await t.throwsAsync(rollout(hung), {
    instanceOf: ToolExecutionError,
    message:
      /tool configurable failed for sequences \[0, 1\]: tool configurable \(.*#configurableTool\): execute did not finish within 0\.05 s; raise actor_rollout_ref\.rollout\.tool\.call_timeout/,
  });
});

test("a built tool of the wrong shape is refused where it is built, naming module#export and the member", async (t) => {
  const cases: [ToolSpec, RegExp][] = [
    [
      spec("StringStopTool"),
      /#StringStopTool: stop must be a non-empty array of non-empty strings .*got the string "Qzq=": write \["Qzq="\]/,
    ],
    [spec("EmptyStopTool"), /#EmptyStopTool: stop must be a non-empty array of non-empty strings .*got \[\]/],
    [spec("configurableTool", { stop: ["Q", ""] }), /#configurableTool: stop must be .*got \["Q",""\]/],
    [spec("NoStopTool"), /#NoStopTool: stop must be a non-empty array .*got undefined/],
    [spec("BadBatchTool"), /#BadBatchTool: executeBatch must be a function when present, got number 5/],
    [spec("returnsUndefined"), /#returnsUndefined: export gave undefined, not a Tool/],
    [spec("returnsEmpty"), /#returnsEmpty: name must be a non-empty string, got undefined/],
    [spec("returnsNamelessTool"), /#returnsNamelessTool: name must be a non-empty string, got the string ""/],
  ];
  for (const [s, message] of cases)
    await t.throwsAsync(buildRolloutTool(s, cfg()), { instanceOf: ToolError, message }, s.exportName);
  // a string stop from the rollout.tool section (what a --tool tool is given) is refused the same way
  await t.throwsAsync(buildRolloutTool(spec("StringStopTool", { stop: "```output" }), cfg()), {
    message: /stop must be .*write \["```output"\]/,
  });
});

test("malformed results and parsed calls fail naming the tool and the method", async (t) => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ result: undefined }, /execute returned undefined, not a ToolResult/],
    [{ result: "42" }, /execute returned the string "42", not a ToolResult/],
    [
      { result: { observation: "x", success: true } },
      /execute returned a ToolResult whose text is undefined/,
    ],
    [{ result: { observation: "x", text: 42, success: true } }, /text is number 42, not a string/],
    [
      { result: { observation: "x", text: "x", success: "yes" } },
      /success is the string "yes", not a boolean/,
    ],
    [
      { result: { observation: "x", text: "x", success: true, metrics: { execution_time: Number.NaN } } },
      /metrics\.execution_time is number NaN, not a finite number/,
    ],
    [
      { result: { observation: "x", text: "x", success: true, metrics: { foo: "bar" } } },
      /metrics\.foo is the string "bar", not a finite number/,
    ],
  ];
  for (const [opts, message] of bad) {
    const tool = await buildRolloutTool(spec("configurableTool", opts), cfg());
    const e = await t.throwsAsync(tool.execute("i", call), { instanceOf: ToolError });
    t.regex(e!.message, /^tool configurable \(.*#configurableTool\): /);
    t.regex(e!.message, message);
  }
  const batch = await buildRolloutTool(spec("configurableTool", { batch: true, batchResult: [] }), cfg());
  await t.throwsAsync(batch.executeBatch!([{ instanceId: "i", call }]), {
    message: /executeBatch returned 0 result\(s\) for 1 call\(s\)/,
  });
  const notArray = await buildRolloutTool(spec("configurableTool", { batch: true, batchResult: "r" }), cfg());
  await t.throwsAsync(notArray.executeBatch!([{ instanceId: "i", call }]), {
    message: /executeBatch returned the string "r" for 1 call\(s\)/,
  });
  const parsed = await buildRolloutTool(spec("configurableTool", { parsed: "not a call" }), cfg());
  t.throws(() => parsed.parse("x"), {
    message:
      /tool configurable \(.*\): parse returned the string "not a call": it must return undefined \(no call\) or \{name: string, arguments: object\}/,
  });
  // the rollout checks a tool handed to it directly too
  await t.throwsAsync(rollout(configurableTool({ result: undefined }) as unknown as Tool), {
    message: /tool configurable: execute returned undefined, not a ToolResult/,
  });
  await t.throwsAsync(rollout(configurableTool({ parsed: { name: 1 } }) as unknown as Tool), {
    message: /tool configurable: parse returned an object with name number 1/,
  });
});

test("a release that fails fails the rollout, naming the tool and release", async (t) => {
  const tool = configurableTool({ releaseError: "session leaked" });
  await t.throwsAsync(rollout(tool as unknown as Tool), {
    instanceOf: ToolError,
    message: "tool configurable: release failed: session leaked (1 more release(s) failed too)",
  });
  // releases that work leave the rollout as it was
  const fine = configurableTool();
  const { samples } = await rollout(fine as unknown as Tool);
  t.is(fine.released, 2);
  t.deepEqual(
    samples.map((s) => s.numToolCalls),
    [1, 1],
  );
});

test("tool.args must be an array of plain data: an object or a BigInt is refused in the driver, naming tool.args", async (t) => {
  await t.throwsAsync(
    checkToolSpec({ module: MODULE, exportName: "configurableTool", args: { mode: 1 } as never }),
    {
      instanceOf: InputError,
      message:
        /^tool\.args must be an array \(the arguments of the tool's constructor or factory, e\.g\. \[\{\.\.\.\}\]\), got an object/,
    },
  );
  await t.throwsAsync(checkToolSpec(spec("configurableTool", { n: 10n })), {
    instanceOf: InputError,
    message: /^tool\.args\[0\]\.n: a BigInt cannot be given to a tool; give a number or a string/,
  });
  await t.throwsAsync(checkToolSpec(spec("configurableTool", { deep: [1, { "a-b": 2n }] })), {
    message: /^tool\.args\[0\]\.deep\[1\]\["a-b"\]: a BigInt/,
  });
  await t.notThrowsAsync(checkToolSpec(spec("configurableTool", { n: 10, s: "x" })));
});

test("a relative ToolSpec.module is resolved against the driver's working directory, not the package", (t) => {
  const dir = dirname(FIXTURE);
  const given = { module: "./contract-tools.ts", exportName: "configurableTool" };
  t.is(rolloutToolSpec(cfg(), given, dir)!.module, MODULE);
  t.is(rolloutToolSpec(cfg(), { ...given, module: "../fixtures/contract-tools.ts" }, dir)!.module, MODULE);
  t.throws(() => rolloutToolSpec(cfg(), { ...given, module: "./nope.mjs" }, dir), {
    instanceOf: InputError,
    message: /\.\/nope\.mjs does not exist \(resolved to .*fixtures\/nope\.mjs\)/,
  });
  // URLs and package names are left to the workers' import
  t.is(rolloutToolSpec(cfg(), { ...given, module: MODULE }, "/")!.module, MODULE);
});
