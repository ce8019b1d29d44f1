/**
 * What `pnpm torl new algorithm DIR` (../cli/new-algorithm.ts) writes: a runnable algorithm skeleton (templates/algorithm.ts, the
 * listing of docs/writing-an-algorithm.md) with a package.json that depends on the torl-ts packages the
 * way the user has them, and nothing else of theirs (tensorflow comes through @torl-ts/verl, so one
 * copy loads):
 * - "workspace": DIR is a new folder examples/<name> of a torl-ts checkout: `workspace:*`;
 * - "linked": DIR is elsewhere and the command runs from a checkout: `link:` paths to its packages
 *   (pnpm, TypeScript sources run with tsx; a pnpm-workspace.yaml allows esbuild's install script);
 * - "installed": the packages are installed in a project (npm): inside that project, the skeleton uses
 *   its packages (no dependency of its own but tsx); elsewhere, the same dependency specs that project's
 *   package.json gives them (tarball paths made relative to DIR). Installed with npm.
 * Nothing is installed: the command prints what to run next.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { programName, UsageError } from "@torl-ts/core";

/** This package's root (src/scaffold/ and dist/scaffold/ are both two levels under it). */
const PACKAGE_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const TEMPLATE = join(PACKAGE_ROOT, "templates/algorithm.ts");
/** The checkout this package lives in (packages/verl-ts of a torl-ts repository), if it does. */
const CHECKOUT = ((): string | undefined => {
  const root = resolve(PACKAGE_ROOT, "../..");
  const inCheckout =
    basename(resolve(PACKAGE_ROOT)) === "verl-ts" &&
    !PACKAGE_ROOT.split(sep).includes("node_modules") &&
    existsSync(join(root, "pnpm-workspace.yaml"));
  return inCheckout ? root : undefined;
})();

/** The packages a skeleton depends on: npm name and folder in a checkout. */
const PACKAGES: [string, string][] = [
  ["@torl-ts/core", "packages/core"],
  ["@torl-ts/actors", "packages/actors"],
  ["@torl-ts/sandbox", "packages/sandbox"],
  ["@torl-ts/verl", "packages/verl-ts"],
];

/** The version of tsx a skeleton runs its TypeScript with (the version this release was tested with). */
const TSX_VERSION = "^4.23.15";

export interface ScaffoldResult {
  dir: string;
  /** Where the skeleton's packages come from (see the module's comment). */
  kind: "workspace" | "linked" | "installed";
  files: string[];
  /** What to run next, one command per line. */
  next: string[];
}

export interface ScaffoldOptions {
  force?: boolean;
  /** Where the command was run (finds the project whose packages an installed skeleton uses). */
  from?: string;
}

/** The nearest package.json at or above `from` that depends on @torl-ts/verl, with its folder. */
function enclosingProject(from: string): { dir: string; deps: Record<string, string> } | undefined {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    const file = join(dir, "package.json");
    if (existsSync(file)) {
      const json = JSON.parse(readFileSync(file, "utf8")) as Record<
        string,
        Record<string, string> | undefined
      >;
      const deps = { ...json.devDependencies, ...json.dependencies };
      if (deps["@torl-ts/verl"]) return { dir, deps };
    }
    if (dirname(dir) === dir) return undefined;
  }
}

/** A dependency spec as seen from `to`: file: paths (tarballs, folders) are rewritten relative to it. */
function respec(spec: string, projectDir: string, to: string): string {
  if (!spec.startsWith("file:")) return spec;
  const path = spec.slice("file:".length);
  const absolute = isAbsolute(path) ? path : resolve(projectDir, path);
  const rel = relative(to, absolute);
  return `file:${rel.startsWith(".") ? rel : `./${rel}`}`;
}

/**
 * The dependencies of an installed skeleton. Inside the project that installed the packages: none of
 * them (Node finds the project's node_modules from a folder inside it, so the skeleton uses the very
 * packages the project has and its install fetches tsx alone). Elsewhere: the four packages (and blas)
 * with the project's own specs, tarball paths made relative to the skeleton.
 */
function installedDependencies(from: string, dir: string): Record<string, string> {
  const project = enclosingProject(from);
  if (!project)
    throw new UsageError(
      `no package.json at or above ${from} depends on @torl-ts/verl: run ${programName()} new algorithm ` +
        "from the project the torl-ts packages are installed in",
    );
  if (!relative(project.dir, dir).startsWith("..")) return {};
  const deps: Record<string, string> = {};
  // blas too where the project lists it: a tarball install needs every package's tarball
  for (const pkg of [...PACKAGES.map(([p]) => p), "@torl-ts/blas"]) {
    const spec = project.deps[pkg];
    if (spec) deps[pkg] = respec(spec, project.dir, dir);
  }
  return deps;
}

/** Writes the skeleton into `target` (created if missing; refused if it holds files, unless `force`). */
export function scaffoldAlgorithm(target: string, options: ScaffoldOptions = {}): ScaffoldResult {
  const dir = resolve(target);
  if (existsSync(dir) && !statSync(dir).isDirectory())
    throw new UsageError(
      `${dir} is a file; give a directory for the new project (a new one, or an empty one)`,
    );
  if (existsSync(dir) && readdirSync(dir).length > 0 && !options.force)
    throw new UsageError(`${dir} exists and is not empty (pass --force to write into it anyway)`);
  const inRepo = CHECKOUT !== undefined && !relative(CHECKOUT, dir).startsWith("..");
  const parts = CHECKOUT ? relative(CHECKOUT, dir).split(sep) : [];
  const workspace = inRepo && parts.length === 2 && parts[0] === "examples";
  if (inRepo && !workspace)
    throw new UsageError(
      `${dir} is inside this repository but not a folder examples/<name>: only packages/* and examples/* are workspace packages`,
    );
  const kind: ScaffoldResult["kind"] = workspace ? "workspace" : CHECKOUT ? "linked" : "installed";
  const name = basename(dir)
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-");
  const dependencies =
    kind === "installed"
      ? installedDependencies(options.from ?? process.cwd(), dir)
      : Object.fromEntries(
          PACKAGES.map(([pkg, folder]) => [
            pkg,
            kind === "workspace" ? "workspace:*" : `link:${join(CHECKOUT!, folder)}`,
          ]),
        );
  const packageJson = {
    name: workspace ? `@torl-ts/example-${name}` : name,
    version: "0.1.0",
    private: true,
    type: "module",
    scripts: { start: "node --import tsx algorithm.ts" },
    dependencies,
    // Inside the repository tsx comes from the root's devDependencies.
    ...(workspace ? {} : { devDependencies: { tsx: TSX_VERSION } }),
  };
  const run = kind === "linked" ? "pnpm" : "npm";
  const next =
    kind === "workspace"
      ? [`cd ${CHECKOUT}`, "pnpm install", `pnpm --dir ${relative(CHECKOUT!, dir)} start <model-dir> [steps]`]
      : [`cd ${dir}`, `${run} install`, `${run} start <model-dir> [steps]`];
  const how = {
    workspace: "`pnpm install` adds this folder to pnpm-lock.yaml: commit the lockfile with the folder.",
    linked: "The torl-ts packages are linked from the checkout and run from TypeScript source (tsx).",
    installed: Object.keys(dependencies).length
      ? "The torl-ts packages are installed here as your project has them; tsx runs the TypeScript."
      : "It uses the torl-ts packages of the project it sits in (keep it inside); tsx runs the TypeScript.",
  }[kind];
  const readme = [
    `# ${name}`,
    "",
    "REINFORCE with a per-prompt moving-average baseline on two policy replicas, the TIR rollout with",
    `the Python tool, and the torl-ts verifier as reward; written by \`${programName()} new algorithm\`.`,
    "See docs/writing-an-algorithm.md in the torl-ts repository for the pieces it uses.",
    "",
    "```sh",
    ...next,
    "```",
    "",
    "`<model-dir>` is an HF-format Qwen2 directory, e.g. the tiny ToRL base model:",
    `\`${programName()} model tiny --out tiny-base\` writes it.`,
    how,
    "",
  ].join("\n");
  const files: Record<string, string> = {
    "package.json": `${JSON.stringify(packageJson, null, 2)}\n`,
    "algorithm.ts": readFileSync(TEMPLATE, "utf8"),
    "README.md": readme,
  };
  // its own workspace root, so pnpm neither climbs to an enclosing workspace nor refuses esbuild's
  // install script (tsx's), which it would otherwise leave unrun and exit 1 on
  if (kind === "linked") files["pnpm-workspace.yaml"] = "allowBuilds:\n  esbuild: true\n";
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return { dir, kind, files: Object.keys(files), next };
}

/** For tests: where the template and the checkout are. */
export const SCAFFOLD_PATHS = { checkout: CHECKOUT, template: TEMPLATE };
