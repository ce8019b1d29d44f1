import { execFile } from "node:child_process";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);

test("pnpm torl --help lists the commands", async (t) => {
  const { stdout } = await run("node", ["--import=tsx", "examples/torl/src/cli.ts", "--help"]);
  t.regex(stdout, /bench actors/);
  t.regex(stdout, /sandbox/);
});

test("an unknown command exits 2 with a message naming it", async (t) => {
  const error = await t.throwsAsync(run("node", ["--import=tsx", "examples/torl/src/cli.ts", "frobnicate"]));
  t.is((error as any).code, 2);
  t.regex((error as any).stderr, /unknown command 'frobnicate'/);
});
