import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "@torl-ts/core";
import { evaluate, readRlDataset, tinyDataset } from "@torl-ts/verl";
import { cliCommands } from "@torl-ts/verl/cli";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";
import test from "ava";
import { loadRecipeConfig, recipeRows, TINY_CONFIG } from "../src/recipe.js";

const dataTinyCommand = await cliCommands["data tiny"]!();

function tmp(t: { teardown: (f: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-data-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("data tiny writes the main job's held-out split as parquet that the dataset reader reads back equal", async (t) => {
  const out = tmp(t);
  t.is(await dataTinyCommand.run(["--out", out, "--train=30"]), 0);
  const recipe = await recipeRows(loadRecipeConfig([TINY_CONFIG], ["torl.train_problems=30"]));
  const test_ = await readRlDataset(join(out, "test.parquet"));
  t.is(test_.length, 200, "tiny.yaml's torl.val_problems");
  t.deepEqual(test_, recipe.val, "the rows the recipe validates on");
  t.deepEqual(await readRlDataset(join(out, "train.parquet")), recipe.train);
});

test("data tiny takes --flag value and --flag=value alike, and refuses bad flags naming them", async (t) => {
  const a = tmp(t);
  const b = tmp(t);
  await dataTinyCommand.run(["--out", a, "--train", "5", "--val", "3", "--split-seed", "7"]);
  await dataTinyCommand.run([`--out=${b}`, "--train=5", "--val=3", "--split-seed=7"]);
  const rows = tinyDataset({ trainCount: 5, valCount: 3, splitSeed: 7 });
  t.deepEqual(await readRlDataset(join(a, "test.parquet")), rows.val);
  t.deepEqual(await readRlDataset(join(b, "test.parquet")), rows.val);
  await t.throwsAsync(dataTinyCommand.run([]), { instanceOf: UsageError, message: /--out DIR is required/ });
  await t.throwsAsync(dataTinyCommand.run(["--out", a, "--val", "-2"]), {
    instanceOf: UsageError,
    message: /--val must be an integer >= 1, got '-2'/,
  });
  await t.throwsAsync(dataTinyCommand.run(["--out", a, "--hard-fraction", "1.5"]), {
    message: /--hard-fraction must be a number in \[0, 1\]/,
  });
  await t.throwsAsync(dataTinyCommand.run(["--out", a, "--frobnicate"]), {
    message: /unknown flag --frobnicate/,
  });
});

test("eval runs on the held-out parquet that data tiny writes, with the tiny base model", async (t) => {
  const out = tmp(t);
  await dataTinyCommand.run(["--out", out, "--train", "4", "--val", "3"]);
  const result = await evaluate({
    model: TINY_BASE_DIR,
    data: [join(out, "test.parquet")],
    maxResponseLength: 96,
    workers: 1,
    log: null,
  });
  t.is(result.overall.rows, 3);
  t.deepEqual(
    result.samples.map((s) => s.data_source),
    tinyDataset({ trainCount: 4, valCount: 3 }).val.map((r) => r.data_source),
  );
});
