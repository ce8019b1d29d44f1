// The one command that installs what the addon's build needs (where it can) and builds it: the
// repository's `pnpm setup:native`, or this package's script by path where it is installed as a
// dependency. (src/index.ts names the same command for the loader's reasons.)
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

/** `root`: this package's directory. */
export function setupCommand(root) {
  const workspace = resolve(root, "..", "..");
  if (existsSync(join(workspace, "pnpm-workspace.yaml")) && root === join(workspace, "packages", "blas"))
    return "pnpm setup:native";
  return `node ${join(root, "scripts", "setup-native.mjs")}`;
}
