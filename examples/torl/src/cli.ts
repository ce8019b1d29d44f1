#!/usr/bin/env node
/**
 * `pnpm torl <command>`: the `torl` dispatcher of @torl-ts/core with the repository's commands
 * (command-registry.ts), and the tiny ToRL recipe as the main job.
 */
import { runProgram, torlVersion } from "@torl-ts/core";
import { commands, mainJob } from "./command-registry.js";

runProgram({
  name: "pnpm torl",
  version: torlVersion(),
  commands,
  main: {
    loader: mainJob,
    usage: "pnpm torl [k=v ...]            run the tiny ToRL recipe (the main job), with config overrides",
  },
});
