import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { shardRange } from "@torl-ts/actors";
import {
  buildByteBpeTokenizer,
  createRandomPretrained,
  FlatLayout,
  LATEST_FILE,
  saveHfMetadata,
  selectBackend,
  writeShard,
} from "@torl-ts/verl";
import test from "ava";
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
  // the shards two actor ranks write at global step 2
  const ckpt = join(root, "ckpt");
  const actor = join(ckpt, "global_step_2", "actor");
  const values = await model.getParameters();
  const layout = FlatLayout.of(values);
  const flat = layout.flatten(values);
  for (let rank = 0; rank < 2; rank++) {
    const { start, end } = shardRange(layout.total, 2, rank);
    const zeros = new Float32Array(end - start);
    const names = layout.entries.map((e) => [e.name, e.size] as [string, number]);
    writeShard(
      actor,
      { rank, worldSize: 2, start, end, total: layout.total, adamStep: 2, schedulerStep: 2, layout: names },
      flat.slice(start, end),
      zeros,
      zeros,
    );
  }
  saveHfMetadata(modelDir, actor);
  writeFileSync(join(ckpt, LATEST_FILE), "2");
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
