/** `pnpm torl eval`: the paper's evaluation of a model on veRL-schema datasets (../evaluation/eval.ts). */
import { writeFileSync } from "node:fs";
import { defineCommand, UsageError } from "@torl-ts/core";
import { evaluate, formatEvalTable } from "../evaluation/eval.js";
import { BACKEND_NAMES } from "../models/backend.js";

export const evalCommand = defineCommand({
  summary: "accuracy per data_source with tool calls, code ratio and pass ratio (the paper's evaluation)",
  usage: [
    "usage: pnpm torl eval --model DIR --data FILE [--data FILE ...] [--n N] [--temperature T] [--top-p P]",
    "                      [--max-calls C] [--limit K] [--max-response-length L] [--max-prompt-length P]",
    "                      [--template NAME] [--seed S] [--workers W] [--run-timeout S] [--backend NAME]",
    "                      [--out FILE.json] [--samples FILE.jsonl]",
    "",
    "Generates with the Python tool (TIR rollout, at most C calls per response, default 1) for every row",
    "of a veRL-schema dataset (.parquet or .jsonl; prompt rendered with tir_base_0309), grades the last",
    "\\boxed{} answer, and prints per data_source: accuracy, code ratio, code pass ratio, effective code ratio.",
    "Greedy by default; --n N samples N per row (temperature 1 unless given) and adds pass@N.",
    "--out writes the figures and every sample as JSON; --samples writes samples.jsonl for `pnpm torl report`.",
  ].join("\n"),
  flags: {
    model: { type: "string" },
    data: { type: "strings" },
    n: { type: "integer", min: 1 },
    temperature: { type: "number", min: 0 },
    "top-p": { type: "number", min: 0, max: 1 },
    "max-calls": { type: "integer", min: 0 },
    limit: { type: "integer", min: 1 },
    "max-response-length": { type: "integer", min: 1 },
    "max-prompt-length": { type: "integer", min: 11 },
    template: { type: "string" },
    seed: { type: "integer", min: 0 },
    workers: { type: "integer", min: 1 },
    "run-timeout": { type: "number", min: 0 },
    backend: { type: "string", choices: ["auto", ...BACKEND_NAMES] },
    out: { type: "string" },
    samples: { type: "string" },
  },
  async run(flags) {
    if (!flags.model) throw new UsageError("--model DIR is required");
    if (!flags.data?.length) throw new UsageError("--data FILE is required");
    const result = await evaluate({
      model: flags.model,
      data: flags.data,
      n: flags.n,
      temperature: flags.temperature,
      topP: flags["top-p"],
      maxCalls: flags["max-calls"],
      limit: flags.limit,
      maxResponseLength: flags["max-response-length"],
      maxPromptLength: flags["max-prompt-length"],
      template: flags.template,
      seed: flags.seed,
      workers: flags.workers,
      runTimeout: flags["run-timeout"],
      backend: flags.backend,
    });
    console.log(formatEvalTable(result));
    const out = flags.out;
    if (out) {
      writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
      console.log(`wrote ${out}`);
    }
    const samplesFile = flags.samples;
    if (samplesFile) {
      writeFileSync(samplesFile, result.samples.map((x) => `${JSON.stringify(x)}\n`).join(""));
      console.log(`wrote ${samplesFile}`);
    }
  },
});
