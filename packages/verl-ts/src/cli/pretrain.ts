/**
 * `pnpm torl pretrain`: pretrains the tiny Qwen2-architecture base model of the CPU recipe on the
 * two-style corpus (plain reasoning, and reasoning with a Python block and its output), then measures it
 * the way the recipe will use it: greedy and temperature-1 TIR rollouts on held-out problems with one
 * sandboxed Python call (C=1).
 *
 * Steps: generate problems (the held-out hard questions left out) -> corpus -> byte-level BPE tokenizer
 * -> rows (loss on the response, not on observations) -> AdamW-style training with warmup + cosine decay
 * and gradient clipping -> an HF directory (config.json, model.safetensors, tokenizer.json) saved every
 * `--save-every` steps with trainer_state.json -> pretrain_eval.json.
 *
 * The parts, in ../tiny/: pretrain-corpus.ts (what is read), pretrain-training.ts (the loop),
 * pretrain-evaluation.ts (the measurement); the flags are in pretrain-arguments.ts beside this file.
 */
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { defineCommand } from "@torl-ts/core";
import { selectBackend } from "../models/index.js";
import { describeFigures, evaluateBase } from "../tiny/pretrain-evaluation.js";
import { formatSeconds, pretrain } from "../tiny/pretrain-training.js";
import { PRETRAIN_FLAGS, PRETRAIN_USAGE, pretrainOptions } from "./pretrain-arguments.js";

export const pretrainCommand = defineCommand({
  summary: "pretrain the tiny Qwen2-architecture base model on the two-style math corpus",
  usage: PRETRAIN_USAGE,
  flags: PRETRAIN_FLAGS,
  async run(flags) {
    const { options, evalOnly } = pretrainOptions(flags);
    const log = (line: string) => console.log(line);
    const out = resolve(options.out);
    if (!evalOnly) {
      const progress = await pretrain({ ...options, log });
      const last = progress.losses.at(-1);
      log(
        `[pretrain] saved ${out}: ${progress.step} steps, loss ${last?.[1] ?? "-"}, ${formatSeconds(progress.wallSeconds)}`,
      );
    } else await selectBackend({ backend: options.backend ?? "wasm", log });
    if (options.evalProblems > 0) {
      const t = performance.now();
      const evaluation = await evaluateBase(out, options.evalProblems, { splitSeed: options.splitSeed });
      writeFileSync(join(out, "pretrain_eval.json"), `${JSON.stringify(evaluation, null, 2)}\n`);
      log(
        `[pretrain] held-out (${options.evalProblems} problems, ${formatSeconds((performance.now() - t) / 1000)})`,
      );
      log(describeFigures("  greedy", evaluation.greedy));
      log(describeFigures(`  sampled T=1 x${evaluation.sampled.samples}`, evaluation.sampled));
    }
    log(out);
  },
});
