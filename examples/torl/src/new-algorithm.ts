/**
 * `pnpm torl new algorithm DIR`: writes a runnable algorithm skeleton (templates/algorithm.ts, the
 * listing of docs/writing-an-algorithm.md) with a package.json that depends on this checkout's
 * packages: `workspace:*` for a new folder `examples/<name>` of this repository, `link:` paths for a
 * project anywhere else. Nothing is installed: the command prints what to run next.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { type CliCommand, parseFlags, UsageError } from "@torl-ts/core";

const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const TEMPLATE = fileURLToPath(new URL("./templates/algorithm.ts", import.meta.url));

/** The packages a skeleton depends on: npm name and folder in this repository. */
const PACKAGES: [string, string][] = [
  ["@torl-ts/core", "packages/core"],
  ["@torl-ts/actors", "packages/actors"],
  ["@torl-ts/sandbox", "packages/sandbox"],
  ["@torl-ts/verl", "packages/verl-ts"],
];

export interface ScaffoldResult {
  dir: string;
  /** "workspace": a new examples/<name> folder of this repository; "linked": a project elsewhere. */
  kind: "workspace" | "linked";
  files: string[];
  /** What to run next, one command per line. */
  next: string[];
}

/** A version range this checkout uses, read from its package.json files (so skeletons stay in step). */
function versionOf(pkg: string, from: string, field: "dependencies" | "devDependencies"): string {
  const json = JSON.parse(readFileSync(join(REPO_ROOT, from, "package.json"), "utf8")) as Record<
    string,
    Record<string, string> | undefined
  >;
  const version = json[field]?.[pkg];
  if (!version) throw new Error(`${from}/package.json has no ${field} entry for ${pkg}`);
  return version;
}

/** Writes the skeleton into `target` (created if missing; refused if it holds files, unless `force`). */
export function scaffoldAlgorithm(target: string, options: { force?: boolean } = {}): ScaffoldResult {
  const dir = resolve(target);
  if (existsSync(dir) && !statSync(dir).isDirectory())
    throw new UsageError(
      `${dir} is a file; give a directory for the new project (a new one, or an empty one)`,
    );
  if (existsSync(dir) && readdirSync(dir).length > 0 && !options.force)
    throw new UsageError(`${dir} exists and is not empty (pass --force to write into it anyway)`);
  const inRepo = !relative(REPO_ROOT, dir).startsWith("..");
  const parts = relative(REPO_ROOT, dir).split(sep);
  const workspace = inRepo && parts.length === 2 && parts[0] === "examples";
  if (inRepo && !workspace)
    throw new UsageError(
      `${dir} is inside this repository but not a folder examples/<name>: only packages/* and examples/* are workspace packages`,
    );
  const name = basename(dir)
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-");
  const tfjs = ["@tensorflow/tfjs", versionOf("@tensorflow/tfjs", "packages/verl-ts", "dependencies")];
  const dependencies = Object.fromEntries([
    tfjs,
    ...PACKAGES.map(([pkg, folder]) => [pkg, workspace ? "workspace:*" : `link:${join(REPO_ROOT, folder)}`]),
  ]);
  const packageJson = {
    name: workspace ? `@torl-ts/example-${name}` : name,
    version: "0.1.0",
    private: true,
    type: "module",
    scripts: { start: "node --import tsx algorithm.ts" },
    dependencies,
    // Inside the repository tsx comes from the root's devDependencies.
    ...(workspace ? {} : { devDependencies: { tsx: versionOf("tsx", ".", "devDependencies") } }),
  };
  const next = workspace
    ? [`cd ${REPO_ROOT}`, "pnpm install", `pnpm --dir ${relative(REPO_ROOT, dir)} start <model-dir> [steps]`]
    : [`cd ${dir}`, "pnpm install", "pnpm start <model-dir> [steps]"];
  const readme = [
    `# ${name}`,
    "",
    "REINFORCE with a per-prompt moving-average baseline on two policy replicas, the TIR rollout with",
    "the Python tool, and the torl-ts verifier as reward; written by `pnpm torl new algorithm`.",
    "See docs/writing-an-algorithm.md in the torl-ts repository for the pieces it uses.",
    "",
    "```sh",
    ...next,
    "```",
    "",
    "`<model-dir>` is an HF-format Qwen2 directory, e.g. the tiny ToRL base model at",
    `\`${join(REPO_ROOT, "examples/torl/assets/tiny-base")}\`.`,
    workspace
      ? "`pnpm install` adds this folder to pnpm-lock.yaml: commit the lockfile with the folder."
      : "The torl-ts packages are linked from the checkout and run from TypeScript source (tsx).",
    "",
  ].join("\n");
  mkdirSync(dir, { recursive: true });
  const files = {
    "package.json": `${JSON.stringify(packageJson, null, 2)}\n`,
    "algorithm.ts": readFileSync(TEMPLATE, "utf8"),
    "README.md": readme,
  };
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return { dir, kind: workspace ? "workspace" : "linked", files: Object.keys(files), next };
}

export const newAlgorithmCommand: CliCommand = {
  summary: "write a runnable algorithm skeleton (REINFORCE, Python tool, verifier) into DIR",
  usage: `usage: pnpm torl new algorithm DIR [--force]

Writes DIR/algorithm.ts (REINFORCE with a per-prompt baseline on two replicas, the TIR rollout with the
Python tool, the verifier as reward), DIR/package.json and DIR/README.md. DIR is relative to the
directory pnpm was started in.
  DIR = examples/<name> of this repository: a workspace package (workspace:* dependencies); then run
        pnpm install at the repository root, which records it in pnpm-lock.yaml.
  DIR anywhere else: a project that links this checkout's packages (link: paths); then pnpm install there.
  --force   write into a DIR that already holds files`,
  async run(args) {
    const { flags, positionals: rest } = parseFlags(
      args,
      { force: { type: "boolean" } },
      { positionals: true },
    );
    if (rest.length !== 1)
      throw new UsageError(`expected one directory, got: ${rest.join(" ") || "nothing"}`);
    const base = process.env.INIT_CWD ?? process.cwd();
    const result = scaffoldAlgorithm(resolve(base, rest[0]!), { force: !!flags.force });
    console.log(`wrote ${result.files.join(", ")} to ${result.dir} (${result.kind}); next:`);
    for (const line of result.next) console.log(`  ${line}`);
    return 0;
  },
};

/** For tests: where the template and the repository are. */
export const SCAFFOLD_PATHS = { repoRoot: REPO_ROOT, template: TEMPLATE };
