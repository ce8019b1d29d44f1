/** The `pnpm torl pretrain` flags: their help text, their specs and their reading into PretrainOptions. */
import { type FlagValues, UsageError } from "@torl-ts/core";
import { HELD_OUT_RESERVE, RECIPE_SPLIT_SEED } from "../data/index.js";
import { BACKEND_NAMES } from "../models/index.js";
import { DEFAULT_PRETRAIN, type PretrainOptions } from "../tiny/pretrain-training.js";
import { TINY_ARCHITECTURE } from "../tiny/tiny-model.js";

export const PRETRAIN_USAGE = `usage: pnpm torl pretrain [--out DIR] [--steps N] [--seed S] [options]

Pretrains the tiny Qwen2-architecture base model of the CPU recipe on a synthetic two-style corpus
(about 40% of solutions reason with a Python block and its output), saves it in HF format
(config.json, model.safetensors, tokenizer.json) every --save-every steps, then measures it on
held-out problems (greedy and temperature 1, one sandboxed Python call) into pretrain_eval.json.
The tiny base model this package ships (pnpm torl model tiny writes it) was made with these defaults,
run in resumed legs; README-pretrain.md of the torl-ts repository's ToRL example says how, with its
measured figures.

options:
  --out DIR            output directory (default ${DEFAULT_PRETRAIN.out})
  --steps N            optimizer steps (default ${DEFAULT_PRETRAIN.steps})
  --seed S             seed of corpus, initialisation and batch order (default ${DEFAULT_PRETRAIN.seed})
  --batch-size N       documents per step (default ${DEFAULT_PRETRAIN.batchSize})
  --lr X               peak learning rate; warmup then cosine to 10% (default ${DEFAULT_PRETRAIN.lr})
  --warmup N           warmup steps (default ${DEFAULT_PRETRAIN.warmupSteps})
  --init-std X         std of the initial weights (default ${DEFAULT_PRETRAIN.initStd}; 0.02 sat on a long plateau
                       where attention ignored the question)
  --corpus-docs N      corpus size (default ${DEFAULT_PRETRAIN.corpusDocs})
  --tokenizer-docs N   documents the BPE merges are learned from (default ${DEFAULT_PRETRAIN.tokenizerDocs})
  --code-fraction X    share of solutions with code (default ${DEFAULT_PRETRAIN.codeFraction})
  --template-fraction X  share of rows with the full instruction template; the rest start at the
                       question, which halves their cost (default ${DEFAULT_PRETRAIN.templateFraction})
  --hidden N --layers N --heads N --kv-heads N --intermediate N --vocab N
                       architecture (default ${TINY_ARCHITECTURE.hiddenSize}, ${TINY_ARCHITECTURE.numHiddenLayers}, ${TINY_ARCHITECTURE.numAttentionHeads}, ${TINY_ARCHITECTURE.numKeyValueHeads}, ${TINY_ARCHITECTURE.intermediateSize}, ${TINY_ARCHITECTURE.vocabSize})
  --log-every N        progress line every N steps (default ${DEFAULT_PRETRAIN.logEvery})
  --save-every N       checkpoint every N steps (default ${DEFAULT_PRETRAIN.saveEvery})
  --eval N             held-out problems to measure at the end, 0 for none (default ${DEFAULT_PRETRAIN.evalProblems})
  --eval-only          only measure the model in --out
  --split-seed S       seed of the recipe's train/held-out split (default ${RECIPE_SPLIT_SEED}; its first
                       ${HELD_OUT_RESERVE} held-out hard questions are kept out of the corpus)
  --resume             continue from the checkpoint in --out
  --backend NAME       tensor backend (default wasm, the fast one on CPU)`;

export const PRETRAIN_FLAGS = {
  out: { type: "string" },
  steps: { type: "integer", min: 1 },
  seed: { type: "integer", min: 0 },
  "batch-size": { type: "integer", min: 1 },
  lr: { type: "number", min: 0 },
  warmup: { type: "integer", min: 1 },
  "corpus-docs": { type: "integer", min: 1 },
  "tokenizer-docs": { type: "integer", min: 1 },
  "code-fraction": { type: "number", min: 0, max: 1 },
  "init-std": { type: "number", min: 0 },
  "template-fraction": { type: "number", min: 0, max: 1 },
  hidden: { type: "integer", min: 8 },
  layers: { type: "integer", min: 1 },
  heads: { type: "integer", min: 1 },
  "kv-heads": { type: "integer", min: 1 },
  intermediate: { type: "integer", min: 1 },
  vocab: { type: "integer", min: 257 },
  "log-every": { type: "integer", min: 1 },
  "save-every": { type: "integer", min: 1 },
  eval: { type: "integer", min: 0 },
  "split-seed": { type: "integer", min: 0 },
  "eval-only": { type: "boolean" },
  resume: { type: "boolean" },
  backend: { type: "string", choices: ["auto", ...BACKEND_NAMES] },
} as const;

/** The pretraining options the flags give (the defaults for the rest); a UsageError for a bad architecture. */
export function pretrainOptions(f: FlagValues<typeof PRETRAIN_FLAGS>): {
  options: Omit<PretrainOptions, "log">;
  evalOnly: boolean;
} {
  const o: Omit<PretrainOptions, "log"> = { ...DEFAULT_PRETRAIN, architecture: { ...TINY_ARCHITECTURE } };
  if (f.out === "") throw new UsageError("--out needs a directory");
  if (f.out !== undefined) o.out = f.out;
  o.steps = f.steps ?? o.steps;
  o.seed = f.seed ?? o.seed;
  o.batchSize = f["batch-size"] ?? o.batchSize;
  o.lr = f.lr ?? o.lr;
  o.warmupSteps = f.warmup ?? o.warmupSteps;
  o.corpusDocs = f["corpus-docs"] ?? o.corpusDocs;
  o.tokenizerDocs = f["tokenizer-docs"] ?? o.tokenizerDocs;
  o.codeFraction = f["code-fraction"] ?? o.codeFraction;
  o.initStd = f["init-std"] ?? o.initStd;
  o.templateFraction = f["template-fraction"] ?? o.templateFraction;
  o.architecture.hiddenSize = f.hidden ?? o.architecture.hiddenSize;
  o.architecture.numHiddenLayers = f.layers ?? o.architecture.numHiddenLayers;
  o.architecture.numAttentionHeads = f.heads ?? o.architecture.numAttentionHeads;
  o.architecture.numKeyValueHeads = f["kv-heads"] ?? o.architecture.numKeyValueHeads;
  o.architecture.intermediateSize = f.intermediate ?? o.architecture.intermediateSize;
  o.architecture.vocabSize = f.vocab ?? o.architecture.vocabSize;
  o.logEvery = f["log-every"] ?? o.logEvery;
  o.saveEvery = f["save-every"] ?? o.saveEvery;
  o.evalProblems = f.eval ?? o.evalProblems;
  o.splitSeed = f["split-seed"] ?? o.splitSeed;
  if (f.resume) o.resume = true;
  if (f.backend) o.backend = f.backend;
  const evalOnly = f["eval-only"] ?? false;
  const a = o.architecture;
  if (a.hiddenSize % a.numAttentionHeads !== 0 || (a.hiddenSize / a.numAttentionHeads) % 2 !== 0)
    throw new UsageError(
      `--hidden ${a.hiddenSize} must split into --heads ${a.numAttentionHeads} heads of even size`,
    );
  if (a.numAttentionHeads % a.numKeyValueHeads !== 0)
    throw new UsageError(
      `--heads ${a.numAttentionHeads} must be a multiple of --kv-heads ${a.numKeyValueHeads}`,
    );
  return { options: o, evalOnly };
}
