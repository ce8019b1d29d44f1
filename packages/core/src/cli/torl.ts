#!/usr/bin/env node
/**
 * The installed `torl` binary: core's cluster commands plus those of every @torl-ts package installed
 * beside it (each exports a registry at `@torl-ts/<package>/cli`). A recipe with commands of its own
 * (train, eval, ...) runs the same dispatcher with its registry added, as examples/torl does.
 */
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { cliCommands as coreCommands } from "./commands.js";
import { type CommandRegistry, runProgram, torlVersion } from "./dispatch.js";

/** Packages that add commands when installed, in the order they appear in `torl --help`. */
const COMMAND_PACKAGES = ["@torl-ts/actors", "@torl-ts/sandbox", "@torl-ts/verl"] as const;

function isNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    code === "MODULE_NOT_FOUND" || code === "ERR_MODULE_NOT_FOUND" || code === "ERR_PACKAGE_PATH_NOT_EXPORTED"
  );
}

/** Where `<pkg>/cli` resolves: from the user's project first, then from beside this package. */
function resolveRegistry(pkg: string): string | undefined {
  for (const from of [join(process.cwd(), "package.json"), fileURLToPath(import.meta.url)]) {
    try {
      return createRequire(from).resolve(`${pkg}/cli`);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
  return undefined;
}

async function installedCommands(): Promise<{ commands: CommandRegistry; missing: string[] }> {
  const commands: Record<string, CommandRegistry[string]> = { ...coreCommands };
  const missing: string[] = [];
  for (const pkg of COMMAND_PACKAGES) {
    const file = resolveRegistry(pkg);
    if (!file) {
      missing.push(pkg);
      continue;
    }
    const mod = (await import(pathToFileURL(file).href)) as { cliCommands?: CommandRegistry };
    if (!mod.cliCommands) throw new Error(`${file} exports no cliCommands`);
    Object.assign(commands, mod.cliCommands);
  }
  return { commands, missing };
}

const { commands, missing } = await installedCommands();
runProgram({
  name: "torl",
  version: torlVersion(),
  commands,
  notes: missing.length ? [`More commands come with: ${missing.join(", ")} (not installed here).`] : [],
});
