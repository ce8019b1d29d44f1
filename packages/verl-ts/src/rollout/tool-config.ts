/**
 * The tool config file of veRL's multi-turn rollout (`actor_rollout_ref.rollout.multi_turn.tool_config_path`):
 *
 *   tools:
 *     - class_name: ../src/calculator.ts.CalculatorTool   # <module>.<export>
 *       config: { type: native, maxExpressionChars: 200 } # given to the constructor (without `type`)
 *       tool_schema:                                      # OpenAI function schema shown to the model
 *         type: function
 *         function: { name: calculator, description: ..., parameters: { type: object, ... } }
 *
 * `class_name` is a module and an export joined by the last dot, as veRL writes `pkg.module.Class`. The
 * module is a path relative to this file (starting with ./ or ../), an absolute path, or a package name
 * (`@torl-ts/verl`). The export is a Tool class (`new Cls(config)`) or a function returning a Tool (`await
 * fn(config)`). `config.type` must be `native` (veRL's MCP tools are not supported). The schema's
 * function name is the name the model calls; it is required here, as veRL's own tools require it.
 */
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { InputError } from "@torl-ts/core";
import { parse as parseYaml } from "yaml";
import type { OpenAIFunctionSchema, Tool } from "./tool.js";

/** A tool config file that cannot be used; names the file and the entry. */
export class ToolConfigError extends InputError {
  override name = "ToolConfigError";
  constructor(
    readonly file: string,
    message: string,
    readonly entry?: number,
  ) {
    super(`${file}${entry !== undefined ? ` (tools[${entry}])` : ""}: ${message}`);
  }
}

export interface ToolConfigEntry {
  /** The module specifier to import (a file URL for paths). */
  module: string;
  exportName: string;
  /** The entry's `config` without `type`: the constructor's argument. */
  config: Record<string, unknown>;
  schema: OpenAIFunctionSchema;
}

/** A tool of a multi-turn run: the instance and the schema the model calls it by. */
export interface ConfiguredTool {
  tool: Tool;
  schema: OpenAIFunctionSchema;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Reads and checks the file; nothing is imported. */
export function readToolConfig(file: string): ToolConfigEntry[] {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(file, "utf8"));
  } catch (e) {
    throw new ToolConfigError(file, `cannot read (${(e as Error).message})`);
  }
  if (!isObject(doc) || !Array.isArray(doc.tools))
    throw new ToolConfigError(file, "needs a top-level `tools:` list");
  const names = new Set<string>();
  return doc.tools.map((raw: unknown, i: number) => {
    const fail = (message: string) => new ToolConfigError(file, message, i);
    if (!isObject(raw)) throw fail("each tool is a map with class_name, config and tool_schema");
    const cls = raw.class_name;
    const dot = typeof cls === "string" ? cls.lastIndexOf(".") : -1;
    if (typeof cls !== "string" || dot <= 0 || dot === cls.length - 1)
      throw fail(`class_name must be "<module>.<export>", got ${JSON.stringify(cls)}`);
    const spec = cls.slice(0, dot);
    const module =
      spec.startsWith("./") || spec.startsWith("../")
        ? pathToFileURL(resolve(dirname(file), spec)).href
        : isAbsolute(spec)
          ? pathToFileURL(spec).href
          : spec;
    const { type = "native", ...config } = isObject(raw.config) ? raw.config : {};
    if (raw.config !== undefined && !isObject(raw.config)) throw fail("config must be a map");
    if (type !== "native") throw fail(`config.type ${JSON.stringify(type)} is not supported (only native)`);
    const schema = raw.tool_schema;
    if (!isObject(schema) || schema.type !== "function" || !isObject(schema.function))
      throw fail("tool_schema must be an OpenAI function schema {type: function, function: {name, ...}}");
    const fn = schema.function;
    if (typeof fn.name !== "string" || !/^[A-Za-z0-9_-]+$/.test(fn.name))
      throw fail(
        `tool_schema.function.name must be a name of letters, digits, _ or -, got ${JSON.stringify(fn.name)}`,
      );
    if (names.has(fn.name)) throw fail(`two tools are named ${fn.name}`);
    names.add(fn.name);
    const parameters = fn.parameters ?? { type: "object", properties: {}, required: [] };
    if (!isObject(parameters) || parameters.type !== "object")
      throw fail("tool_schema.function.parameters must be a JSON schema of type object");
    return {
      module,
      exportName: cls.slice(dot + 1),
      config,
      schema: {
        type: "function",
        function: {
          name: fn.name,
          description: typeof fn.description === "string" ? fn.description : "",
          parameters: parameters as unknown as OpenAIFunctionSchema["function"]["parameters"],
        },
      },
    };
  });
}

/**
 * Builds a Tool from a module and an export that is a class (constructed with `args`) or a function
 * (called with `args`, may be async).
 */
export async function instantiateTool(module: string, exportName: string, args: unknown[]): Promise<Tool> {
  const mod = (await import(module)) as Record<string, unknown>;
  const exp = mod[exportName];
  if (typeof exp !== "function") throw new InputError(`tool module ${module} has no export "${exportName}"`);
  const isClass = /^class[\s{]/.test(Function.prototype.toString.call(exp));
  return isClass
    ? (new (exp as new (...a: unknown[]) => Tool)(...args) as Tool)
    : await (exp as (...a: unknown[]) => Tool | Promise<Tool>)(...args);
}

/** Imports and builds every tool of the file; the map is keyed by the schema's function name. */
export async function loadToolConfig(file: string): Promise<Map<string, ConfiguredTool>> {
  const entries = readToolConfig(file);
  const tools = new Map<string, ConfiguredTool>();
  for (const [i, e] of entries.entries()) {
    let tool: Tool;
    try {
      tool = await instantiateTool(e.module, e.exportName, [e.config]);
    } catch (err) {
      throw new ToolConfigError(file, `cannot build the tool: ${(err as Error).message}`, i);
    }
    tools.set(e.schema.function.name, { tool, schema: e.schema });
  }
  return tools;
}
