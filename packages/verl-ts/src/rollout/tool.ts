/**
 * The tool interface, in the spirit of veRL's BaseTool (create / execute / release plus an OpenAI
 * function schema; veRL's step and trajectory rewards are not part of it: a run's reward comes from the
 * reward manager, which reads each response's execution_passes and num_tool_calls), extended with what a text-based TIR rollout needs to stay generic: the
 * tool's own stop strings (its trigger), a parser that finds the call in the text of the current
 * round, and the exact text to append. The rollout knows nothing else about any tool.
 */

/** JSON Schema subset used for tool parameters. */
export interface JsonSchema {
  type: string;
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
}

/** OpenAI-style function schema (`{type: "function", function: {name, description, parameters}}`). */
export interface OpenAIFunctionSchema {
  type: "function";
  function: { name: string; description: string; parameters: JsonSchema };
}

/** A call found in generated text. */
export interface ToolCall {
  /** The tool's name. */
  name: string;
  /** Arguments matching the tool's schema (for the code interpreter: `{code}`). */
  arguments: Record<string, unknown>;
}

/** What one execution gives back to the rollout. */
export interface ToolResult {
  /** The observation itself (what the model reads), after the tool's formatting rules. */
  observation: string;
  /** The exact text to append to the sequence (observation wrapped in the tool's markers). */
  text: string;
  /** The call ran without error (ToRL's execution_pass; a response's execution_passes is 1 when all its calls had it). */
  success: boolean;
  /** Numbers for logging, e.g. `{execution_time: 0.01}`. */
  metrics?: Record<string, number>;
}

export interface Tool {
  readonly name: string;
  /** OpenAI function schema, for chat-style rollouts and documentation. */
  readonly schema: OpenAIFunctionSchema;
  /** Stop strings that end a generation round where this tool should be called. */
  readonly stop: string[];
  /** Finds the call in the text generated in the current round; undefined when there is none. */
  parse(roundText: string): ToolCall | undefined;
  /** Starts a per-trajectory instance (state, a session...); returns its id. */
  create(instanceId?: string, options?: Record<string, unknown>): Promise<string>;
  /** Runs one call for an instance. Never throws for a failure of the call itself: that is an observation. */
  execute(instanceId: string, call: ToolCall): Promise<ToolResult>;
  /** Runs many calls at once (one per instance); the rollout uses this for a whole batch. */
  executeBatch?(items: { instanceId: string; call: ToolCall }[]): Promise<ToolResult[]>;
  /** Frees the instance. */
  release(instanceId: string): Promise<void>;
}

let instanceCounter = 0;

/** A fresh instance id. */
export function newInstanceId(prefix = "tool"): string {
  instanceCounter += 1;
  return `${prefix}-${process.pid}-${instanceCounter}`;
}

/** Runs `executeBatch` when the tool has one, else its calls concurrently. */
export function executeAll(
  tool: Tool,
  items: { instanceId: string; call: ToolCall }[],
): Promise<ToolResult[]> {
  if (tool.executeBatch) return tool.executeBatch(items);
  return Promise.all(items.map((it) => tool.execute(it.instanceId, it.call)));
}
