/**
 * `torl train --tool MODULE#EXPORT` as the installed `torl` runs it (core's dispatcher with this
 * package's commands): a package specifier is found from the user's project, and a module that is not
 * there or lacks the export stops the command before anything starts, with one `error:` line, exit 2.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import test from "ava";
import { parseToolFlag } from "../../src/cli/train.js";
import { loadTrainerConfig, TrainerConfigError } from "../../src/config/index.js";
import { createCodeInterpreterTool, importToolExport, rolloutToolSpec } from "../../src/rollout/index.js";
import { RayPPOTrainer } from "../../src/trainer/index.js";

const PACKAGE_DIR = fileURLToPath(new URL("../../", import.meta.url));
const TORL_BIN = fileURLToPath(new URL("../../../core/src/cli/torl.ts", import.meta.url));
const TINY_BASE = fileURLToPath(new URL("../../assets/tiny-base", import.meta.url));
const PARQUET = fileURLToPath(new URL("../fixtures/core/torl-test.parquet", import.meta.url));

test("--tool takes a package specifier (found from the project), a ./relative or absolute path, or a URL", async (t) => {
  const spec = parseToolFlag("@torl-ts/verl#createCodeInterpreterTool", PACKAGE_DIR);
  t.is(spec.exportName, "createCodeInterpreterTool");
  t.is(spec.module, pathToFileURL(join(PACKAGE_DIR, "src/index.ts")).href);
  t.is(await importToolExport(spec.module, spec.exportName!), createCodeInterpreterTool);
  const dir = mkdtempSync(join(tmpdir(), "torl-tool-flag-"));
  writeFileSync(join(dir, "my-tool.mjs"), "export class MyTool {}\n");
  const file = pathToFileURL(join(dir, "my-tool.mjs")).href;
  t.is(parseToolFlag("./my-tool.mjs#MyTool", dir).module, file);
  t.is(parseToolFlag(`${join(dir, "my-tool.mjs")}#MyTool`, "/").module, file);
  t.is(parseToolFlag(`${file}#MyTool`, "/").module, file);
  // a bare name is a package, never a file of the current directory; the error says how to name the file
  t.throws(() => parseToolFlag("my-tool.mjs#MyTool", dir), {
    message: new RegExp(
      `cannot find the package my-tool\\.mjs from ${dir} \\(for the file .*, write \\./my-tool\\.mjs\\)`,
    ),
  });
});

type Failure = Error & { code: number; stdout: string; stderr: string };

/** The installed `torl train` (core's bin with @torl-ts/verl's commands), run from this package's folder. */
async function installedTrain(runsDir: string, tool: string): Promise<Failure> {
  const cfg = join(runsDir, "..", "cfg.yaml");
  writeFileSync(
    cfg,
    [
      `data: { train_files: ${PARQUET}, val_files: null, train_batch_size: 2, max_prompt_length: 512 }`,
      `actor_rollout_ref:`,
      `  model: { path: ${TINY_BASE} }`,
      `  actor: { ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 2 }`,
      `  rollout: { n: 2 }`,
      `trainer: { n_gpus_per_node: 1, total_training_steps: 1, logger: [console] }`,
    ].join("\n"),
  );
  const run = promisify(execFile);
  try {
    await run("node", ["--import=tsx", TORL_BIN, "train", cfg, "--runs-dir", runsDir, "--tool", tool], {
      cwd: PACKAGE_DIR,
      env: { ...process.env, TORL_DEBUG: "" },
      timeout: 300_000,
    });
  } catch (e) {
    return e as Failure;
  }
  throw new Error("the command succeeded");
}

test("a --tool module that is missing, or lacks the export, stops train before anything starts: one error line, exit 2", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-tool-flag-"));
  writeFileSync(join(dir, "tools.mjs"), "export function otherTool() {}\n");
  const cases: [string, RegExp][] = [
    ["./nope.js#x", /^error: --tool \.\/nope\.js#x: \.\/nope\.js does not exist \(resolved to .*nope\.js\)/],
    [
      "no-such-tool-package#x",
      /^error: --tool no-such-tool-package#x: cannot find the package no-such-tool-package from /,
    ],
    [
      `${join(dir, "tools.mjs")}#missing`,
      /^error: the tool module file:.*tools\.mjs has no export "missing" \(its functions and classes: otherTool\)/,
    ],
  ];
  for (const [i, [tool, message]] of cases.entries()) {
    const runsDir = join(dir, `runs${i}`);
    const e = await installedTrain(runsDir, tool);
    t.is(e.code, 2, e.stderr);
    const lines = e.stderr.trim().split("\n");
    t.is(lines.length, 1, e.stderr);
    t.regex(lines[0]!, message);
    // nothing started: the trainer makes the run directory before the runtime and its workers
    t.deepEqual(readdirSync(dir).includes(`runs${i}`) ? readdirSync(runsDir) : [], [], e.stdout);
  }
});

test("tool: null while calls are available is refused; with num_llm_calls_available=0 no tool is the control", (t) => {
  const cfg = (calls: number) =>
    loadTrainerConfig({
      overrides: [
        `actor_rollout_ref.model.path=${TINY_BASE}`,
        `actor_rollout_ref.rollout.num_llm_calls_available=${calls}`,
      ],
    });
  const e = t.throws(() => new RayPPOTrainer(cfg(1), { tool: null, trainRows: [], valRows: [] }), {
    instanceOf: TrainerConfigError,
  });
  t.deepEqual(
    e!.issues.map((i) => i.key),
    ["tool"],
  );
  t.regex(e!.message, /tool is null while actor_rollout_ref\.rollout\.num_llm_calls_available is 1/);
  t.notThrows(() => new RayPPOTrainer(cfg(0), { tool: null, trainRows: [], valRows: [] }));
  t.is(rolloutToolSpec(cfg(0)), null);
});

test("a tool given while num_llm_calls_available is 0 is refused, not dropped without a word", (t) => {
  const cfg = loadTrainerConfig({
    overrides: [
      `actor_rollout_ref.model.path=${TINY_BASE}`,
      "actor_rollout_ref.rollout.num_llm_calls_available=0",
    ],
  });
  const tool = { module: "file:///t.js", exportName: "T" };
  const e = t.throws(() => new RayPPOTrainer(cfg, { tool, trainRows: [], valRows: [] }), {
    instanceOf: TrainerConfigError,
  });
  t.deepEqual(
    e!.issues.map((i) => i.key),
    ["tool"],
  );
  t.regex(e!.message, /tool is given while actor_rollout_ref\.rollout\.num_llm_calls_available is 0/);
});

test("a --tool tool gets the rollout.tool section (its own settings under config); args it names are kept", (t) => {
  const cfg = loadTrainerConfig({
    overrides: [
      "actor_rollout_ref.rollout.tool.config.width=3",
      "actor_rollout_ref.rollout.tool.run_timeout=4",
    ],
  });
  const spec = rolloutToolSpec(cfg, { module: "file:///t.js", exportName: "T" });
  t.like(spec!.args![0], { config: { width: 3 }, run_timeout: 4, stop: "```output" });
  t.deepEqual(rolloutToolSpec(cfg, { module: "file:///t.js", exportName: "T", args: [] })!.args, []);
});
