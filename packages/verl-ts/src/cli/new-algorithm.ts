/** `pnpm torl new algorithm DIR`: a runnable algorithm skeleton in DIR (../scaffold/new-algorithm.ts). */
import { resolve } from "node:path";
import { defineCommand, UsageError } from "@torl-ts/core";
import { scaffoldAlgorithm } from "../scaffold/new-algorithm.js";

export const newAlgorithmCommand = defineCommand({
  summary: "write a runnable algorithm skeleton (REINFORCE, Python tool, verifier) into DIR",
  usage: `usage: pnpm torl new algorithm DIR [--force]

Writes DIR/algorithm.ts (REINFORCE with a per-prompt baseline on two replicas, the TIR rollout with the
Python tool, the verifier as reward), DIR/package.json and DIR/README.md, and prints what to run next.
DIR is relative to the directory the command was started in. The skeleton depends on the torl-ts
packages as you have them (tensorflow comes through @torl-ts/verl, so one copy loads):
  installed in a project (npm):  DIR inside it uses the project's packages; DIR elsewhere depends on
        them with the specs the project's package.json gives; then npm install in DIR
  DIR = examples/<name> of a torl-ts checkout: a workspace package (workspace:*); then pnpm install at
        the repository root, which records it in pnpm-lock.yaml
  DIR elsewhere, run from a checkout: link: paths to its packages; then pnpm install in DIR
  --force   write into a DIR that already holds files`,
  flags: { force: { type: "boolean" } },
  positionals: true,
  run(flags, rest) {
    if (rest.length !== 1)
      throw new UsageError(`expected one directory, got: ${rest.join(" ") || "nothing"}`);
    const base = process.env.INIT_CWD ?? process.cwd();
    const result = scaffoldAlgorithm(resolve(base, rest[0]!), { force: !!flags.force, from: base });
    console.log(`wrote ${result.files.join(", ")} to ${result.dir} (${result.kind}); next:`);
    for (const line of result.next) console.log(`  ${line}`);
  },
});
