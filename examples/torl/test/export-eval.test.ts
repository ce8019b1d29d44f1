import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildByteBpeTokenizer, createRandomPretrained, selectBackend } from "@torl-ts/verl";
import test from "ava";
import { writeTrainerCheckpoint } from "../../../packages/verl-ts/test/fixtures/checkpoint.js";
import { evaluateQuietly } from "../../../packages/verl-ts/test/fixtures/eval.js";

// A trained policy leaves the framework and comes back: `pnpm torl export` turns a 2-rank checkpoint
// into a Hugging Face directory, and `pnpm torl eval --model` on it answers exactly as on the original.

const CLI = fileURLToPath(new URL("../src/cli.ts", import.meta.url));

let root: string;
test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  root = mkdtempSync(join(tmpdir(), "torl-export-eval-"));
});
test.after.always(() => rmSync(root, { recursive: true, force: true }));

test("`pnpm torl export` of a 2-rank checkpoint gives a directory `pnpm torl eval --model` runs, with the same answers", async (t) => {
  const modelDir = join(root, "model");
  const model = createRandomPretrained(
    modelDir,
    buildByteBpeTokenizer({}),
    {
      hiddenSize: 32,
      numHiddenLayers: 1,
      numAttentionHeads: 2,
      numKeyValueHeads: 1,
      maxPositionEmbeddings: 2048,
    },
    { seed: 9 },
  );
  // the checkpoint two actor ranks and the driver write at global step 2
  const ckpt = writeTrainerCheckpoint({
    root: join(root, "ckpt"),
    values: await model.getParameters(),
    modelDir,
    worldSize: 2,
    step: 2,
  });
  model.dispose();

  const out = join(root, "exported");
  const run = spawnSync(process.execPath, ["--import", "tsx", CLI, "export", ckpt, "--out", out], {
    encoding: "utf8",
    timeout: 120_000,
  });
  t.is(run.status, 0, run.stderr);
  t.is(run.stdout.trim().split("\n").at(-1), out, "the output directory is printed last");
  t.regex(run.stdout, /from 2 rank shard\(s\)/);

  const original = await evaluateQuietly(modelDir, join(root, "original.json"));
  const exported = await evaluateQuietly(out, join(root, "exported.json"));
  t.is(exported.overall.rows, 2);
  t.true(
    original.samples.some((s) => s.response.length > 0),
    "the model says something to compare",
  );
  t.deepEqual(
    exported.samples.map((s) => s.response),
    original.samples.map((s) => s.response),
    "greedy answers of the exported model are the original's",
  );
});
