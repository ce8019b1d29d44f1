/**
 * `pnpm torl data tiny --out DIR`: the tiny recipe's splits as veRL-schema parquet files, the same rows
 * the main job trains and validates on (tiny.yaml's counts and split seed unless flags say otherwise),
 * so `pnpm torl eval --data DIR/test.parquet` measures a model on the held-out split.
 */
import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { type CliCommand, parseFlags, UsageError } from "@torl-ts/core";
import { tinyDataset, writeParquetRows } from "@torl-ts/verl";
import { loadRecipeConfig, recipeSettings, TINY_CONFIG } from "./recipe.js";

export const dataTinyCommand: CliCommand = {
  summary: "write the tiny recipe's train and held-out splits as parquet (for eval and other trainers)",
  usage: [
    "usage: pnpm torl data tiny --out DIR [--train N] [--val N] [--hard-fraction F] [--split-seed S]",
    "",
    "Writes DIR/train.parquet and DIR/test.parquet (the held-out split) in veRL's dataset schema:",
    "data_source, prompt [{role, content}], ability, reward_model {ground_truth, style}, extra_info.",
    "Defaults are the main job's (examples/torl/configs/tiny.yaml: torl.train_problems, torl.val_problems,",
    "torl.hard_fraction, torl.split_seed), so test.parquet holds the rows the recipe validates on:",
    "  pnpm torl eval --model examples/torl/assets/tiny-base --data DIR/test.parquet",
  ].join("\n"),
  async run(args) {
    const { flags } = parseFlags(args, {
      out: { type: "string" },
      train: { type: "integer", min: 1 },
      val: { type: "integer", min: 1 },
      "hard-fraction": { type: "number", min: 0, max: 1 },
      "split-seed": { type: "integer", min: 0 },
    });
    if (!flags.out) throw new UsageError("--out DIR is required");
    if (existsSync(flags.out) && !statSync(flags.out).isDirectory())
      throw new UsageError(`--out ${flags.out} is a file; give a directory (it is created if missing)`);
    const recipe = recipeSettings(loadRecipeConfig([TINY_CONFIG]));
    const { train, val } = tinyDataset({
      trainCount: flags.train ?? recipe.train_problems,
      valCount: flags.val ?? recipe.val_problems,
      hardFraction: flags["hard-fraction"] ?? recipe.hard_fraction,
      splitSeed: flags["split-seed"] ?? recipe.split_seed,
    });
    mkdirSync(flags.out, { recursive: true });
    for (const [name, rows] of [
      ["train.parquet", train],
      ["test.parquet", val],
    ] as const) {
      const file = join(flags.out, name);
      writeParquetRows(file, rows);
      console.log(`wrote ${file} (${rows.length} rows)`);
    }
    return 0;
  },
};
