/**
 * Where the runtime's own entry modules live and how a child process loads them.
 *
 * In this repository the packages run from their TypeScript sources (`src/*.ts`, under tsx); an
 * installed package runs its built JavaScript (`dist/*.js`) under plain `node`. A module that starts a
 * process or a thread on one of its siblings names the sibling without an extension and lets
 * `siblingModule` pick the one matching the running file, and `childExecArgv` adds a TypeScript loader
 * only when one is needed.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** True when `moduleUrl` (pass `import.meta.url`) is a TypeScript file, i.e. it runs under a loader. */
export function isTypeScriptModule(moduleUrl: string | URL): boolean {
  return /\.[cm]?ts$/.test(String(moduleUrl));
}

/**
 * The module `relativeStem` (e.g. `"./daemon"`) beside `moduleUrl`, with the running file's extension:
 * `.ts` from sources, `.js` from the built package.
 */
export function siblingModule(moduleUrl: string, relativeStem: string): URL {
  return new URL(`${relativeStem}${isTypeScriptModule(moduleUrl) ? ".ts" : ".js"}`, moduleUrl);
}

/** `siblingModule` as a file path, for `fork`/`spawn`. */
export function siblingModulePath(moduleUrl: string, relativeStem: string): string {
  return fileURLToPath(siblingModule(moduleUrl, relativeStem));
}

// Flags of this process that change how modules load; a child must load the same way (a user running
// under `node --import tsx` has actor modules in .ts, which the worker then imports). Debugger, heap
// and other per-process flags are not passed on.
const LOADER_FLAGS = new Set([
  "--import",
  "--require",
  "-r",
  "--loader",
  "--experimental-loader",
  "--conditions",
  "-C",
]);
const LOADER_SWITCHES = new Set([
  "--experimental-strip-types",
  "--experimental-transform-types",
  "--enable-source-maps",
]);

/** The module-loading flags of this process (`--import X`, `--conditions Y`, ...), in order. */
export function inheritedLoaderArgs(execArgv: readonly string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i] as string;
    const name = arg.split("=", 1)[0] as string;
    if (LOADER_SWITCHES.has(arg)) out.push(arg);
    else if (LOADER_FLAGS.has(name)) {
      if (arg.includes("=")) out.push(arg);
      else if (i + 1 < execArgv.length) out.push(arg, execArgv[++i] as string);
    }
  }
  return out;
}

/** A TypeScript entry was asked for where no TypeScript loader (tsx) can be found. */
export class TypeScriptLoaderMissingError extends Error {
  override name = "TypeScriptLoaderMissingError";
  constructor(readonly entry: string) {
    super(
      `${entry} is TypeScript, and no TypeScript loader is installed: add tsx (npm i -D tsx) and run under ` +
        "`node --import tsx`, or point at the built .js file",
    );
  }
}

function resolveTsx(entry: string): string {
  try {
    return import.meta.resolve("tsx");
  } catch {
    throw new TypeScriptLoaderMissingError(entry);
  }
}

/**
 * Node flags for a child process (or `fork`'s `execArgv`) that runs `entry`: this process's loader
 * flags, plus `--import tsx` when `entry` is TypeScript and no loader is there yet. Built JavaScript
 * under plain `node` gets no loader at all.
 */
export function childExecArgv(entry: string, execArgv: readonly string[] = process.execArgv): string[] {
  const args = inheritedLoaderArgs(execArgv);
  const hasTsLoader = args.some(
    (a) => a.includes("tsx") || a.includes("strip-types") || a.includes("transform-types"),
  );
  if (isTypeScriptModule(entry) && !hasTsLoader) args.push("--import", resolveTsx(entry));
  return args;
}

/**
 * The module a worker thread starts for `entry`. Worker threads on Node 20 do not inherit the parent's
 * `--import` loader hooks, so when `entry`, or a module the thread will import later (`alsoImports`,
 * e.g. a user's actor class), is TypeScript, the thread starts from a small bootstrap module that
 * registers tsx in the thread and then imports `entry`. The bootstrap's default export calls
 * `entry`'s export `msg.name` with `msg.task`: what a pool that calls exports by name needs. It is a
 * file (written once under the temp directory, named by its content), not a data: URL, because pool
 * libraries load their task module by path.
 */
export function threadEntry(entry: string | URL, alsoImports: readonly string[] = []): URL {
  const url = new URL(entry);
  if (!isTypeScriptModule(url.pathname) && !alsoImports.some((m) => isTypeScriptModule(m))) return url;
  let tsxApi: string;
  try {
    tsxApi = import.meta.resolve("tsx/esm/api");
  } catch {
    throw new TypeScriptLoaderMissingError(fileURLToPath(url));
  }
  const source = [
    `const { register } = await import(${JSON.stringify(tsxApi)});`,
    "register();",
    `const mod = await import(${JSON.stringify(url.href)});`,
    "export default function dispatch(msg) {",
    "  const fn = mod[msg.name];",
    `  if (typeof fn !== "function") throw new TypeError(${JSON.stringify(fileURLToPath(url))} + " has no exported function " + msg.name);`,
    "  return fn(msg.task);",
    "}",
    "",
  ].join("\n");
  const dir = path.join(os.tmpdir(), "torl", "thread-entries");
  const file = path.join(dir, `${createHash("sha256").update(source).digest("hex").slice(0, 20)}.mjs`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    // written aside and renamed, so a thread started by another process never reads half a file
    const aside = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}`;
    writeFileSync(aside, source);
    renameSync(aside, file);
  }
  return pathToFileURL(file);
}
