import type { RunCodeResponse } from "@torl-ts/sandbox";
import test from "ava";
import {
  EMPTY_OBSERVATION,
  executeAll,
  extractLastPythonBlock,
  formatObservation,
  PythonCodeInterpreter,
  wrapObservation,
} from "../../src/rollout/index.js";

function response(run: Partial<NonNullable<RunCodeResponse["run_result"]>> | null): RunCodeResponse {
  return {
    status: "Success",
    message: "",
    compile_result: null,
    run_result: run && {
      status: "Finished",
      execution_time: 0.01,
      return_code: 0,
      stdout: "",
      stderr: "",
      ...run,
    },
    executor_pod_name: null,
    files: {},
  };
}

// --- extraction -------------------------------------------------------------------------------

test("extraction: the last ```python block of the round is the code", (t) => {
  const text = "Let me compute.\n```python\nprint(1)\n```\nthen\n```python\nx = 2\nprint(x)\n```\n";
  t.is(extractLastPythonBlock(text), "x = 2\nprint(x)\n");
});

test("extraction: a line ending with ```python opens a block", (t) => {
  t.is(extractLastPythonBlock("Here is code: ```python\nprint(3)\n```"), "print(3)\n");
});

test("extraction: a line starting with ``` closes the block (even ```output)", (t) => {
  t.is(extractLastPythonBlock("```python\na = 1\n```output\nignored\n"), "a = 1\n");
});

test("extraction: an unclosed block means no code, even after a closed one", (t) => {
  t.is(extractLastPythonBlock("```python\nprint(1)\n```\n```python\nprint(2)\n"), "");
});

test("extraction: no block, or a block in another language, gives no code", (t) => {
  t.is(extractLastPythonBlock("just words, \\boxed{3}"), "");
  t.is(extractLastPythonBlock("```bash\nls\n```\n"), "");
});

test("extraction: a ```python line inside a block starts the block again", (t) => {
  t.is(extractLastPythonBlock("```python\na = 1\n```python\nb = 2\n```\n"), "b = 2\n");
});

test("parse gives a call with the code, or undefined", (t) => {
  const tool = new PythonCodeInterpreter({ run: async () => response({}) });
  t.deepEqual(tool.parse("```python\nprint(1)\n```\n"), {
    name: "code_interpreter",
    arguments: { code: "print(1)\n" },
  });
  t.is(tool.parse("no code here"), undefined);
  t.deepEqual(tool.stop, ["```output"]);
  t.is(tool.schema.function.name, "code_interpreter");
  t.deepEqual(tool.schema.function.parameters.required, ["code"]);
});

// --- observation ------------------------------------------------------------------------------

test("observation: stdout when the run succeeded", (t) => {
  t.deepEqual(formatObservation(response({ stdout: "42\n" })), { observation: "42", pass: true });
});

test("observation: stdout when the run failed but printed something (and it passes)", (t) => {
  const r = formatObservation(
    response({ return_code: 1, stdout: "partial\n", stderr: "Traceback...\nValueError: x" }),
  );
  t.deepEqual(r, { observation: "partial", pass: true });
});

test("observation: stderr when the run failed and printed nothing; 'Error' keeps the last line", (t) => {
  const stderr =
    "Traceback (most recent call last):\n  File \"/tmp/run/main.py\", line 1, in <module>\n    print(a)\nNameError: name 'a' is not defined\n";
  t.deepEqual(formatObservation(response({ return_code: 1, stdout: "", stderr })), {
    observation: "NameError: name 'a' is not defined",
    pass: false,
  });
});

test("observation: stdout containing 'Error' is cut to its last line too", (t) => {
  t.is(
    formatObservation(response({ stdout: "line one\nValueError seen\nlast line\n" })).observation,
    "last line",
  );
});

test("observation: stderr without 'Error' is kept whole", (t) => {
  t.is(
    formatObservation(response({ return_code: 2, stderr: "warning: a\nwarning: b\n" })).observation,
    "warning: a\nwarning: b",
  );
});

test("observation: empty becomes the timeout message (a timeout, or a program that printed nothing)", (t) => {
  t.deepEqual(formatObservation(response({ return_code: null, status: "TimeLimitExceeded" })), {
    observation: EMPTY_OBSERVATION,
    pass: false,
  });
  t.deepEqual(formatObservation(response({ return_code: 0, stdout: "" })), {
    observation: EMPTY_OBSERVATION,
    pass: true,
  });
});

test("observation: 256 characters or more become first 128 + '...' + last 128", (t) => {
  const long = `${"a".repeat(128)}${"m".repeat(100)}${"z".repeat(128)}`;
  const r = formatObservation(response({ stdout: long }));
  t.is(r.observation, `${"a".repeat(128)}...${"z".repeat(128)}`);
  t.is(r.observation.length, 259);
  const exactly256 = "b".repeat(256);
  t.is(formatObservation(response({ stdout: exactly256 })).observation.length, 259);
  const under = "c".repeat(255);
  t.is(formatObservation(response({ stdout: under })).observation, under);
});

test("observation: a sandbox failure (no run_result) is UnknownError and does not pass", (t) => {
  t.deepEqual(formatObservation(response(null)), { observation: "UnknownError", pass: false });
  t.deepEqual(formatObservation(undefined), { observation: "UnknownError", pass: false });
});

test("appended text is ```output, the observation, and a closing fence", (t) => {
  t.is(wrapObservation("42"), "```output\n42\n```\n");
});

// --- the tool over a backend --------------------------------------------------------------------

test("execute runs the code through the backend and reports execution_pass (ToolResult.success)", async (t) => {
  const seen: string[] = [];
  const tool = new PythonCodeInterpreter({
    run: async (req) => {
      const code = typeof req === "string" ? req : req.code;
      seen.push(code);
      return code.includes("boom")
        ? response({ return_code: 1, stderr: "Traceback\nRuntimeError: boom\n" })
        : response({ stdout: "ok\n" });
    },
  });
  const id = await tool.create();
  const ok = await tool.execute(id, { name: "code_interpreter", arguments: { code: "print('ok')" } });
  t.like(ok, { observation: "ok", text: "```output\nok\n```\n", success: true });
  const bad = await tool.execute(id, {
    name: "code_interpreter",
    arguments: { code: "raise RuntimeError('boom')" },
  });
  t.like(bad, { observation: "RuntimeError: boom", success: false });
  t.false("reward" in bad, "a call's result carries no step reward (the reward manager scores responses)");
  t.false("calcReward" in tool, "no trajectory reward either: execution_passes is the rollout's");
  await tool.release(id);
  t.deepEqual(seen, ["print('ok')", "raise RuntimeError('boom')"]);
});

test("a backend that throws gives an UnknownError observation, not an exception", async (t) => {
  const tool = new PythonCodeInterpreter({
    run: async () => {
      throw new Error("connection refused");
    },
  });
  const [r] = await executeAll(tool, [
    { instanceId: "x", call: { name: "code_interpreter", arguments: { code: "1" } } },
  ]);
  t.like(r, { observation: "UnknownError", success: false });
});

test("executeBatch uses the backend's batch call when it has one, in order", async (t) => {
  let batches = 0;
  const tool = new PythonCodeInterpreter({
    run: async () => {
      throw new Error("single calls not expected");
    },
    runBatch: async (reqs) => {
      batches++;
      return reqs.map((r) => response({ stdout: `${typeof r === "string" ? r : r.code}\n` }));
    },
  });
  const items = ["a", "b", "c"].map((code) => ({
    instanceId: code,
    call: { name: "code_interpreter", arguments: { code } },
  }));
  const results = await tool.executeBatch(items);
  t.is(batches, 1);
  t.deepEqual(
    results.map((r) => r.observation),
    ["a", "b", "c"],
  );
});

test("the stop string and the observation limit are options (rollout.tool.stop, rollout.tool.max_observation_chars)", async (t) => {
  const long = `${"a".repeat(30)}${"z".repeat(30)}`;
  const runner = { run: async () => response({ stdout: `${long}\n` }) };
  const call = { name: "code_interpreter", arguments: { code: "print(1)" } };
  const stock = new PythonCodeInterpreter(runner);
  t.deepEqual(stock.stop, ["```output"]);
  t.is((await stock.execute(await stock.create(), call)).observation, long, "60 chars: under ToRL's 256");
  const tuned = new PythonCodeInterpreter(runner, { stop: "<output>", maxObservationChars: 20 });
  t.deepEqual(tuned.stop, ["<output>"]);
  const r = await tuned.execute(await tuned.create(), call);
  t.is(r.observation, `${"a".repeat(10)}...${"z".repeat(10)}`);
  t.is(r.text, `<output>\n${"a".repeat(10)}...${"z".repeat(10)}\n\`\`\`\n`);
});
