// The scaffold's `npm start <model-dir> [steps]`: steps must be a positive integer, else a usage error
// (exit 2) before anything starts; "abc", "0", "-1" used to run no step and exit 0, "1.5" to fail later.
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import { SCAFFOLD_PATHS, scaffoldAlgorithm } from "../../src/scaffold/new-algorithm.js";

const REPO = SCAFFOLD_PATHS.checkout!;

test("a project made by `torl new algorithm` refuses steps that are not a positive integer", async (t) => {
  const dir = join(mkdtempSync(join(tmpdir(), "torl-new-steps-")), "my-algorithm");
  scaffoldAlgorithm(dir);
  for (const [name, target] of [
    ["@torl-ts/verl", join(REPO, "packages/verl-ts")],
    ["@torl-ts/actors", join(REPO, "packages/actors")],
    ["@torl-ts/core", join(REPO, "packages/core")],
    ["tsx", realpathSync(join(REPO, "node_modules/tsx"))],
  ] as const) {
    mkdirSync(dirname(join(dir, "node_modules", name)), { recursive: true });
    symlinkSync(target, join(dir, "node_modules", name), "dir");
  }
  const start = (steps: string) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ["--import", "tsx", "algorithm.ts", "/no/such/model", steps],
        { cwd: dir, timeout: 120_000 },
        (_error, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
      );
    });
  for (const steps of ["abc", "0", "-1", "1.5", ""]) {
    const { code, stderr } = await start(steps);
    t.is(code, 2, `steps ${JSON.stringify(steps)}: ${stderr}`);
    t.regex(
      stderr,
      new RegExp(
        `steps must be a positive integer, got ${JSON.stringify(JSON.stringify(steps)).slice(1, -1)}`,
      ),
    );
    t.regex(stderr, /usage: node --import tsx algorithm\.ts <model-dir> \[steps\]/);
  }
});
