import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { checkLoggerNames, checkTrainerConfig, loadTrainerConfig } from "../../src/config/index.js";
import {
  crc32c,
  createMetricSinks,
  LoggerUnavailableError,
  RunLog,
  readMetrics,
  TensorBoardWriter,
} from "../../src/trainer/index.js";
import { crc32cBitwise, parseEvent, readRecords } from "./tfevents-reader.js";

test("CRC-32C matches the standard check value and the independent bitwise form", (t) => {
  const check = new TextEncoder().encode("123456789");
  t.is(crc32c(check), 0xe3069283);
  t.is(crc32cBitwise(check), 0xe3069283);
  const random = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7919) & 0xff);
  t.is(crc32c(random), crc32cBitwise(random));
});

test("tensorboard event files read back: file version, then scalars per step with wall time, CRCs valid", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-tb-"));
  const tb = new TensorBoardWriter(dir);
  tb.addScalars(1, { "actor/pg_loss": 0.25, "critic/score/mean": -1 }, 1_700_000_000.5);
  tb.addScalars(2, { "actor/pg_loss": -0.125 }, 1_700_000_001.5);
  tb.close();
  t.regex(tb.file, /events\.out\.tfevents\.\d+\./);
  const events = readRecords(readFileSync(tb.file)).map(parseEvent);
  t.is(events.length, 3);
  t.is(events[0]!.fileVersion, "brain.Event:2");
  t.true(events[0]!.wallTime > 1.6e9);
  t.deepEqual(events[1], {
    wallTime: 1_700_000_000.5,
    step: 1,
    scalars: { "actor/pg_loss": 0.25, "critic/score/mean": -1 },
  });
  t.deepEqual(events[2]!.scalars, { "actor/pg_loss": -0.125 });
  t.is(events[2]!.step, 2);
  // a flipped byte is caught by the data CRC
  const bytes = readFileSync(tb.file);
  bytes[bytes.length - 6]! ^= 0xff;
  const bad = join(dir, "corrupt");
  writeFileSync(bad, bytes);
  t.throws(() => readRecords(readFileSync(bad)), { message: /record 2: data CRC mismatch/ });
});

test("trainer.logger: unknown names refused with did-you-mean; wandb and mlflow need their clients", async (t) => {
  t.deepEqual(checkLoggerNames(["console", "file", "tensorboard"]), []);
  const issues = checkLoggerNames(["tensorbord", "swanlab"]);
  t.is(issues.length, 2);
  t.regex(issues[0]!.message, /"tensorbord" is not a logger .*did you mean "tensorboard"/);
  const cfg = loadTrainerConfig({ overrides: ["trainer.logger=[console,wanb]"] });
  t.regex(
    checkTrainerConfig(cfg)
      .map((i) => i.message)
      .join("\n"),
    /did you mean "wandb"/,
  );
  const runDir = mkdtempSync(join(tmpdir(), "torl-sinks-"));
  const o = { runDir, project: "p", experiment: "e" };
  await t.throwsAsync(createMetricSinks(["wandb"], o), {
    instanceOf: LoggerUnavailableError,
    message: /wandb is not available: its client is not installed: pnpm add @wandb\/sdk/,
  });
  await t.throwsAsync(createMetricSinks(["mlflow"], o), {
    instanceOf: LoggerUnavailableError,
    message: /pnpm add mlflow/,
  });
  const sinks = await createMetricSinks(["console", "file", "tensorboard"], o);
  t.is(sinks.length, 1, "console and file are the run log's own");
  await sinks[0]!.log(3, { x: 1 });
  await sinks[0]!.close();
  const files = readdirSync(runDir).filter((f) => f.startsWith("events.out.tfevents."));
  t.is(files.length, 1);
  t.deepEqual(readRecords(readFileSync(join(runDir, files[0]!))).map(parseEvent)[1]!.scalars, { x: 1 });
});

test("console prints a line per step only when listed; metrics.jsonl is written either way", async (t) => {
  const runs = mkdtempSync(join(tmpdir(), "torl-runlog-"));
  for (const withConsole of [true, false]) {
    const printed: string[] = [];
    const log = new RunLog(runs, `run-${withConsole}`, (l) => printed.push(l), withConsole);
    log.start(undefined);
    await log.log(1, 2, { "critic/score/mean": 0.5 });
    await log.close();
    t.is(printed.length, withConsole ? 1 : 0);
    t.deepEqual(readMetrics(log.metricsFile), [{ step: 1, "critic/score/mean": 0.5 }]);
  }
});
