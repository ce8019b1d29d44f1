/**
 * `pnpm torl sft`: bad input exits 2 with one `error:` line naming the key, file, column or row; a run
 * prints a line per step and its run directory last.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tinySplitProblems, writeParquetRows } from "@torl-ts/verl";
import { tinySftRows, writeTinyChatModel } from "@torl-ts/verl/tiny";
import test from "ava";
import { expectBadInput, runTorl } from "./cli-runner.js";

const work = mkdtempSync(join(tmpdir(), "torl-sft-cli-"));
test.after.always(() => rmSync(work, { recursive: true, force: true }));
const model = join(work, "chat-model");
writeTinyChatModel(model);

const torl = (args: string[]) => runTorl(args, { env: { TORL_BACKEND: "cpu" } });

const base = (data: string) => [
  "sft",
  `model.partial_pretrain=${model}`,
  `data.train_files=${data}`,
  "data.multiturn.enable=true",
  "data.train_batch_size=4",
  "trainer.total_training_steps=1",
  `trainer.default_local_dir=${join(work, "ckpt")}`,
];

function badInput(t: import("ava").ExecutionContext, args: string[], message: RegExp) {
  return expectBadInput(t, () => torl(args), message);
}

test("bad input exits 2 with one error line: unknown key, missing file, missing column, no assistant turn, empty file", async (t) => {
  t.timeout(5 * 60_000, "several CLI processes on a loaded machine");
  const good = join(work, "sft.parquet");
  writeParquetRows(good, tinySftRows(tinySplitProblems({ trainCount: 8, valCount: 0 }).train));
  await badInput(t, [...base(good), "data.train_batch_sise=4"], /data\.train_batch_sise.*train_batch_size/);
  await badInput(t, ["sft", join(work, "nope.yaml")], /config file not found: .*nope\.yaml/);

  const noMessages = join(work, "single.parquet");
  writeParquetRows(noMessages, [{ prompt: "hi", response: "there" }]);
  await badInput(t, base(noMessages), /single\.parquet: missing column "messages"/);

  const noAssistant = join(work, "no-assistant.jsonl");
  writeFileSync(
    noAssistant,
    [
      JSON.stringify({
        messages: [
          { role: "user", content: "a" },
          { role: "assistant", content: "b" },
        ],
      }),
      JSON.stringify({
        messages: [
          { role: "user", content: "a" },
          { role: "tool", content: "b" },
        ],
      }),
    ].join("\n"),
  );
  await badInput(
    t,
    base(noAssistant),
    /no-assistant\.jsonl \(row 1\): the conversation has no assistant turn/,
  );

  const empty = join(work, "empty.jsonl");
  writeFileSync(empty, "");
  await badInput(t, base(empty), /empty\.jsonl: the file holds no rows/);
});

test("a run prints a line per step and the run directory last", async (t) => {
  t.timeout(10 * 60_000, "a trainer run starts a worker process; minutes on a loaded machine");
  const data = join(work, "run.parquet");
  writeParquetRows(data, tinySftRows(tinySplitProblems({ trainCount: 8, valCount: 0 }).train));
  const runs = join(work, "runs");
  const r = await torl([
    ...base(data),
    "trainer.total_training_steps=2",
    "trainer.experiment_name=cli",
    "--runs-dir",
    runs,
  ]);
  t.is(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split("\n");
  t.is(lines.filter((l) => /^step [12]\/2 \[.*\] loss \d/.test(l)).length, 2, r.stdout);
  t.is(lines.at(-1), join(runs, "cli"));
});
