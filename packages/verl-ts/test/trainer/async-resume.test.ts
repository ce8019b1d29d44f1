/**
 * A stopped and resumed one_step_off / fully_async run trains on exactly the prompts an uninterrupted run
 * trains on: the batches (fully_async: the prompt groups) the rollout had drawn ahead of training when the
 * checkpoint was written are generated again, none is skipped and none trained twice. The prompts each
 * step trained are read from the run's generation dump (trainer.rollout_data_dir).
 */
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import type { TrainerState } from "../../src/trainer/checkpoint.js";
import { createTrainer } from "../../src/trainer/index.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig, vowelReward } from "./fixtures/setup.js";

const modelPath = tinyModelDir(13);
const tmp = () => mkdtempSync(join(tmpdir(), "torl-async-resume-"));

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

class Stop extends Error {}

/** Runs `steps` steps into `dumpDir` with checkpoints in `ckptDir`; with `stopAfter`, the run is stopped right after that step's checkpoint. */
async function run(
  extra: string[],
  o: { steps: number; ckptDir: string; dumpDir: string; stopAfter?: number },
) {
  const cfg = tinyConfig({
    modelPath,
    ckptDir: o.ckptDir,
    steps: o.steps,
    saveFreq: o.stopAfter ?? -1,
    extra: ["trainer.val_before_train=false", `trainer.rollout_data_dir=${o.dumpDir}`, ...extra],
  });
  const trainer = createTrainer(cfg, {
    trainRows: rows(16),
    valRows: [],
    reward: vowelReward,
    runsDir: mkdtempSync(join(tmpdir(), "torl-runs-")),
    workerEnv: { TORL_BACKEND: "cpu" },
    log: () => {},
    onStep: async (step) => {
      if (step === o.stopAfter) throw new Stop(`stopped after step ${step}`);
    },
  });
  return trainer.fit();
}

interface Dumped {
  input: string;
  output: string;
  score: number;
}

/** Per step (`from` to `steps`), the generations it trained on (its rollout.n responses per prompt). */
function dumped(dir: string, steps: number, from = 1): Dumped[][] {
  return Array.from({ length: steps - from + 1 }, (_, s) =>
    readFileSync(join(dir, `${s + from}.jsonl`), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Dumped),
  );
}

/** The training row (its index in rows()) of a dumped prompt. */
const promptIndex = (d: Dumped) => Number(/q(\d+):/.exec(d.input)![1]);

/** Per step, the rows it trained on, in the batch's order (each prompt's rollout.n responses are adjacent). */
const prompts = (run: Dumped[][]) => run.map((s) => [...new Set(s.map(promptIndex))]);

/** The rows a run trained on, ascending (a row twice is there twice). */
const allPrompts = (run: Dumped[][]) =>
  prompts(run)
    .flat()
    .sort((a, b) => a - b);

/** An uninterrupted run and one stopped after step `stopAfter` and resumed (trainer.resume_mode=auto): their dumps. */
async function uninterruptedAndResumed(extra: string[], steps: number, stopAfter: number) {
  const whole = tmp();
  await run(extra, { steps, ckptDir: tmp(), dumpDir: whole });
  const ckptDir = tmp();
  const parts = tmp();
  const err = await run(extra, { steps, ckptDir, dumpDir: parts, stopAfter }).catch((e: unknown) => e);
  if (!(err instanceof Stop)) throw err instanceof Error ? err : new Error(`the first part ended: ${err}`);
  const summary = await run(extra, { steps, ckptDir, dumpDir: parts });
  const state = JSON.parse(
    readFileSync(join(ckptDir, `global_step_${stopAfter}`, "trainer_state.json"), "utf8"),
  ) as TrainerState;
  return { whole: dumped(whole, steps), resumed: dumped(parts, steps), summary, state, ckptDir };
}

test.serial(
  "one_step_off: a run stopped and resumed trains the same batches in the same order, with the same seeds",
  async (t) => {
    // a learning rate of 0: a response depends only on its prompt and its seed, whatever the staleness
    const { whole, resumed, summary, state } = await uninterruptedAndResumed(
      ["trainer.mode=one_step_off", "actor_rollout_ref.actor.optim.lr=0"],
      4,
      2,
    );
    t.is(summary.resumed_from_step, 2);
    // four batches of 4: every row of the epoch once
    t.deepEqual(
      allPrompts(whole),
      Array.from({ length: 16 }, (_, i) => i),
    );
    t.deepEqual(prompts(resumed), prompts(whole));
    // the same sampling seeds: the same responses
    t.deepEqual(resumed, whole);
    // the checkpoint stands before the third batch, whatever the rollout had drawn
    t.deepEqual(state.async, { batch: 2, trained: [] });
    t.like(state.loader, { epoch: 0, position: 8 });
  },
);

test.serial(
  "fully_async: a run stopped mid-batch and resumed trains every prompt group of the uninterrupted run exactly once, with the same seeds",
  async (t) => {
    // 2 groups a step, 2 steps a loader batch; capacity 4 steps' worth, so at step 3's checkpoint the
    // rollout may have started the units of steps 4-6 (the rest of the second batch and all of the
    // third); two rows decode at a time, so a unit's groups are queued one by one as they finish. A
    // learning rate of 0: a response depends only on its prompt and its sampling stream, whatever the
    // staleness.
    const extra = [
      "trainer.mode=fully_async",
      "async_training.staleness_threshold=1.0",
      "async_training.trigger_parameter_sync_step=2",
      "actor_rollout_ref.rollout.max_num_seqs=2",
      "actor_rollout_ref.actor.optim.lr=0",
    ];
    const { whole, resumed, summary, state, ckptDir } = await uninterruptedAndResumed(extra, 6, 3);
    t.is(summary.resumed_from_step, 3);
    for (const s of prompts(resumed)) t.is(s.length, 2);
    // the first three loader batches: 12 of the 16 rows, each once
    t.is(new Set(allPrompts(whole)).size, 12);
    t.deepEqual(allPrompts(resumed), allPrompts(whole));
    // one rollout worker generates one unit at a time, so here each step takes the same groups, and
    // they sample from the same streams: the same responses
    t.deepEqual(resumed, whole);
    // after 3 steps of 2 groups, half of the second batch was trained: the checkpoint stands before it
    t.deepEqual(state.async, { batch: 1, trained: [[0, 1]] });
    t.like(state.loader, { epoch: 0, position: 4 });

    // Groups that finish out of order (several rollout workers) leave a batch trained in part, in any
    // order: the same checkpoint as if step 3 had taken groups 0 and 2 of the second batch. The resumed
    // run trains its groups 1 and 3 and the third batch, each sampled from its stream of the run
    // without a stop (the whole part is generated again; the groups trained before are not queued).
    const outOfOrder = tmp();
    cpSync(join(ckptDir, "global_step_3"), outOfOrder, { recursive: true });
    writeFileSync(
      join(outOfOrder, "trainer_state.json"),
      JSON.stringify({ ...state, async: { batch: 1, trained: [[0, 2]] } }),
    );
    const dumpDir = tmp();
    await run([...extra, "trainer.resume_mode=resume_path", `trainer.resume_from_path=${outOfOrder}`], {
      steps: 6,
      ckptDir: tmp(),
      dumpDir,
    });
    const second = [...prompts(whole)[2]!, ...prompts(whole)[3]!];
    const third = [...prompts(whole)[4]!, ...prompts(whole)[5]!];
    const after = dumped(dumpDir, 6, 4);
    t.deepEqual(
      allPrompts(after),
      [second[1]!, second[3]!, ...third].sort((a, b) => a - b),
    );
    // (in whichever step it was trained)
    const byPrompt = (run: Dumped[][], p: number) =>
      run
        .flat()
        .filter((d) => promptIndex(d) === p)
        .map((d) => JSON.stringify([d.input, d.output, d.score]));
    for (const p of allPrompts(after)) t.deepEqual(byPrompt(after, p), byPrompt(whole, p), `row ${p}`);

    // a trainer that takes whole batches cannot resume it
    const refused = await t.throwsAsync(
      run(
        [
          "trainer.mode=one_step_off",
          "trainer.resume_mode=resume_path",
          `trainer.resume_from_path=${join(ckptDir, "global_step_3")}`,
        ],
        { steps: 6, ckptDir: tmp(), dumpDir: tmp() },
      ),
    );
    t.regex(
      refused!.message,
      /global_step_3 was written by a trainer.mode=fully_async run .* resume it with trainer.mode=fully_async/,
    );
  },
);
