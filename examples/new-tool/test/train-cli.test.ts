import { execFile } from "node:child_process";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const script = (file: string, ...args: string[]) =>
  run("node", ["--import=tsx", file, ...args], { env: { ...process.env, TORL_DEBUG: "" }, timeout: 120_000 });
type Failure = Error & { code: number; stderr: string };

test("the example scripts fail like pnpm torl: one error line naming the file or flag, exit 2, no stack", async (t) => {
  const missing = (await t.throwsAsync(
    script("examples/new-tool/src/train.ts", "configs/calculator.yaml", "trainer.total_training_steps=1"),
  )) as Failure;
  t.is(missing.code, 2);
  t.is(
    missing.stderr.trim().split("\n")[0],
    `error: config file not found: configs/calculator.yaml (resolved to ${process.cwd()}/configs/calculator.yaml) (see pnpm tsx examples/new-tool/src/train.ts --help)`,
  );
  t.is(missing.stderr.trim().split("\n").length, 1);
  const flag = (await t.throwsAsync(
    script("examples/custom-algorithm/src/rloo.ts", "--stepz", "5"),
  )) as Failure;
  t.is(flag.code, 2);
  t.is(
    flag.stderr.trim(),
    "error: unknown flag --stepz (see pnpm tsx examples/custom-algorithm/src/rloo.ts --help)",
  );
});
