/**
 * Bad input at the command line, as a user meets it: every case exits 2 with one `error:` line in the
 * user's terms that names the path, flag or variable at fault (no raw errno message, nothing printed
 * twice), and an empty input says what was empty instead of printing nothing.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describeSystemError, formatCliError } from "@torl-ts/core";
import test from "ava";
import { expectBadInput, type Ran, type RunOptions, runTorl } from "./cli-runner.js";

const work = mkdtempSync(join(tmpdir(), "torl-cli-edges-"));
const stateDir = join(work, "state");
test.after.always(() => rmSync(work, { recursive: true, force: true }));

/** `pnpm torl ARGS` with `input` on stdin (closed at once when absent), this test's state directory. */
function torl(args: string[], options: RunOptions = {}): Promise<Ran> {
  return runTorl(args, {
    ...options,
    env: { TORL_STATE_DIR: stateDir, ...options.env },
    timeoutMs: 120_000,
  });
}

/** Exit 2 and exactly one line on stderr, `error: ...`, matching `message`. */
function badInput(t: import("ava").ExecutionContext, args: string[], message: RegExp, input?: string) {
  return expectBadInput(t, () => torl(args, { input }), message);
}

test("export of a missing path, a folder that is no checkpoint, or a file: exit 2 naming the path", async (t) => {
  const notCheckpoint = join(work, "not-a-checkpoint");
  mkdirSync(notCheckpoint);
  const file = join(work, "a-file");
  writeFileSync(file, "x");
  const out = join(work, "export-out");
  await badInput(t, ["export", join(work, "missing"), "--out", out], /checkpoint \S+missing does not exist/);
  await badInput(t, ["export", notCheckpoint, "--out", out], /not-a-checkpoint is not a checkpoint/);
  await badInput(
    t,
    ["export", file, "--out", out],
    /checkpoint \S+a-file is a file; give the checkpoint's directory/,
  );
});

test("status and start check --address alike (exit 2); so does status for TORL_ADDRESS", async (t) => {
  const message = "--address must be HOST:PORT (a port in [1, 65535]), got 'garbage'";
  const status = await badInput(t, ["status", "--address", "garbage"], /HOST:PORT/);
  const start = await badInput(t, ["start", "--address", "garbage"], /HOST:PORT/);
  t.true(
    status.stderr.includes(message) && start.stderr.includes(message),
    `${status.stderr}${start.stderr}`,
  );
  const r = await torl(["status"], { env: { TORL_ADDRESS: "h:0" } });
  t.is(r.code, 2);
  t.regex(r.stderr, /^error: TORL_ADDRESS must be HOST:PORT \(a port in \[1, 65535\]\), got 'h:0'/);
});

test("verify with nothing on stdin says so (exit 2) instead of printing nothing", async (t) => {
  const r = await badInput(t, ["verify"], /stdin was empty: nothing to grade/, "");
  t.is(r.stdout, "");
});

test("report of a run whose metrics.jsonl is empty: exit 2 naming the file", async (t) => {
  const run = join(work, "empty-run");
  mkdirSync(run);
  writeFileSync(join(run, "metrics.jsonl"), "\n");
  await badInput(t, ["report", run], /empty-run\/metrics\.jsonl: is empty: the run recorded no step/);
});

test.serial(
  "status against a keyed head: the refusal once, naming the key file the head was started with",
  async (t) => {
    const keys = join(work, "my-keys.json");
    const start = await torl(["start", "--head", "--secure", "--port", "0", "--keys", keys]);
    t.is(start.code, 0, start.stderr);
    t.teardown(async () => {
      await torl(["stop", "--force"]);
    });
    const address = /head started at (\S+)/.exec(start.stdout)![1]!;
    const r = await torl(["status"]);
    t.is(r.code, 1, r.stderr);
    t.is(r.stderr.trim().split("\n").length, 1, r.stderr);
    t.is(r.stderr.split("requires CURVE keys").length, 2, "the refusal is printed once");
    t.true(
      r.stderr.includes(`the head was started here with its keys in ${keys}: add --keys ${keys}`),
      r.stderr,
    );
    // from elsewhere (no record of the head): both places the keys may be
    const other = await torl(["status", "--address", address], {
      env: { TORL_STATE_DIR: join(work, "other-state") },
    });
    t.is(other.code, 1);
    t.regex(
      other.stderr,
      /give the key file the head was started with \(--keys PATH or TORL_CLUSTER_KEYS=PATH; a head started without --keys keeps it in cluster-keys\.json in its state directory/,
    );
    const ok = await torl(["status", "--keys", keys]);
    t.is(ok.code, 0, ok.stderr);
  },
);

test("new algorithm and data tiny on a path that is a file: exit 2 in the user's terms, no errno", async (t) => {
  const file = join(work, "taken");
  writeFileSync(file, "x");
  const scaffold = await badInput(
    t,
    ["new", "algorithm", file],
    /taken is a file; give a directory for the new project/,
  );
  const data = await badInput(
    t,
    ["data", "tiny", "--out", file],
    /--out \S+taken is a file; give a directory/,
  );
  for (const r of [scaffold, data]) t.notRegex(r.stderr, /ENOTDIR|EEXIST|scandir|mkdir/);
  // below a file: the error printer words Node's file-system errors, naming the path (a runtime failure)
  const below = await torl(["data", "tiny", "--out", join(file, "sub")]);
  t.is(below.code, 1);
  t.is(
    below.stderr.trim(),
    `error: cannot create the directory ${join(file, "sub")}: it, or a folder on its path, is a file, not a directory (ENOTDIR)`,
  );
});

test("an unknown flag is named as such after a positional too (new algorithm, export)", async (t) => {
  await badInput(
    t,
    ["new", "algorithm", join(work, "scaffold"), "--bogus"],
    /^error: unknown flag --bogus \(/,
  );
  await badInput(
    t,
    ["export", join(work, "ckpt"), "--out", join(work, "o"), "--bogus"],
    /^error: unknown flag --bogus \(/,
  );
  // export takes --flag=value like every command
  await badInput(
    t,
    ["export", join(work, "ckpt"), `--out=${join(work, "o")}`, "--dtype=int8"],
    /--dtype must be one of bf16, fp16, fp32; got 'int8'/,
  );
});

test("Node's file-system errors in the user's words, naming the path", (t) => {
  const error = (code: string, syscall: string, path: string) =>
    Object.assign(new Error(`${code}: raw`), { code, syscall, path });
  t.is(
    describeSystemError(error("ENOTDIR", "scandir", "/a/f")),
    "cannot read the directory /a/f: it, or a folder on its path, is a file, not a directory (ENOTDIR)",
  );
  t.is(
    describeSystemError(error("EEXIST", "mkdir", "/a/f")),
    "cannot create the directory /a/f: a file of that name is in the way (EEXIST)",
  );
  t.is(
    describeSystemError(error("EACCES", "open", "/etc/x")),
    "cannot open /etc/x: permission denied (EACCES)",
  );
  t.is(describeSystemError(new Error("plain")), undefined);
  t.is(describeSystemError(Object.assign(new Error("x"), { code: "ECONNREFUSED" })), undefined);
  t.regex(
    formatCliError(error("ENOENT", "open", "/nope"), false),
    /^error: cannot open \/nope: it does not exist \(ENOENT\)$/,
  );
});
