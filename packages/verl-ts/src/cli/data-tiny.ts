/**
 * `pnpm torl data tiny --out DIR`: the tiny recipe's splits as veRL-schema parquet files, the same rows
 * the recipe's main job trains and validates on (its counts and split seed unless flags say otherwise),
 * so `pnpm torl eval --data DIR/test.parquet` measures a model on the held-out split and
 * `pnpm torl train` trains on DIR/train.parquet.
 */
import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { defineCommand, UsageError } from "@torl-ts/core";
import { problemRow, tinySplitProblems, writeParquetRows } from "../data/index.js";
import { tinySftRows } from "../tiny/chat-model.js";
import { TINY_DATA_DEFAULTS } from "../tiny/data-defaults.js";

export const dataTinyCommand = defineCommand({
  summary: "write the tiny recipe's train and held-out splits as parquet (for eval and other trainers)",
  usage: [
    "usage: pnpm torl data tiny --out DIR [--train N] [--val N] [--hard-fraction F] [--split-seed S] [--sft N]",
    "",
    "Writes DIR/train.parquet and DIR/test.parquet (the held-out split) in veRL's dataset schema:",
    "data_source, prompt [{role, content}], ability, reward_model {ground_truth, style}, extra_info.",
    `Defaults are the tiny recipe's (${TINY_DATA_DEFAULTS.trainProblems} train and ${TINY_DATA_DEFAULTS.valProblems} held-out problems, ` +
      `hard fraction ${TINY_DATA_DEFAULTS.hardFraction}, split seed ${TINY_DATA_DEFAULTS.splitSeed}),`,
    "so test.parquet holds the rows the recipe validates on. With the tiny base model (pnpm torl model tiny):",
    "  pnpm torl model tiny --out tiny-base",
    "  pnpm torl eval --model tiny-base --data DIR/test.parquet",
    "--sft N also writes DIR/sft.parquet: N tool-using conversations for `torl sft` (multi-turn rows: messages,",
    "tools), one per train problem from the first: the question, a code_interpreter call (hermes",
    "<tool_call>) with the problem's program, its output, and the boxed answer. For the tiny chat model",
    "(pnpm torl model tiny --chat); none of them is a held-out question.",
  ].join("\n"),
  flags: {
    out: { type: "string" },
    train: { type: "integer", min: 1 },
    val: { type: "integer", min: 1 },
    "hard-fraction": { type: "number", min: 0, max: 1 },
    "split-seed": { type: "integer", min: 0 },
    sft: { type: "integer", min: 1 },
  },
  run(flags) {
    if (!flags.out) throw new UsageError("--out DIR is required");
    if (existsSync(flags.out) && !statSync(flags.out).isDirectory())
      throw new UsageError(`--out ${flags.out} is a file; give a directory (it is created if missing)`);
    const d = TINY_DATA_DEFAULTS;
    const trainCount = flags.train ?? d.trainProblems;
    if (flags.sft !== undefined && flags.sft > trainCount)
      throw new UsageError(
        `--sft ${flags.sft} is more than the ${trainCount} train problems (raise --train)`,
      );
    const problems = tinySplitProblems({
      trainCount,
      valCount: flags.val ?? d.valProblems,
      hardFraction: flags["hard-fraction"] ?? d.hardFraction,
      splitSeed: flags["split-seed"] ?? d.splitSeed,
    });
    mkdirSync(flags.out, { recursive: true });
    const files: [string, object[]][] = [
      ["train.parquet", problems.train.map((p, i) => problemRow(p, "train", i))],
      ["test.parquet", problems.val.map((p, i) => problemRow(p, "val", i))],
    ];
    if (flags.sft !== undefined) files.push(["sft.parquet", tinySftRows(problems.train.slice(0, flags.sft))]);
    for (const [name, rows] of files) {
      const file = join(flags.out, name);
      writeParquetRows(file, rows);
      console.log(`wrote ${file} (${rows.length} rows)`);
    }
  },
});
