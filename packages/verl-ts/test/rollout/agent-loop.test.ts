import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { checkMultiTurnConfig, checkTrainerSetup, loadTrainerConfig } from "../../src/config/index.js";
import { renderPrompt } from "../../src/data/index.js";
import { buildByteBpeTokenizer, Qwen2Model, selectBackend, Tokenizer } from "../../src/models/index.js";
import type { OpenAIFunctionSchema } from "../../src/rollout/index.js";
import {
  type AgentLoopOptions,
  agentLoopRollout,
  agentTrainingBatch,
  ChatTemplate,
  ChatTemplateError,
  type ConfiguredTool,
  computeMultiTurnMetrics,
  createCodeInterpreterTool,
  loadToolConfig,
  modelPromptRenderer,
  parseHermesToolCalls,
  QWEN2_5_CHAT_TEMPLATE,
  readToolConfig,
  ToolConfigError,
  ToolExecutionError,
  truncateToolResponse,
} from "../../src/rollout/index.js";
import { tinyTestConfig } from "../models/tiny-config.js";
import { AddTool, BrokenTool, createEchoTool } from "./agent-tools.js";

// One token per byte, plus ChatML's special tokens; <|im_end|> ends an assistant turn, as in Qwen2.5-Instruct.
const bytes = buildByteBpeTokenizer();
const tok = new Tokenizer(bytes.json, {
  ...bytes.config,
  eos_token: "<|im_end|>",
  chat_template: QWEN2_5_CHAT_TEMPLATE,
});
const IM_END = tok.tokenToId("<|im_end|>")!;
const template = ChatTemplate.fromTokenizer(tok);
const HEADER = "<|im_start|>assistant\n";
let model: Qwen2Model;

function tools(
  extra: Partial<Record<"add" | "echo", ConfiguredTool["tool"]>> = {},
): Map<string, ConfiguredTool> {
  const add = extra.add ?? new AddTool();
  const echo = extra.echo ?? createEchoTool();
  return new Map([
    ["add", { tool: add, schema: add.schema }],
    ["echo", { tool: echo, schema: echo.schema }],
  ]);
}
const schemas = (m: Map<string, ConfiguredTool>) =>
  new Map<string, OpenAIFunctionSchema>([...m].map(([k, v]) => [k, v.schema]));

/** Forces each conversation to write its scripted assistant turns, each ended by <|im_end|>. */
function scripted(scripts: string[][]): AgentLoopOptions["logitsProcessor"] {
  return (index, responseIds, logits) => {
    const text = tok.decode(responseIds, false);
    const k = text.split(HEADER).length - 1;
    const sofar = k === 0 ? text : text.slice(text.lastIndexOf(HEADER) + HEADER.length);
    const target = scripts[index]![k] ?? "";
    const next =
      target.startsWith(sofar) && sofar.length < target.length
        ? tok.encode(target[sofar.length]!)[0]!
        : IM_END;
    logits.fill(-1e9);
    logits[next] = 0;
  };
}

const call = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

function prompt(question: string, m: Map<string, ConfiguredTool>): number[] {
  const text = template.render([{ role: "user", content: question }], {
    tools: [...m.values()].map((t) => t.schema),
    addGenerationPrompt: true,
  });
  return tok.encode(text);
}

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  model = Qwen2Model.random(tinyTestConfig(tok.vocabSize), { seed: 5, std: 0.5 });
});

test("hermes parsing: every <tool_call> block is a call or the error the model reads", (t) => {
  const s = schemas(tools());
  t.deepEqual(parseHermesToolCalls("no calls", s), []);
  t.deepEqual(parseHermesToolCalls(`a ${call("add", { a: 1, b: 2 })} b ${call("echo", { text: "x" })}`, s), [
    { call: { name: "add", arguments: { a: 1, b: 2 } } },
    { call: { name: "echo", arguments: { text: "x" } } },
  ]);
  // OpenAI's wire format sends the arguments as a JSON string
  t.deepEqual(parseHermesToolCalls(call("add", JSON.stringify({ a: 1, b: 2 })), s), [
    { call: { name: "add", arguments: { a: 1, b: 2 } } },
  ]);
  const error = (text: string) => parseHermesToolCalls(text, s).map((p) => p.error);
  t.regex(error("<tool_call>{name: add}</tool_call>")[0]!, /^Error: the tool call is not valid JSON/);
  t.regex(error('<tool_call>["add"]</tool_call>')[0]!, /^Error: a tool call is a JSON object/);
  t.deepEqual(error(call("mul", {})), ['Error: unknown tool "mul" (available: add, echo)']);
  t.deepEqual(error(call("add", { a: 1 })), ["Error: add: arguments.b is required"]);
  t.deepEqual(error(call("add", { a: 1, b: "2" })), [
    "Error: add: arguments.b must be of type number, got string",
  ]);
  t.deepEqual(error(call("add", { a: 1, b: 2, c: 3 })), [
    "Error: add: arguments.c is not a parameter (known: a, b)",
  ]);
  t.deepEqual(error(call("add", [1, 2])), ["Error: the arguments of add are not a JSON object"]);
  t.deepEqual(error(`${call("echo", { text: "x" })} <tool_call>{"name": "add"`), [
    undefined,
    "Error: <tool_call> is not closed by </tool_call>",
  ]);
});

test("tool responses are cut as veRL cuts them: left keeps the start, right the end, middle both", (t) => {
  const text = "0123456789abcdef";
  t.is(truncateToolResponse(text, 16, "middle"), text);
  t.is(truncateToolResponse(text, 6, "left"), "012345...(truncated)");
  t.is(truncateToolResponse(text, 6, "right"), "(truncated)...abcdef");
  t.is(truncateToolResponse(text, 6, "middle"), "012...(truncated)...def");
});

test("the chat template comes from tokenizer_config.json; tool turns splice exactly as the whole conversation renders", (t) => {
  t.throws(() => ChatTemplate.fromTokenizer(bytes), {
    instanceOf: ChatTemplateError,
    message: /has no chat_template/,
  });
  const m = tools();
  const head = template.render([{ role: "user", content: "Q" }], {
    tools: [...m.values()].map((x) => x.schema),
  });
  t.true(
    head.includes('<tools>\n{"type": "function", "function": {"name": "add"'),
    "each schema is in the prompt",
  );
  t.true(head.includes('{"name": "echo"'));
  const turns = [
    { role: "tool" as const, content: "5" },
    { role: "tool" as const, content: "hi" },
  ];
  const spliced =
    template.render([{ role: "user", content: "Q" }], { addGenerationPrompt: true }) +
    "A<|im_end|>" +
    template.toolTurnsText(turns, "<|im_end|>");
  const whole = template.render(
    [{ role: "user", content: "Q" }, { role: "assistant", content: "A" }, ...turns],
    { addGenerationPrompt: true },
  );
  t.is(spliced, whole);
  t.is(
    template.toolTurnsText(turns, "<|im_end|>"),
    "\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\nhi\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
  );
  t.throws(() => template.toolTurnsText(turns, "<|endoftext|>"), {
    instanceOf: ChatTemplateError,
    message: /does not end an assistant turn/,
  });
});

test("a known conversation: tool turns appended, every loss-mask bit on the assistant's own tokens only", async (t) => {
  const add = new AddTool();
  const m = tools({ add });
  const turns = [
    call("add", { a: 2, b: 3 }),
    `ok ${call("nope", {})}${call("echo", { text: "hi" })}`,
    "So \\boxed{5}",
  ];
  const direct = "\\boxed{1}";
  const prompts = [prompt("2+3?", m), prompt("1?", m)];
  const { samples } = await agentLoopRollout(model, tok, prompts, {
    tools: m,
    chatTemplate: template,
    maxResponseLength: 400,
    maxParallelCalls: 2,
    logitsProcessor: scripted([turns, [direct]]),
    seed: 1,
  });
  const own = (s: string) => [...tok.encode(s), IM_END];
  const toolTurn = (...contents: string[]) =>
    tok.encode(
      template.toolTurnsText(
        contents.map((content) => ({ role: "tool", content })),
        "<|im_end|>",
      ),
    );
  const unknown = 'Error: unknown tool "nope" (available: add, echo)';
  const parts: [number[], 0 | 1][] = [
    [own(turns[0]!), 1],
    [toolTurn("5"), 0],
    [own(turns[1]!), 1],
    [toolTurn(unknown, "hi"), 0],
    [own(turns[2]!), 1],
  ];
  const [s0, s1] = samples;
  t.deepEqual(
    s0!.responseIds,
    parts.flatMap(([ids]) => ids),
  );
  t.deepEqual(
    Array.from(s0!.toolOutputMask),
    parts.flatMap(([ids, bit]) => ids.map(() => bit)),
  );
  t.is(s0!.finishReason, "stop");
  t.is(s0!.stopReason, IM_END);
  t.like(s0, {
    numTurns: 6,
    assistantTurns: 3,
    numToolCalls: 3,
    numToolPasses: 2,
    numMalformedCalls: 1,
    executionPasses: 0,
  });
  t.deepEqual(
    s0!.calls.map((c) => [c.call.name, c.observation, c.success]),
    [
      ["add", "5", true],
      ["", unknown, false],
      ["echo", "hi", true],
    ],
  );
  t.is(s0!.text.slice(...s0!.calls[0]!.textRange), tok.decode(toolTurn("5"), true));
  // the whole context is exactly the chat template's rendering of the conversation
  const whole = template.render(
    [
      { role: "user", content: "2+3?" },
      { role: "assistant", content: turns[0]! },
      { role: "tool", content: "5" },
      { role: "assistant", content: turns[1]! },
      { role: "tool", content: unknown },
      { role: "tool", content: "hi" },
      { role: "assistant", content: turns[2]! },
    ],
    { tools: [...m.values()].map((x) => x.schema) },
  );
  t.is(`${tok.decode([...prompts[0]!, ...s0!.responseIds], false)}\n`, whole);
  t.deepEqual(s1!.responseIds, own(direct));
  t.deepEqual(
    Array.from(s1!.toolOutputMask),
    own(direct).map(() => 1),
  );
  t.like(s1, { numTurns: 2, numToolCalls: 0, executionPasses: 1 });
  t.deepEqual(
    [add.created, add.released],
    [1, 1],
    "one instance per conversation and tool, released at the end",
  );

  // The training batch: loss_mask = response_mask & tool_output_mask, bit for bit, padding 0.
  const R = 420;
  const batch = agentTrainingBatch(samples, { padTokenId: tok.padTokenId, responseLength: R });
  const loss = batch.tensor("loss_mask").data;
  const expected = (s: typeof s0) => [
    ...Array.from(s!.toolOutputMask),
    ...new Array(R - s!.responseIds.length).fill(0),
  ];
  t.deepEqual(Array.from(loss.subarray(0, R)), expected(s0));
  t.deepEqual(Array.from(loss.subarray(R, 2 * R)), expected(s1));
  t.deepEqual(Array.from(batch.tensor("num_turns").data), [6, 2]);
  t.deepEqual(batch.nonTensorBatch.tool_call_names, [["add", "echo"], []]);
  t.deepEqual(computeMultiTurnMetrics(batch), {
    "num_turns/min": 2,
    "num_turns/max": 6,
    "num_turns/mean": 4,
    "tool/malformed_call_ratio": 1 / 3,
    "tool/add/calls_per_response": 0.5,
    "tool/echo/calls_per_response": 0.5,
  });
});

test("limits: max_parallel_calls answers extra calls with an error, max_assistant_turns ends, long responses are cut", async (t) => {
  const m = tools({ echo: createEchoTool({ repeat: 50 }) });
  const two = `${call("add", { a: 1, b: 1 })}${call("add", { a: 2, b: 2 })}`;
  const base = { tools: m, chatTemplate: template, maxResponseLength: 600, seed: 3 };
  const p = [prompt("q", m)];
  const parallel = await agentLoopRollout(model, tok, p, {
    ...base,
    logitsProcessor: scripted([[two, "done"]]),
  });
  t.deepEqual(
    parallel.samples[0]!.calls.map((c) => c.observation),
    ["2", "Error: at most 1 tool call(s) run per turn; this call was not run"],
  );
  const oneTurn = await agentLoopRollout(model, tok, p, {
    ...base,
    maxAssistantTurns: 1,
    logitsProcessor: scripted([[two, "done"]]),
  });
  t.like(oneTurn.samples[0], {
    finishReason: "stop",
    stopReason: "max_assistant_turns",
    numToolCalls: 0,
    assistantTurns: 1,
  });
  t.deepEqual(
    Array.from(oneTurn.samples[0]!.toolOutputMask),
    oneTurn.samples[0]!.responseIds.map(() => 1),
  );
  const cut = await agentLoopRollout(model, tok, p, {
    ...base,
    maxToolResponseLength: 10,
    toolResponseTruncateSide: "left",
    logitsProcessor: scripted([[call("echo", { text: "ab" }), "done"]]),
  });
  t.is(cut.samples[0]!.calls[0]!.observation, "ababababab...(truncated)");
  t.true(cut.samples[0]!.text.includes("<tool_response>\nababababab...(truncated)\n</tool_response>"));
});

test("the response budget: a tool turn that does not fit ends the conversation with length, nothing appended", async (t) => {
  const m = tools();
  const first = call("add", { a: 1, b: 1 });
  const budget = tok.encode(first).length + 1 + 10; // the turn and its <|im_end|> fit, the tool turn does not
  const { samples } = await agentLoopRollout(model, tok, [prompt("q", m)], {
    tools: m,
    chatTemplate: template,
    maxResponseLength: budget,
    logitsProcessor: scripted([[first, "done"]]),
  });
  t.like(samples[0], { finishReason: "length", numToolCalls: 1 });
  t.deepEqual(samples[0]!.responseIds, [...tok.encode(first), IM_END]);
});

test("a tool whose backend fails is an error of the rollout, not an observation", async (t) => {
  const m = tools({ add: new BrokenTool() });
  await t.throwsAsync(
    agentLoopRollout(model, tok, [prompt("q", m)], {
      tools: m,
      chatTemplate: template,
      maxResponseLength: 300,
      logitsProcessor: scripted([[call("add", { a: 1, b: 1 })]]),
    }),
    { instanceOf: ToolExecutionError, message: /tool add failed for sequences \[0\]: backend unreachable/ },
  );
});

test("the tool config file in veRL's shape: class or factory, config to the constructor, schema required", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "tool-config-"));
  const module = new URL("./agent-tools.ts", import.meta.url).pathname;
  const file = join(dir, "tools.yaml");
  const schema = (name: string, props: string) =>
    `    tool_schema:\n      type: function\n      function:\n        name: ${name}\n        description: d\n        parameters: {type: object, properties: {${props}}, required: []}\n`;
  writeFileSync(
    file,
    `tools:\n  - class_name: ${module}.AddTool\n    config: {type: native, offset: 100}\n${schema("plus", "a: {type: number}, b: {type: number}")}` +
      `  - class_name: ${module}.createEchoTool\n    config: {repeat: 2}\n${schema("echo", "text: {type: string}")}`,
  );
  const loaded = await loadToolConfig(file);
  t.deepEqual([...loaded.keys()], ["plus", "echo"], "the model calls a tool by its schema's name");
  const plus = loaded.get("plus")!.tool as AddTool;
  t.true(plus instanceof AddTool);
  t.is(plus.offset, 100);
  t.is((await plus.execute("x", { name: "plus", arguments: { a: 1, b: 2 } })).observation, "103");
  t.is(
    (await loaded.get("echo")!.tool.execute("x", { name: "echo", arguments: { text: "ab" } })).observation,
    "abab",
  );

  const bad = (body: string, message: RegExp) => {
    writeFileSync(file, body);
    t.throws(() => readToolConfig(file), { instanceOf: ToolConfigError, message }, body);
  };
  bad("tools: 3", /needs a top-level `tools:` list/);
  bad(
    `tools:\n  - class_name: AddTool\n${schema("x", "")}`,
    /tools\[0\]\): class_name must be "<module>.<export>"/,
  );
  bad(`tools:\n  - class_name: ./m.ts.X\n`, /tools\[0\]\): tool_schema must be an OpenAI function schema/);
  bad(
    `tools:\n  - class_name: ./m.ts.X\n    config: {type: mcp}\n${schema("x", "")}`,
    /config.type "mcp" is not supported/,
  );
  bad(
    `tools:\n  - class_name: ./m.ts.X\n${schema("x", "")}  - class_name: ./m.ts.Y\n${schema("x", "")}`,
    /tools\[1\]\): two tools are named x/,
  );
  bad(
    `tools:\n  - class_name: ./m.ts.X\n${schema("x", "")}`,
    /tools\[0\]\): class_name \.\/m\.ts\.X: \.\/m\.ts does not exist \(resolved to .*m\.ts\)/,
  );
  bad(
    `tools:\n  - class_name: no-such-tools-package.X\n${schema("x", "")}`,
    /tools\[0\]\): class_name no-such-tools-package\.X: cannot find the package no-such-tools-package/,
  );
  writeFileSync(file, `tools:\n  - class_name: ${module}.Missing\n${schema("x", "")}`);
  await t.throwsAsync(loadToolConfig(file), {
    instanceOf: ToolConfigError,
    message: /tools\[0\]\): cannot build the tool: .*no export "Missing"/,
  });
});

test("the trainer refuses a half-configured multi-turn run before starting anything, naming the keys", (t) => {
  const cfg = loadTrainerConfig({
    overrides: [
      "actor_rollout_ref.model.path=/nowhere",
      "actor_rollout_ref.rollout.multi_turn.enable=true",
      "actor_rollout_ref.rollout.multi_turn.tool_config_path=/no/tools.yaml",
      "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0",
    ],
  });
  const messages = checkTrainerSetup(cfg, {
    trainRows: [],
    tool: { module: "file:///x.ts", exportName: "X" },
  }).map((i) => i.message);
  t.true(
    messages.some((m) => /^data\.template_type is "tir_base_0309": .*set data\.template_type=model/.test(m)),
    messages.join("\n"),
  );
  t.true(
    messages.includes(
      "actor_rollout_ref.rollout.multi_turn.tool_config_path names /no/tools.yaml, which does not exist",
    ),
  );
  t.true(
    messages.includes(
      "actor_rollout_ref.rollout.multi_turn.max_parallel_calls must be an integer >= 1, got 0",
    ),
  );
  t.true(messages.some((m) => m.startsWith("tool is the text-trigger tool")));
  const off = loadTrainerConfig({ overrides: ["actor_rollout_ref.model.path=/nowhere"] });
  t.deepEqual(checkMultiTurnConfig(off), [], "the text-trigger mode is untouched");
});

test("template_type=model renders the prompt with the model's chat template and the tool config's schemas", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "model-template-"));
  const file = join(dir, "tools.yaml");
  writeFileSync(join(dir, "x.ts"), "export class X {}\n"); // the schemas are read; the module is not imported
  writeFileSync(
    file,
    "tools:\n  - class_name: ./x.ts.X\n    tool_schema:\n      type: function\n      function: {name: lookup, description: finds things}\n",
  );
  const cfg = loadTrainerConfig({
    overrides: [
      "data.template_type=model",
      "actor_rollout_ref.rollout.multi_turn.enable=true",
      `actor_rollout_ref.rollout.multi_turn.tool_config_path=${file}`,
    ],
  });
  const text = modelPromptRenderer(cfg, tok)([{ role: "user", content: "Q?" }]);
  t.true(text.includes('{"type": "function", "function": {"name": "lookup", "description": "finds things"'));
  t.true(text.endsWith("<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"));
  t.throws(() => renderPrompt("model", [{ role: "user", content: "Q?" }]), {
    message: /modelPromptRenderer/,
  });
});

test("the sandbox code interpreter of a tool config: the keys of actor_rollout_ref.rollout.tool", async (t) => {
  const tool = await createCodeInterpreterTool({ sandbox_actors: 0, sandbox_workers: 1, run_timeout: 10 });
  const id = await tool.create();
  const ok = await tool.execute(id, { name: "code_interpreter", arguments: { code: "print(6*7)" } });
  t.like(ok, { observation: "42", success: true });
  const bad = await tool.execute(id, { name: "code_interpreter", arguments: { code: "1/0" } });
  t.like(bad, { observation: "ZeroDivisionError: division by zero", success: false });
  await tool.close();
});
