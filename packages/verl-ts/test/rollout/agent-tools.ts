/**
 * Two small tools for the multi-turn agent loop tests, loadable from a tool config file: `AddTool`
 * (a class, constructed with the entry's config) and `createEchoTool` (a factory function).
 */
import type { OpenAIFunctionSchema, Tool, ToolCall, ToolResult } from "../../src/rollout/index.js";

const schema = (name: string, properties: Record<string, { type: string }>): OpenAIFunctionSchema => ({
  type: "function",
  function: {
    name,
    description: name,
    parameters: { type: "object", properties, required: Object.keys(properties) },
  },
});

export class AddTool implements Tool {
  readonly name = "add";
  readonly stop: string[] = [];
  readonly schema = schema("add", { a: { type: "number" }, b: { type: "number" } });
  readonly offset: number;
  created = 0;
  released = 0;
  batches: number[] = [];

  constructor(config: { offset?: number } = {}) {
    this.offset = config.offset ?? 0;
  }
  parse(): ToolCall | undefined {
    return undefined;
  }
  async create(): Promise<string> {
    return `add-${++this.created}`;
  }
  async execute(_id: string, call: ToolCall): Promise<ToolResult> {
    const sum = Number(call.arguments.a) + Number(call.arguments.b) + this.offset;
    return { observation: String(sum), text: String(sum), success: true };
  }
  async executeBatch(items: { instanceId: string; call: ToolCall }[]): Promise<ToolResult[]> {
    this.batches.push(items.length);
    return Promise.all(items.map((it) => this.execute(it.instanceId, it.call)));
  }
  async release(): Promise<void> {
    this.released++;
  }
}

/** Echoes `text` back, `repeat` times (to make long responses); fails when asked to echo "fail". */
export function createEchoTool(config: { repeat?: number } = {}): Tool {
  const repeat = config.repeat ?? 1;
  return {
    name: "echo",
    stop: [],
    schema: schema("echo", { text: { type: "string" } }),
    parse: () => undefined,
    create: async () => "echo",
    release: async () => {},
    execute: async (_id, call) => {
      const text = String(call.arguments.text);
      const observation = text.repeat(repeat);
      return { observation, text: observation, success: text !== "fail" };
    },
  };
}

/** A tool whose backend is down: every call rejects (an infrastructure failure, not an observation). */
export class BrokenTool extends AddTool {
  override async executeBatch(): Promise<ToolResult[]> {
    throw new Error("backend unreachable");
  }
}
