/**
 * The tool interface, in the spirit of veRL's BaseTool (create / execute / release plus an OpenAI
 * function schema; veRL's step and trajectory rewards are not part of it: a run's reward comes from the
 * reward manager, which reads each response's execution_passes and num_tool_calls), extended with what a text-based TIR rollout needs to stay generic: the
 * tool's own stop strings (its trigger), a parser that finds the call in the text of the current
 * round, and the exact text to append. The rollout knows nothing else about any tool.
 */

import { settleWithin } from "../settle-within.js";

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

/** A tool that broke its contract (a member of the wrong kind, a malformed result) or a call that failed. */
export class ToolError extends Error {
  override name = "ToolError";
  constructor(
    /** The tool as `name (module#export)`, or what is known of it. */
    readonly tool: string,
    /** The member or method: "stop", "execute", ... */
    readonly member: string,
    /** What went wrong, after the member: "did not finish within 300 s; ...". */
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(`tool ${tool}: ${member} ${detail}`, options);
  }
}

/** A call into a tool that did not settle within its time (actor_rollout_ref.rollout.tool.call_timeout). */
export class ToolTimeoutError extends ToolError {
  override name = "ToolTimeoutError";
}

/** The key that bounds every call into a tool given with --tool or TrainerOptions.tool. */
export const TOOL_CALL_TIMEOUT_KEY = "actor_rollout_ref.rollout.tool.call_timeout";

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** What a value is, in words, for an error message. */
function kind(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string")
    return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)}`;
  if (typeof v === "object") return "an object";
  return `${typeof v}${typeof v === "number" || typeof v === "boolean" ? ` ${v}` : ""}`;
}

export interface CheckToolOptions {
  /**
   * The tool is a text-trigger tool (rollout.tool, --tool): it needs `stop` and `parse`. The multi-turn
   * agent loop finds calls itself (hermes format) and needs neither.
   */
  trigger?: boolean;
}

/**
 * `value` checked as a Tool where it is built, so that a tool of the wrong shape is refused there, naming
 * `where` (the module#export) and the member, instead of failing later or, worse, running wrongly: a
 * `stop` string would be read as its characters, an empty `stop` would never trigger.
 */
export function checkTool(value: unknown, where: string, options: CheckToolOptions = {}): Tool {
  const fail = (member: string, message: string) => new ToolError(where, member, message);
  if (typeof value !== "object" || value === null)
    throw new ToolError(
      where,
      "export",
      `gave ${value === undefined ? "undefined" : kind(value)}, not a Tool: a class must construct one, a function must return one (an object with name, stop, parse, create, execute, release)`,
    );
  const t = value as Record<string, unknown>;
  if (typeof t.name !== "string" || t.name.length === 0)
    throw fail("name", `must be a non-empty string, got ${kind(t.name)}`);
  const trigger = options.trigger ?? true;
  if (trigger) {
    const stop = t.stop;
    if (
      !Array.isArray(stop) ||
      stop.length === 0 ||
      !stop.every((s) => typeof s === "string" && s.length > 0)
    )
      throw fail(
        "stop",
        `must be a non-empty array of non-empty strings (the texts that end a round where the tool is called), got ${
          Array.isArray(stop) ? JSON.stringify(stop) : kind(stop)
        }${typeof stop === "string" && stop.length > 0 ? `: write [${JSON.stringify(stop)}]` : ""}`,
      );
  }
  for (const m of trigger ? ["parse", "create", "execute", "release"] : ["create", "execute", "release"])
    if (typeof t[m] !== "function") throw fail(m, `must be a function, got ${kind(t[m])}`);
  if (t.executeBatch !== undefined && typeof t.executeBatch !== "function")
    throw fail("executeBatch", `must be a function when present, got ${kind(t.executeBatch)}`);
  return value as Tool;
}

/** A ToolResult checked: `label` names the tool, `method` where it came from. */
export function checkToolResult(r: unknown, label: string, method: string): ToolResult {
  const fail = (message: string) => new ToolError(label, method, message);
  if (!isRecord(r))
    throw fail(`returned ${kind(r)}, not a ToolResult {observation, text, success, metrics?}`);
  for (const key of ["observation", "text"] as const)
    if (typeof r[key] !== "string")
      throw fail(`returned a ToolResult whose ${key} is ${kind(r[key])}, not a string`);
  if (typeof r.success !== "boolean")
    throw fail(`returned a ToolResult whose success is ${kind(r.success)}, not a boolean`);
  if (r.metrics !== undefined) {
    if (!isRecord(r.metrics))
      throw fail(`returned a ToolResult whose metrics is ${kind(r.metrics)}, not a record`);
    for (const [k, v] of Object.entries(r.metrics))
      if (typeof v !== "number" || !Number.isFinite(v))
        throw fail(`returned a ToolResult whose metrics.${k} is ${kind(v)}, not a finite number`);
  }
  return r as unknown as ToolResult;
}

/** A parse result checked: undefined (no call) or a ToolCall. */
export function checkToolCall(c: unknown, label: string): ToolCall | undefined {
  if (c === undefined) return undefined;
  if (!isRecord(c) || typeof c.name !== "string" || !isRecord(c.arguments))
    throw new ToolError(
      label,
      "parse",
      `returned ${kind(c)}${isRecord(c) ? ` with name ${kind(c.name)} and arguments ${kind(c.arguments)}` : ""}: it must return undefined (no call) or {name: string, arguments: object}`,
    );
  return c as unknown as ToolCall;
}

export interface GuardToolOptions {
  /** The tool in messages: `name (module#export)`. */
  label: string;
  /** Most milliseconds one call may take (an executeBatch: this per call, maxConcurrency at a time); none: unbounded. */
  callTimeoutMs?: number;
  /** Calls an executeBatch runs at once, for its time bound. Default: all of them. */
  maxConcurrency?: number;
}

/**
 * `tool` with every call into it checked (results and parsed calls of the right shape, errors of create
 * and release naming the tool) and, with callTimeoutMs, bounded: a call that does not settle in time
 * rejects with a ToolTimeoutError naming the tool, the method and the key to raise, where it would
 * otherwise hang the step forever (the call itself cannot be stopped; its late result is ignored).
 */
export function guardTool(tool: Tool, options: GuardToolOptions): Tool {
  const { label, callTimeoutMs } = options;
  const bounded = <T>(
    method: string,
    ms: number | undefined,
    why: string,
    call: () => Promise<T>,
  ): Promise<T> => {
    let p: Promise<T>;
    try {
      p = Promise.resolve(call());
    } catch (e) {
      p = Promise.reject(e);
    }
    if (ms === undefined) return p;
    return settleWithin(
      p,
      ms,
      () =>
        new ToolTimeoutError(
          label,
          method,
          `did not finish within ${ms / 1000} s${why}; raise ${TOOL_CALL_TIMEOUT_KEY} if the tool needs longer, or find why it hangs`,
        ),
    );
  };
  // create and release errors would otherwise not name the tool (execute's are wrapped by the rollout)
  const named = (method: string) => (e: unknown) => {
    if (e instanceof ToolError) throw e;
    throw new ToolError(label, method, `failed: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  };
  const guarded: Tool = {
    name: tool.name,
    schema: tool.schema,
    stop: tool.stop,
    parse: (roundText) => checkToolCall(tool.parse(roundText), label),
    create: (instanceId, opts) =>
      bounded("create", callTimeoutMs, "", () => tool.create(instanceId, opts)).then((id) => {
        if (typeof id !== "string" || id.length === 0)
          throw new ToolError(
            label,
            "create",
            `returned ${kind(id)}, not an instance id (a non-empty string)`,
          );
        return id;
      }, named("create")),
    execute: (instanceId, call) =>
      bounded("execute", callTimeoutMs, "", () => tool.execute(instanceId, call)).then((r) =>
        checkToolResult(r, label, "execute"),
      ),
    release: (instanceId) =>
      bounded("release", callTimeoutMs, "", () => tool.release(instanceId)).then(
        () => undefined,
        named("release"),
      ),
  };
  if (tool.executeBatch) {
    const batch = tool.executeBatch.bind(tool);
    guarded.executeBatch = (items) => {
      const at = Math.max(1, Math.min(options.maxConcurrency ?? items.length, items.length));
      const rounds = Math.ceil(items.length / at);
      const ms = callTimeoutMs === undefined ? undefined : callTimeoutMs * rounds;
      const why =
        callTimeoutMs === undefined
          ? ""
          : ` (${items.length} call(s), ${callTimeoutMs / 1000} s per call, ${at} at a time)`;
      return bounded("executeBatch", ms, why, () => batch(items)).then((rs) => {
        if (!Array.isArray(rs) || rs.length !== items.length)
          throw new ToolError(
            label,
            "executeBatch",
            `returned ${Array.isArray(rs) ? `${rs.length} result(s)` : kind(rs)} for ${items.length} call(s): it must return one ToolResult per call, in order`,
          );
        return rs.map((r, i) => checkToolResult(r, label, `executeBatch (result ${i})`));
      });
    };
  }
  return guarded;
}
