/**
 * The command-line contracts others rely on: every documented command is there with --help text that
 * starts with how it is invoked (`pnpm torl <command>`), every benchmark takes --json, and the commands
 * whose output is a contract name it in their help.
 */
import test from "ava";
import { commands } from "../src/command-registry.js";

/** The commands the repository's `pnpm torl` must have (the documented contract). */
const CONTRACT = [
  "start",
  "status",
  "stop",
  "sandbox",
  "verify",
  "train",
  "sft",
  "eval",
  "export",
  "data tiny",
  "pretrain",
  "report",
  "new algorithm",
  "timeline",
  "logs",
  "dashboard",
  "bench actors",
  "bench sandbox",
  "bench reward",
  "bench model",
  "bench rollout",
  "bench memory",
  "bench scale",
];

const loaded = Object.fromEntries(
  await Promise.all(Object.entries(commands).map(async ([name, load]) => [name, await load()] as const)),
);

test("every contract command is in pnpm torl", (t) => {
  t.deepEqual(
    CONTRACT.filter((name) => !(name in loaded)),
    [],
  );
});

test("every command's --help starts with how it is invoked, pnpm torl <command>", (t) => {
  for (const [name, command] of Object.entries(loaded)) {
    const first = command.usage.replace(/^usage: /, "").split("\n")[0]!;
    t.true(first.startsWith(`pnpm torl ${name}`), `${name}: ${first}`);
    t.true(command.summary.length > 0, name);
  }
});

test("every benchmark takes --json and says so", (t) => {
  for (const [name, command] of Object.entries(loaded))
    if (name.startsWith("bench ")) t.regex(command.usage, /--json/, name);
});

test("the help of commands whose output is a contract names it", (t) => {
  t.regex(loaded.verify!.usage, /"correct": bool, "extracted": string\|null, "score": number/);
  t.regex(loaded["sandbox"]!.usage, /serve --port P/);
  t.regex(loaded.export!.usage, /<checkpoint-dir> --out DIR/);
  t.regex(loaded["data tiny"]!.usage, /--out DIR/);
  t.regex(loaded.timeline!.usage, /--out FILE/);
  t.regex(loaded.sft!.usage, /<config\.yaml \.\.\.> \[key\.path=value \.\.\.\]/);
  for (const figure of ["scale_<phase>_seconds_torl", "scale_<phase>_seconds_torch_{fp32,bf16}"])
    t.true(loaded["bench scale"]!.usage.includes(figure), figure);
});
