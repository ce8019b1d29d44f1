/**
 * `pnpm torl config print [config.yaml ...] [k=v ...]`: the trainer's config as `train` would load it.
 * With no arguments it prints the defaults file itself, every key with its comment; with files or
 * overrides, the merged config (checked the same way `train` checks it).
 */
import { readFileSync } from "node:fs";
import { defineCommand, UsageError } from "@torl-ts/core";
import { configToYaml, loadTrainerConfig, splitConfigArgs } from "../config/load.js";

/** The defaults file, in src/config/ and in dist/config/. */
const DEFAULTS_FILE = new URL("../config/ppo-trainer.yaml", import.meta.url);

export const configPrintCommand = defineCommand({
  summary: "print the trainer's default config (every key, commented), or a config merged as train loads it",
  usage: `usage: pnpm torl config print [config.yaml ...] [key.path=value ...]

With no arguments: prints the trainer's defaults (veRL's keys and ToRL's, each with its comment and
type), the file that every config is merged over. Save it as a starting point:
  pnpm torl config print > my.yaml
With YAML files and key=value overrides: prints the config as \`pnpm torl train\` would load it (the
defaults, the files in order, then the overrides), after the same checks.`,
  flags: {},
  positionals: true,
  run(_flags, positionals) {
    if (positionals.length === 0) {
      process.stdout.write(readFileSync(DEFAULTS_FILE, "utf8"));
      return;
    }
    const { files, overrides } = splitConfigArgs(positionals);
    for (const f of files) if (f.startsWith("-")) throw new UsageError(`unknown flag ${f}`);
    process.stdout.write(configToYaml(loadTrainerConfig({ files, overrides })));
  },
});
