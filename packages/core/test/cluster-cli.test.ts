import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const env = { ...process.env, TORL_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), "torl-cli-")) };
const torl = (...args: string[]) =>
  run("node", ["--import=tsx", "examples/torl/src/cli.ts", ...args], { env });

test("start without --head or --address is a usage error", async (t) => {
  const e: any = await t.throwsAsync(torl("start"));
  t.is(e.code, 2);
  t.regex(e.stderr, /give --head or --address/);
});

test("bad flag values are named", async (t) => {
  const e: any = await t.throwsAsync(torl("start", "--head", "--resources", "{oops"));
  t.is(e.code, 2);
  t.regex(e.stderr, /--resources must be JSON/);
});

test("status with no head started here says so; stop with nothing running is fine", async (t) => {
  const e: any = await t.throwsAsync(torl("status"));
  t.is(e.code, 2);
  t.regex(e.stderr, /no head address/);
  const { stdout } = await torl("stop");
  t.regex(stdout, /nothing to stop/);
});
