/**
 * Hermes-format tool calls (veRL's `multi_turn.format: hermes`, Qwen2.5's template): an assistant turn
 * holds zero or more
 *
 *   <tool_call>
 *   {"name": "calculator", "arguments": {"expression": "6*7"}}
 *   </tool_call>
 *
 * blocks. Every block is returned in order, either as a call or as the reason it cannot run; the reason
 * is what the model reads back as the tool's response, so a malformed call is an observation, never an
 * exception: bad JSON, no "name", "arguments" not an object (a JSON string holding an object is
 * accepted, as OpenAI's wire format sends it), an unknown tool, arguments that do not match the tool's
 * parameter schema, or a `<tool_call>` left open at the end of the turn.
 */
import type { JsonSchema, OpenAIFunctionSchema, ToolCall } from "./tool.js";

export const TOOL_CALL_OPEN = "<tool_call>";
export const TOOL_CALL_CLOSE = "</tool_call>";

/** One `<tool_call>` block of a turn: a call to run, or the error the model is told instead. */
export type ParsedToolCall = { call: ToolCall; error?: undefined } | { call?: undefined; error: string };

/** The blocks of an assistant turn, in order (an empty list: the turn calls no tool). */
export function parseHermesToolCalls(
  turnText: string,
  schemas: ReadonlyMap<string, OpenAIFunctionSchema>,
): ParsedToolCall[] {
  const out: ParsedToolCall[] = [];
  let at = 0;
  for (;;) {
    const open = turnText.indexOf(TOOL_CALL_OPEN, at);
    if (open < 0) break;
    const close = turnText.indexOf(TOOL_CALL_CLOSE, open + TOOL_CALL_OPEN.length);
    if (close < 0) {
      out.push({ error: `Error: ${TOOL_CALL_OPEN} is not closed by ${TOOL_CALL_CLOSE}` });
      break;
    }
    out.push(readCall(turnText.slice(open + TOOL_CALL_OPEN.length, close), schemas));
    at = close + TOOL_CALL_CLOSE.length;
  }
  return out;
}

function readCall(body: string, schemas: ReadonlyMap<string, OpenAIFunctionSchema>): ParsedToolCall {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (e) {
    return { error: `Error: the tool call is not valid JSON (${(e as Error).message})` };
  }
  if (!isObject(value) || typeof value.name !== "string")
    return { error: 'Error: a tool call is a JSON object {"name": ..., "arguments": {...}}' };
  const schema = schemas.get(value.name);
  if (!schema)
    return {
      error: `Error: unknown tool "${value.name}" (available: ${[...schemas.keys()].join(", ") || "none"})`,
    };
  let args = value.arguments ?? {};
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      return { error: `Error: the arguments of ${value.name} are not a JSON object` };
    }
  }
  if (!isObject(args)) return { error: `Error: the arguments of ${value.name} are not a JSON object` };
  const mismatch = schemaMismatch(args, schema.function.parameters, "arguments");
  if (mismatch) return { error: `Error: ${value.name}: ${mismatch}` };
  return { call: { name: value.name, arguments: args } };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Where `value` departs from `schema` (the JSON Schema subset of function parameters: type, properties,
 * required, items, enum), or undefined when it matches. Properties the schema does not name are refused.
 */
export function schemaMismatch(value: unknown, schema: JsonSchema, path: string): string | undefined {
  if (schema.enum && !schema.enum.some((e) => e === value))
    return `${path} must be one of ${JSON.stringify(schema.enum)}, got ${JSON.stringify(value)}`;
  const kind = schema.type;
  const got = Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
  const fits =
    kind === "integer"
      ? Number.isInteger(value)
      : kind === "number"
        ? typeof value === "number" && Number.isFinite(value)
        : kind === got;
  if (!fits) return `${path} must be ${kind === "integer" ? "an integer" : `of type ${kind}`}, got ${got}`;
  if (kind === "object" && isObject(value)) {
    const props = schema.properties ?? {};
    for (const key of schema.required ?? []) if (!(key in value)) return `${path}.${key} is required`;
    for (const [key, v] of Object.entries(value)) {
      const sub = props[key];
      if (!sub)
        return `${path}.${key} is not a parameter (known: ${Object.keys(props).join(", ") || "none"})`;
      const bad = schemaMismatch(v, sub, `${path}.${key}`);
      if (bad) return bad;
    }
  }
  if (kind === "array" && Array.isArray(value) && schema.items)
    for (const [i, v] of value.entries()) {
      const bad = schemaMismatch(v, schema.items, `${path}[${i}]`);
      if (bad) return bad;
    }
  return undefined;
}
