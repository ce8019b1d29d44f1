// `torl model tiny --out DIR` writes the shipped tiny base model, which loads; `torl config print` shows
// the trainer's defaults, or a config merged as train loads it.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "@torl-ts/core";
import { loadPretrained } from "@torl-ts/verl";
import { cliCommands } from "@torl-ts/verl/cli";
import test from "ava";

const modelTiny = await cliCommands["model tiny"]!();
const configPrint = await cliCommands["config print"]!();

function tmp(t: { teardown: (f: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-model-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs a command with stdout captured. */
async function output(run: () => Promise<unknown>): Promise<string> {
  const chunks: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  const log = console.log;
  process.stdout.write = ((s: string) => chunks.push(String(s)) > 0) as typeof process.stdout.write;
  console.log = (s: string) => chunks.push(`${s}\n`);
  try {
    await run();
  } finally {
    process.stdout.write = write;
    console.log = log;
  }
  return chunks.join("");
}

test.serial("model tiny writes a loadable HF directory, and refuses a non-empty one or a file", async (t) => {
  const out = join(tmp(t), "tiny-base");
  t.is(await modelTiny.run(["--out", out]), 0);
  for (const f of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"])
    t.true(readdirSync(out).includes(f), f);
  const { model, tokenizer } = loadPretrained(out);
  t.true(model.config.numHiddenLayers > 0 && tokenizer.encode("1 + 1").length > 0);
  await t.throwsAsync(modelTiny.run(["--out", out]), {
    instanceOf: UsageError,
    message: /not empty.*--force/,
  });
  t.is(await modelTiny.run(["--out", out, "--force"]), 0);
  const file = join(tmp(t), "a-file");
  writeFileSync(file, "x");
  await t.throwsAsync(modelTiny.run(["--out", file]), { instanceOf: UsageError, message: /is a file/ });
  await t.throwsAsync(modelTiny.run([]), { instanceOf: UsageError, message: /--out DIR is required/ });
});

test.serial("config print shows the commented defaults, or the merged config with overrides", async (t) => {
  const defaults = await output(() => configPrint.run([]));
  t.regex(defaults, /^actor_rollout_ref:/m);
  t.regex(defaults, /#/, "the defaults keep their comments");
  const merged = await output(() => configPrint.run(["data.train_batch_size=3"]));
  t.regex(merged, /train_batch_size: 3\n/);
  await t.throwsAsync(configPrint.run(["data.no_such_key=1"]), { message: /no_such_key/ });
});
