// docs/writing-an-algorithm.md followed for real: `torl new algorithm` writes the guide's listing into a
// project outside the repository, which imports only the packages' public entry points and trains.
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { UsageError } from "@torl-ts/core";
import test from "ava";
import { SCAFFOLD_PATHS, scaffoldAlgorithm } from "../../src/scaffold/new-algorithm.js";

const run = promisify(execFile);
const REPO = SCAFFOLD_PATHS.checkout!;
const GUIDE = join(REPO, "docs/writing-an-algorithm.md");
const TINY_BASE = join(REPO, "packages/verl-ts/assets/tiny-base");
/**
 * Import specifiers the listing may use: package entry points, never a path into a package or example,
 * and not tfjs itself (tf comes from @torl-ts/verl, so one copy loads).
 */
const PUBLIC = /^(node:[a-z_]+|@torl-ts\/(core|actors|sandbox|verl))$/;

test("the guide's listing is the scaffold's template, and it imports only public entry points", (t) => {
  const guide = readFileSync(GUIDE, "utf8");
  const listing = /<!-- listing: algorithm\.ts -->\n```ts\n([\s\S]*?)```\n/.exec(guide)?.[1];
  t.is(
    listing,
    readFileSync(SCAFFOLD_PATHS.template, "utf8"),
    "docs/writing-an-algorithm.md shows templates/algorithm.ts verbatim",
  );
  const specifiers = [...listing!.matchAll(/^import [^;]*? from "([^"]+)";/gm)].map((m) => m[1]!);
  t.true(specifiers.length >= 3, `the listing's imports were found: ${specifiers.join(", ")}`);
  t.deepEqual(
    specifiers.filter((s) => !PUBLIC.test(s)),
    [],
  );
});

test("the scaffold refuses a non-empty folder and a repository folder that is no workspace package", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-new-"));
  writeFileSync(join(dir, "keep.txt"), "mine");
  t.throws(() => scaffoldAlgorithm(dir), { instanceOf: UsageError, message: /not empty.*--force/ });
  t.throws(() => scaffoldAlgorithm(join(REPO, "examples/x/y")), {
    instanceOf: UsageError,
    message: /not a folder examples\/<name>/,
  });
  const inRepo = join(REPO, "packages/verl-ts/src");
  t.throws(() => scaffoldAlgorithm(inRepo, { force: true }), { instanceOf: UsageError });
});

test("a project outside the repository made by `torl new algorithm` trains: tool calls, identical replicas", async (t) => {
  const dir = join(mkdtempSync(join(tmpdir(), "torl-new-")), "my-algorithm");
  const result = scaffoldAlgorithm(dir);
  t.is(result.kind, "linked");
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  t.false("@tensorflow/tfjs" in pkg.dependencies, "tensorflow comes through @torl-ts/verl alone");
  t.regex(readFileSync(join(dir, "pnpm-workspace.yaml"), "utf8"), /allowBuilds:\n {2}esbuild: true/);
  // What `pnpm install` makes of the package.json: link: entries become symlinks to the checkout's
  // packages; tsx comes from the registry there, from this checkout's installed copy here.
  const installed = { tsx: realpathSync(join(REPO, "node_modules/tsx")) };
  for (const [name, spec] of Object.entries({ ...pkg.dependencies, ...pkg.devDependencies })) {
    const target = spec.startsWith("link:")
      ? spec.slice("link:".length)
      : installed[name as keyof typeof installed];
    t.truthy(target, `no source for ${name}@${spec}`);
    mkdirSync(dirname(join(dir, "node_modules", name)), { recursive: true });
    symlinkSync(target!, join(dir, "node_modules", name), "dir");
  }
  const { stdout, stderr } = await run(
    process.execPath,
    ["--import", "tsx", "algorithm.ts", TINY_BASE, "1"],
    {
      cwd: dir,
      env: { ...process.env, TORL_BACKEND: "wasm" },
      maxBuffer: 16 << 20,
    },
  );
  const lines = stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  t.log(lines.map((l) => JSON.stringify(l)).join("\n"));
  t.notRegex(stderr, /already registered|has already been set/, "one copy of tfjs loads");
  const step = lines.find((l) => l.step === 1)!;
  t.true((step.tool_calls as number) > 0, "the tiny base model called the Python tool");
  t.true(Number.isFinite(step.reward_mean) && Number.isFinite(step.loss));
  const end = lines.at(-1)! as { fingerprint_before: number[]; fingerprints_after: number[][] };
  t.deepEqual(end.fingerprints_after[0], end.fingerprints_after[1], "the replicas hold the same weights");
  t.notDeepEqual(end.fingerprints_after[0], end.fingerprint_before, "the update changed the weights");
});
