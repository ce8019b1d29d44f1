/**
 * Dependencies point one way (core -> actors -> sandbox -> verl -> examples): a package's sources import
 * only the packages below it. Tools sit with the rollout in @torl-ts/verl, so a tool written in
 * TypeScript alone (the calculator example) needs nothing from the sandbox.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** What each package's src/ may import of the workspace's packages. */
const ALLOWED: Record<string, string[]> = {
  "packages/core": [],
  "packages/blas": [],
  "packages/actors": ["@torl-ts/core"],
  "packages/sandbox": ["@torl-ts/core", "@torl-ts/actors"],
  "packages/verl-ts": ["@torl-ts/core", "@torl-ts/actors", "@torl-ts/sandbox", "@torl-ts/blas"],
};

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.(ts|mjs|js)$/.test(e.name))
    .map((e) => join(e.parentPath, e.name));
}

/** The workspace packages a file imports (static and dynamic imports, by package name). */
function workspaceImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const found = new Set<string>();
  for (const m of text.matchAll(/(?:from|import\()\s*["'](@torl-ts\/[a-z-]+)/g)) found.add(m[1]!);
  return [...found];
}

for (const [pkg, allowed] of Object.entries(ALLOWED))
  test(`${pkg} imports no package above it`, (t) => {
    const own = JSON.parse(readFileSync(join(ROOT, pkg, "package.json"), "utf8")).name as string;
    const wrong = sources(join(ROOT, pkg, "src")).flatMap((file) =>
      workspaceImports(file)
        .filter((name) => name !== own && !allowed.includes(name))
        .map((name) => `${file.slice(ROOT.length)} imports ${name}`),
    );
    t.deepEqual(wrong, []);
  });

/**
 * Inside @torl-ts/verl: the folders a folder's sources must not import, the layers above it. The
 * config is read by everything and owns every check of it, so it imports nothing of the trainer or
 * of the workers that run it.
 */
const VERL_SRC = "packages/verl-ts/src";
const FORBIDDEN_FOLDERS: Record<string, string[]> = {
  config: ["trainer", "workers", "single-controller"],
};

/** The files a file imports by relative path (static and dynamic imports, re-exports), resolved. */
function relativeImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/(?:from|import\()\s*["'](\.\.?\/[^"']+)["']/g)].map((m) =>
    resolve(dirname(file), m[1]!),
  );
}

/** The folders of packages/verl-ts/src a file imports by relative path. */
function verlFolderImports(file: string): string[] {
  const found = new Set<string>();
  for (const target of relativeImports(file)) {
    const path = relative(join(ROOT, VERL_SRC), target);
    if (!path.startsWith("..")) found.add(path.split(/[\\/]/)[0]!);
  }
  return [...found];
}

for (const [folder, forbidden] of Object.entries(FORBIDDEN_FOLDERS))
  test(`${VERL_SRC}/${folder} imports none of ${forbidden.join(", ")}`, (t) => {
    const wrong = sources(join(ROOT, VERL_SRC, folder)).flatMap((file) =>
      verlFolderImports(file)
        .filter((f) => forbidden.includes(f))
        .map((f) => `${file.slice(ROOT.length)} imports ${VERL_SRC}/${f}`),
    );
    t.deepEqual(wrong, []);
  });

/** Process entries (run as a child's main module, never imported): they may load the whole package. */
const PROCESS_ENTRIES = ["packages/core/src/runtime/worker-main.ts"];

test("no source imports its own package's entry (src/index.ts), so no import runs in a circle through it", (t) => {
  const wrong = Object.keys(ALLOWED).flatMap((pkg) => {
    const entry = join(ROOT, pkg, "src", "index");
    const modules = sources(join(ROOT, pkg, "src")).filter(
      (file) => !PROCESS_ENTRIES.includes(relative(ROOT, file)),
    );
    return modules.flatMap((file) =>
      relativeImports(file)
        .filter((target) => target.replace(/\.(ts|js|mjs)$/, "") === entry)
        .map(() => `${file.slice(ROOT.length)} imports ${pkg}/src/index`),
    );
  });
  t.deepEqual(wrong, []);
});

/** The files a file loads when it is loaded: static imports and re-exports by relative path, not type-only. */
function staticImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?from\s*["'](\.\.?\/[^"']+)["']/gms)].map(
    (m) => resolve(dirname(file), m[1]!).replace(/\.js$/, ".ts"),
  );
}

test("no package's modules import each other in a circle (a module sees the other half-loaded)", (t) => {
  const circles: string[] = [];
  for (const pkg of Object.keys(ALLOWED)) {
    const files = sources(join(ROOT, pkg, "src"));
    const graph = new Map(files.map((f) => [f, staticImports(f).filter((d) => files.includes(d))]));
    const state = new Map<string, "open" | "done">();
    const path: string[] = [];
    const visit = (file: string): void => {
      state.set(file, "open");
      path.push(file);
      for (const next of graph.get(file)!) {
        if (state.get(next) === "open")
          circles.push([...path.slice(path.indexOf(next)), next].map((f) => relative(ROOT, f)).join(" -> "));
        else if (!state.has(next)) visit(next);
      }
      path.pop();
      state.set(file, "done");
    };
    for (const file of files) if (!state.has(file)) visit(file);
  }
  t.deepEqual(circles, []);
});

test("the calculator tool is written against @torl-ts/verl alone, with nothing from the sandbox", (t) => {
  const file = join(ROOT, "examples/new-tool/src/calculator.ts");
  t.deepEqual(workspaceImports(file), ["@torl-ts/verl"]);
  const manifest = JSON.parse(readFileSync(join(ROOT, "examples/new-tool/package.json"), "utf8"));
  t.false("@torl-ts/sandbox" in manifest.dependencies, "examples/new-tool does not depend on the sandbox");
});

/**
 * The head's parts hold its state and rules and work without a socket (their unit tests drive them
 * directly): head.ts alone holds the socket and hands messages to them, so no part imports head.ts
 * or the socket links.
 */
const HEAD_PARTS = [
  "node-table",
  "clients",
  "actor-directory",
  "scheduler",
  "placement-groups",
  "status",
  "outbox",
  "log-router",
];

test("the head's parts import neither head.ts nor the socket links", (t) => {
  const cluster = join(ROOT, "packages/core/src/cluster");
  const forbidden = [join(cluster, "head.js"), join(ROOT, "packages/core/src/wire/links.js")];
  const wrong = HEAD_PARTS.flatMap((part) =>
    relativeImports(join(cluster, `${part}.ts`))
      .filter((target) => forbidden.includes(target))
      .map((target) => `cluster/${part}.ts imports ${relative(join(ROOT, "packages/core/src"), target)}`),
  );
  t.deepEqual(wrong, []);
});

/**
 * Commands (src/cli/) and benchmarks (src/bench/) are the top of each package: what they run lives in
 * its concept's folder, and only other commands and benchmarks, and the package's entries (the files
 * package.json exports, which re-export the public commands), import them.
 */
const TOP_FOLDERS = ["cli", "bench"];
const TOP_IMPORT_EXCEPTIONS: Record<string, string> = {
  "packages/core/src/cluster/key-file.ts":
    "the cluster's key file is kept in the state directory of cli/state.ts",
};

test("only commands, benchmarks and the package's entries import src/cli/ and src/bench/", (t) => {
  const wrong = Object.keys(ALLOWED).flatMap((pkg) => {
    const src = join(ROOT, pkg, "src");
    const exported = JSON.parse(readFileSync(join(ROOT, pkg, "package.json"), "utf8")).exports as Record<
      string,
      string
    >;
    const entries = new Set(Object.values(exported).map((path) => resolve(ROOT, pkg, path)));
    const top = (file: string) => TOP_FOLDERS.includes(relative(src, file).split(/[\\/]/)[0]!);
    return sources(src)
      .filter((file) => !top(file) && !entries.has(file) && !TOP_IMPORT_EXCEPTIONS[relative(ROOT, file)])
      .flatMap((file) =>
        relativeImports(file)
          .filter((target) => top(target))
          .map((target) => `${relative(ROOT, file)} imports ${relative(ROOT, target)}`),
      );
  });
  t.deepEqual(wrong, []);
  t.true(
    sources(join(ROOT, "packages/verl-ts/src/bench")).length >= 5 &&
      sources(join(ROOT, "packages/verl-ts/src/cli")).length >= 10,
    "the rule sees the folders",
  );
});
