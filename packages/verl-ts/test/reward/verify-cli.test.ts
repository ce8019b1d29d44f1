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

test("pnpm torl verify: every input line answered in order with its line number; an empty line is an error record, not skipped", (t) => {
  const lines = [
    JSON.stringify({ solution: "so \\boxed{\\frac{1}{2}}", ground_truth: "0.5" }),
    "{not json",
    JSON.stringify({ solution: "no box", ground_truth: "3" }),
    JSON.stringify({ solution: 7, ground_truth: "3" }),
    "",
    "   ",
    JSON.stringify({ solution: "\\boxed{(3,4]}", ground_truth: "[3,4]" }),
  ];
  const r = verify(`${lines.join("\n")}\n`);
  t.is(r.status, 1, r.stderr);
  const out = r.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.is(out.length, lines.length);
  t.deepEqual(
    out.map((o) => o.line),
    [1, 2, 3, 4, 5, 6, 7],
  );
  t.deepEqual(out[0], { line: 1, correct: true, extracted: "\\frac{1}{2}", score: 1 });
  t.regex(out[1].error, /line 2: not valid JSON/);
  t.deepEqual(out[2], { line: 3, correct: false, extracted: null, score: -1 });
  t.regex(out[3].error, /line 4: "solution" must be a string/);
  t.regex(out[4].error, /line 5: empty line/);
  t.regex(out[5].error, /line 6: empty line/);
  t.deepEqual(out[6], { line: 7, correct: false, extracted: "(3,4]", score: -1 });
  t.regex(r.stderr, /line 2: not valid JSON/);
  t.regex(r.stderr, /line 5: empty line/);
  t.regex(r.stderr, /4 line\(s\) of 7 could not be graded/);
});

test("pnpm torl verify accepts a UTF-8 byte order mark and CRLF line ends", (t) => {
  const body = [
    JSON.stringify({ solution: "\\boxed{0.3333333333}", ground_truth: "\\frac13" }),
    JSON.stringify({ solution: "\\boxed{0.333}", ground_truth: "\\frac13" }),
  ].join("\r\n");
  const r = verify(`\uFEFF${body}\r\n`);
  t.is(r.status, 0, r.stderr);
  t.deepEqual(
    r.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l)),
    [
      { line: 1, correct: true, extracted: "0.3333333333", score: 1 },
      { line: 2, correct: false, extracted: "0.333", score: -1 },
    ],
  );
});

test("verify --help says how decimals, fractions and boxes are read", (t) => {
  const r = verify("", ["--help"]);
  t.is(r.status, 0, r.stderr);
  t.regex(r.stdout, /How numbers compare/);
  t.regex(r.stdout, /at least\s+8 significant digits/);
  t.regex(r.stdout, /rounded or truncated/);
  t.regex(r.stdout, /1\.25 = 5\/4; 1\.2 and 1\.3 are not 5\/4/);
  t.regex(r.stdout, /\\boxed named in prose/);
});

test("verify flags: --reward-type picks the reward, unknown values and flags are usage errors", async (t) => {
  const line = JSON.stringify({ solution: "\\boxed{4}", ground_truth: "5" });
  t.deepEqual(JSON.parse(verifyLine(line, { rewardType: "v2.wformat" })), {
    line: 1,
    correct: false,
    extracted: "4",
    score: -0.5,
  });
  await t.throwsAsync(verifyCommand.run(["--reward-type", "nope"]), {
    instanceOf: UsageError,
    message: "--reward-type must be one of default, v2.wformat, accuracy; got 'nope'",
  });
  await t.throwsAsync(verifyCommand.run(["--reward-type=nope"]), {
    instanceOf: UsageError,
    message: "--reward-type must be one of default, v2.wformat, accuracy; got 'nope'",
  });
  await t.throwsAsync(verifyCommand.run(["--reward-type"]), {
    instanceOf: UsageError,
    message: /--reward-type needs a value/,
  });
  await t.throwsAsync(verifyCommand.run(["--execution-penalty=yes"]), {
    instanceOf: UsageError,
    message: "--execution-penalty takes no value",
  });
  await t.throwsAsync(verifyCommand.run(["--bogus"]), {
    instanceOf: UsageError,
    message: "unknown flag --bogus",
  });
});

test("verify reads --flag value and --flag=value the same way", (t) => {
  const line = `${JSON.stringify({ solution: "\\boxed{4}", ground_truth: "5" })}\n`;
  const spaced = verify(line, ["--reward-type", "accuracy"]);
  const joined = verify(line, ["--reward-type=accuracy"]);
  t.is(spaced.status, 0, spaced.stderr);
  t.is(joined.status, 0, joined.stderr);
  t.deepEqual(JSON.parse(joined.stdout), { line: 1, correct: false, extracted: "4", score: 0 });
  t.is(joined.stdout, spaced.stdout);
});
