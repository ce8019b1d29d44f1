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
 * (`@torl-ts/verl`, found from this file's folder as Node finds packages). The export is a Tool class (`new Cls(config)`) or a function returning a Tool (`await
 * fn(config)`). `config.type` must be `native` (veRL's MCP tools are not supported). The schema's
 * function name is the name the model calls; it is required here, as veRL's own tools require it.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { InputError } from "@torl-ts/core";
import { parse as parseYaml } from "yaml";
import { checkTool, type OpenAIFunctionSchema, type Tool } from "./tool.js";

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
  const entries: ToolConfigEntry[] = doc.tools.map((raw: unknown, i: number) => {
    const fail = (message: string) => new ToolConfigError(file, message, i);
    if (!isObject(raw)) throw fail("each tool is a map with class_name, config and tool_schema");
    const cls = raw.class_name;
    const dot = typeof cls === "string" ? cls.lastIndexOf(".") : -1;
    if (typeof cls !== "string" || dot <= 0 || dot === cls.length - 1)
      throw fail(`class_name must be "<module>.<export>", got ${JSON.stringify(cls)}`);
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
      module: cls.slice(0, dot),
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
  // the modules last, once every entry is well formed: a file that is not there, a package not installed
  for (const [i, e] of entries.entries()) {
    try {
      e.module = resolveToolModule(e.module, dirname(file));
    } catch (err) {
      throw new ToolConfigError(file, `class_name ${e.module}.${e.exportName}: ${(err as Error).message}`, i);
    }
  }
  return entries;
}

/**
 * Where a worker process finds the rollout's tool: a module URL and an export that is either a class
 * (constructed with `args`) or a function (called with `args`, may be async) returning a Tool.
 * `module` is a file: URL, an absolute path, a package specifier, or a path relative to the driver's
 * working directory (./tool.mjs: the trainer resolves it there, rolloutToolSpec, before the workers
 * import it). `args` is an array of plain data (no functions, cycles or BigInt: it travels to the
 * workers); without it the tool gets the actor_rollout_ref.rollout.tool section. The built tool is
 * checked (checkTool) and every call into it is bounded by actor_rollout_ref.rollout.tool.call_timeout.
 */
export interface ToolSpec {
  module: string;
  exportName?: string;
  args?: unknown[];
}

/**
 * The module URL of a tool module named as a user writes it: a path relative to `baseDir` (starting with
 * ./ or ../), an absolute path, a URL (`file:...`), or a package specifier (`@torl-ts/verl`,
 * `my-tools/calculator`), found from `baseDir` as Node finds packages (then from this package, so
 * @torl-ts/verl itself is always found). A file that does not exist or a package that is not installed is
 * an InputError saying so.
 */
export function resolveToolModule(spec: string, baseDir: string = process.cwd()): string {
  if (/^[a-z][a-z0-9+.-]+:/i.test(spec)) return spec;
  if (spec === "." || spec === ".." || spec.startsWith("./") || spec.startsWith("../") || isAbsolute(spec)) {
    const path = resolve(baseDir, spec);
    if (!existsSync(path)) throw new InputError(`${spec} does not exist (resolved to ${path})`);
    return pathToFileURL(path).href;
  }
  for (const from of [join(baseDir, "package.json"), fileURLToPath(import.meta.url)]) {
    try {
      return pathToFileURL(createRequire(from).resolve(spec)).href;
    } catch {
      // not installed there; try the next place
    }
  }
  const file = resolve(baseDir, spec);
  throw new InputError(
    `cannot find the package ${spec} from ${baseDir}` +
      (existsSync(file)
        ? ` (for the file ${file}, write ./${spec})`
        : " (install it, or give a path: ./file.js)"),
  );
}

const firstLine = (message: string) => message.split("\n")[0]!.trim();

/** The export `exportName` of `module`, which must be a class or a function; an InputError says what is wrong. */
export async function importToolExport(module: string, exportName: string): Promise<unknown> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(module)) as Record<string, unknown>;
  } catch (e) {
    throw new InputError(`cannot import the tool module ${module}: ${firstLine((e as Error).message)}`);
  }
  const exp = mod[exportName];
  if (typeof exp !== "function") {
    const fns = Object.keys(mod).filter((k) => typeof mod[k] === "function");
    throw new InputError(
      `the tool module ${module} has no ${exp === undefined ? "" : "class or function "}export "${exportName}"` +
        ` (its functions and classes: ${fns.length ? fns.join(", ") : "none"})`,
    );
  }
  return exp;
}

/**
 * Builds a Tool from a module and an export that is a class (constructed with `args`) or a function
 * (called with `args`, may be async).
 */
export async function instantiateTool(module: string, exportName: string, args: unknown[]): Promise<Tool> {
  const exp = await importToolExport(module, exportName);
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
    const where = `${e.module}#${e.exportName}`;
    try {
      // the agent loop finds calls itself (hermes): no stop strings or parse needed
      tool = checkTool(await instantiateTool(e.module, e.exportName, [e.config]), where, { trigger: false });
    } catch (err) {
      throw new ToolConfigError(file, `cannot build the tool: ${(err as Error).message}`, i);
    }
    // results are checked by the agent loop as they come back (guardTool)
    tools.set(e.schema.function.name, { tool, schema: e.schema });
  }
  return tools;
}
