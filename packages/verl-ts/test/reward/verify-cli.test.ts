import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { UsageError } from "@torl-ts/core";
import { verifyCommand, verifyLine } from "@torl-ts/verl";
import test from "ava";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const CLI = fileURLToPath(new URL("../../../../examples/torl/src/cli.ts", import.meta.url));

function verify(input: string, args: string[] = []) {
  return spawnSync(process.execPath, ["--import", "tsx", CLI, "verify", ...args], {
    cwd: ROOT,
    input,
    encoding: "utf8",
  });
}

test("pnpm torl verify: one JSON line per input line, in order; a malformed line is named and nothing else lost", (t) => {
  const lines = [
    JSON.stringify({ solution: "so \\boxed{\\frac{1}{2}}", ground_truth: "0.5" }),
    "{not json",
    JSON.stringify({ solution: "no box", ground_truth: "3" }),
    JSON.stringify({ solution: 7, ground_truth: "3" }),
    "",
    JSON.stringify({ solution: "\\boxed{(3,4]}", ground_truth: "[3,4]" }),
  ];
  const r = verify(`${lines.join("\n")}\n`);
  t.is(r.status, 1, r.stderr);
  const out = r.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.deepEqual(out[0], { correct: true, extracted: "\\frac{1}{2}", score: 1 });
  t.is(out[1].line, 2);
  t.regex(out[1].error, /line 2: not valid JSON/);
  t.deepEqual(out[2], { correct: false, extracted: null, score: -1 });
  t.regex(out[3].error, /line 4: "solution" must be a string/);
  t.deepEqual(out[4], { correct: false, extracted: "(3,4]", score: -1 });
  t.is(out.length, 5);
  t.regex(r.stderr, /line 2: not valid JSON/);
  t.regex(r.stderr, /2 malformed line\(s\)/);
});

test("verify flags: --reward-type picks the reward, unknown values and flags are usage errors", async (t) => {
  const line = JSON.stringify({ solution: "\\boxed{4}", ground_truth: "5" });
  t.deepEqual(JSON.parse(verifyLine(line, { rewardType: "v2.wformat" })), {
    correct: false,
    extracted: "4",
    score: -0.5,
  });
  await t.throwsAsync(verifyCommand.run(["--reward-type", "nope"]), {
    instanceOf: UsageError,
    message: /unknown reward type 'nope'/,
  });
  await t.throwsAsync(verifyCommand.run(["--bogus"]), { instanceOf: UsageError, message: /unknown option/ });
});
