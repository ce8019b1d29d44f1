import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { exitCodeFor, formatCliError, InputError, parseFlags, UsageError } from "../src/index.js";

const run = promisify(execFile);
const stateDir = mkdtempSync(path.join(os.tmpdir(), "torl-cli-"));
const torl = (args: string[], env: Record<string, string> = {}) =>
  run("node", ["--import=tsx", "examples/torl/src/cli.ts", ...args], {
    env: { ...process.env, TORL_STATE_DIR: stateDir, TORL_DEBUG: "", ...env },
    timeout: 120_000,
  });
type Failure = { code: number; stdout: string; stderr: string };
const fails = async (
  t: { throwsAsync: (p: Promise<unknown>) => Promise<unknown> },
  args: string[],
  env = {},
) => (await t.throwsAsync(torl(args, env))) as Failure;
const STACK_LINE = /^\s+at /m;

test("pnpm torl --help gives a one-line description of each command", async (t) => {
  const { stdout } = await torl(["--help"]);
  for (const [name, words] of [
    ["bench actors", /Ray's figures/],
    ["sandbox", /SandboxFusion/],
    ["eval", /accuracy per data_source/],
    ["data tiny", /parquet/],
    ["report", /report\.html/],
  ] as const)
    t.regex(stdout, new RegExp(`^  ${name} +[^\\n]*${words.source}`, "m"), name);
  t.regex(stdout, /--verbose \(or TORL_DEBUG=1\)/);
});

test("pnpm torl --version prints the version in package.json", async (t) => {
  const { version } = JSON.parse(readFileSync("package.json", "utf8")) as { version: string };
  t.regex(version, /^\d+\.\d+\.\d+/);
  t.is((await torl(["--version"])).stdout.trim(), version);
});

test("bench --help lists the benchmarks; bench with an unknown one is one error line, exit 2", async (t) => {
  const { stdout } = await torl(["bench", "--help"]);
  t.regex(
    stdout,
    /^usage: pnpm torl bench <actors\|collectives\|pool\|sandbox\|reward\|model\|rollout\|memory\|scale\|peer>/,
  );
  t.regex(stdout, /^ {2}bench model +benchmark the tfjs Qwen2 model/m);
  const e = await fails(t, ["bench", "frobnicate"]);
  t.is(e.code, 2);
  t.is(e.stderr.trim().split("\n").length, 1);
  t.regex(e.stderr, /^error: unknown bench command 'frobnicate'; one of: actors, collectives/);
});

test("an unknown command exits 2 with one error line naming it", async (t) => {
  const e = await fails(t, ["frobnicate"]);
  t.is(e.code, 2);
  t.is(e.stderr.trim(), "error: unknown command 'frobnicate' (see pnpm torl --help)");
});

test("a bad flag is one error line naming the flag, exit 2, both spellings of a value alike", async (t) => {
  for (const args of [
    ["report", "--samples", "x", "some-dir"],
    ["report", "--samples=x", "some-dir"],
  ]) {
    const e = await fails(t, args);
    t.is(e.code, 2);
    t.is(e.stderr.trim(), "error: --samples must be an integer >= 0, got 'x' (see pnpm torl report --help)");
  }
});

test("eval and report on a missing file: one error line naming the file, exit 2, no stack", async (t) => {
  const e = await fails(t, [
    "eval",
    "--model",
    "packages/verl-ts/assets/tiny-base",
    "--data",
    "/nonexistent/x.parquet",
  ]);
  t.is(e.code, 2, e.stderr);
  t.regex(e.stderr, /^error: \/nonexistent\/x\.parquet: cannot read file/);
  t.notRegex(e.stderr, STACK_LINE);
  const r = await fails(t, ["report", "/nonexistent/run"]);
  t.is(r.code, 2);
  t.is(r.stderr.trim().split("\n").length, 1, r.stderr);
  t.regex(r.stderr, /^error: \/nonexistent\/run\/metrics\.jsonl: not found/);
});

test("--verbose or TORL_DEBUG=1 adds the stack trace to the error line", async (t) => {
  const verbose = await fails(t, ["report", "/nonexistent/run", "--verbose"]);
  t.is(verbose.code, 2);
  t.regex(verbose.stderr, /^error: \/nonexistent\/run\/metrics\.jsonl: not found/);
  t.regex(verbose.stderr, STACK_LINE);
  const debug = await fails(t, ["report", "/nonexistent/run"], { TORL_DEBUG: "1" });
  t.regex(debug.stderr, STACK_LINE);
});

test("a runtime failure is one error line with exit 1 (status against a head that is not there)", async (t) => {
  const e = await fails(t, ["status", "--address", "127.0.0.1:9"]);
  t.is(e.code, 1);
  t.regex(e.stderr.trim(), /^error: cannot reach the head at 127\.0\.0\.1:9: [^\n]+$/);
});

test("start on a port in use: exit 2 with 'port P is in use', no stack, in the background and with --block", async (t) => {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.teardown(() => server.close());
  const port = (server.address() as { port: number }).port;
  for (const extra of [[], ["--block"]]) {
    const e = await fails(t, ["start", "--head", "--host", "127.0.0.1", "--port", String(port), ...extra]);
    t.is(e.code, 2, e.stderr);
    t.regex(e.stderr, new RegExp(`^error: port ${port} is in use on 127\\.0\\.0\\.1`));
    t.is(e.stderr.trim().split("\n").length, 1, e.stderr);
  }
});

test("parseFlags: --flag value and --flag=value alike, negative numbers as values, errors name the flag", (t) => {
  const spec = {
    n: { type: "integer", min: -10 },
    name: { type: "string", choices: ["a", "b"] },
    sizes: { type: "integers", min: 1 },
    json: { type: "boolean" },
  } as const;
  const a = parseFlags(["--n", "-3", "--name", "a", "--sizes", "1,2", "--json"], spec).flags;
  const b = parseFlags(["--n=-3", "--name=a", "--sizes=1,2", "--json"], spec).flags;
  t.deepEqual(a, { n: -3, name: "a", sizes: [1, 2], json: true });
  t.deepEqual(b, a);
  t.throws(() => parseFlags(["--nn", "1"], spec), { instanceOf: UsageError, message: "unknown flag --nn" });
  t.throws(() => parseFlags(["--n"], spec), { message: /^--n needs a value/ });
  t.throws(() => parseFlags(["--name", "c"], spec), { message: "--name must be one of a, b; got 'c'" });
  t.throws(() => parseFlags(["--sizes", "1,0"], spec), {
    message: "--sizes must be an integer >= 1, got '0'",
  });
  t.throws(() => parseFlags(["--json=yes"], spec), { message: "--json takes no value" });
  t.throws(() => parseFlags(["stray"], spec), { message: "unexpected argument 'stray'" });
  t.deepEqual(parseFlags(["a=1", "--n", "2", "b=2"], spec, { positionals: true }).positionals, [
    "a=1",
    "b=2",
  ]);
});

test("exit codes: 2 for bad input (InputError and its kinds), 1 for anything else", (t) => {
  class ConfigKeyError extends InputError {}
  t.is(exitCodeFor(new UsageError("x")), 2);
  t.is(exitCodeFor(new ConfigKeyError("x")), 2);
  t.is(exitCodeFor(new Error("x")), 1);
  t.is(exitCodeFor("a string"), 1);
  t.is(formatCliError(new Error("boom"), false), "error: boom");
  t.regex(formatCliError(new Error("boom", { cause: new Error("root") }), true), /caused by:\nError: root/);
});
