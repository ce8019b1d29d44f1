/**
 * `pnpm torl pretrain`: pretrains the tiny Qwen2-architecture base model of the CPU recipe on the
 * two-style corpus (plain reasoning, and reasoning with a Python block and its output), then measures it
 * the way the recipe will use it: greedy and temperature-1 rollouts on held-out problems with one real
 * Python call (C=1).
 *
 * Steps: generate problems (the held-out hard questions left out) -> corpus -> byte-level BPE tokenizer
 * -> rows (loss on the response, not on observations) -> AdamW-style training with warmup + cosine decay
 * and gradient clipping -> an HF directory (config.json, model.safetensors, tokenizer.json) saved every
 * `--save-every` steps with trainer_state.json -> pretrain_eval.json.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { type CliCommand, parseFlags, UsageError } from "@torl-ts/core";
import {
  applyGradients,
  BACKEND_NAMES,
  type BackendName,
  countParameters,
  extractLastPythonBlock,
  formatObservation,
  forwardBackward,
  generate,
  generateProblems,
  HELD_OUT_RESERVE,
  heldOutProblems,
  loadPretrained,
  type Problem,
  padBatch,
  pretrainExclusions,
  type Qwen2Config,
  Qwen2Model,
  RECIPE_SPLIT_SEED,
  saveModel,
  seededRandom,
  selectBackend,
  type Tokenizer,
  wrapObservation,
} from "@torl-ts/verl";
import { buildCorpus, type CorpusDocument } from "./corpus.js";
import {
  buildTinyTokenizer,
  TINY_ARCHITECTURE,
  type TinyArchitecture,
  type TrainingRow,
  tinyPrompt,
  trainingRow,
} from "./tiny-model.js";

export interface PretrainOptions {
  out: string;
  steps: number;
  seed: number;
  batchSize: number;
  /** Peak learning rate (Adam); warmup then cosine decay to 10% of it. */
  lr: number;
  warmupSteps: number;
  /** Global gradient-norm clip. */
  clip: number;
  /** Std of the normal initialisation of weight matrices and embeddings. */
  initStd: number;
  /** Documents in the corpus (cycled in shuffled epochs). */
  corpusDocs: number;
  /** Documents the tokenizer learns its merges from. */
  tokenizerDocs: number;
  codeFraction: number;
  hardFraction: number;
  /** Share of rows with the full instruction template; the rest start at the question (see trainingRow). */
  templateFraction: number;
  architecture: TinyArchitecture;
  logEvery: number;
  saveEvery: number;
  /** Held-out problems to evaluate at the end (0: none). */
  evalProblems: number;
  splitSeed: number;
  resume: boolean;
  backend?: BackendName | "auto";
  log: (line: string) => void;
}

export const DEFAULT_PRETRAIN: Omit<PretrainOptions, "log"> = {
  out: "runs/tiny-base",
  steps: 2500,
  seed: 0,
  batchSize: 16,
  lr: 3e-3,
  warmupSteps: 30,
  clip: 1,
  initStd: 0.1,
  corpusDocs: 20000,
  tokenizerDocs: 3000,
  codeFraction: 0.4,
  hardFraction: 0.5,
  templateFraction: 0.3,
  architecture: TINY_ARCHITECTURE,
  logEvery: 10,
  saveEvery: 100,
  evalProblems: 200,
  splitSeed: RECIPE_SPLIT_SEED,
  resume: false,
};

export interface TrainerState {
  step: number;
  steps: number;
  seed: number;
  /** Mean loss over each logging window: [step, loss]. */
  losses: [number, number][];
  tokensPerSecond: number;
  wallSeconds: number;
  parameters: number;
  corpusDocs: number;
  options: Omit<PretrainOptions, "log" | "architecture" | "out">;
  architecture: TinyArchitecture;
}

/** The pretraining corpus: problems with the held-out hard questions left out, two solution styles. */
export function pretrainCorpus(
  options: Pick<PretrainOptions, "corpusDocs" | "seed" | "codeFraction" | "hardFraction" | "splitSeed">,
): CorpusDocument[] {
  const problems = generateProblems({
    count: options.corpusDocs,
    seed: options.seed * 7919 + 101,
    hardFraction: options.hardFraction,
    split: "pretrain",
    exclude: pretrainExclusions(options.splitSeed),
  });
  return buildCorpus(problems, { seed: options.seed * 7919 + 202, codeFraction: options.codeFraction });
}

/** Batches of row indices: shuffled each epoch, sorted by length inside windows of 8 batches to cut padding. */
export function* batchOrder(
  rows: readonly TrainingRow[],
  batchSize: number,
  seed: number,
): Generator<number[]> {
  const random = seededRandom(seed);
  for (;;) {
    const order = rows.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    const window = batchSize * 8;
    for (let w = 0; w + batchSize <= order.length; w += window) {
      const chunk = order.slice(w, w + window).sort((a, b) => rows[a]!.ids.length - rows[b]!.ids.length);
      const batches: number[][] = [];
      for (let s = 0; s + batchSize <= chunk.length; s += batchSize)
        batches.push(chunk.slice(s, s + batchSize));
      for (let i = batches.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [batches[i], batches[j]] = [batches[j]!, batches[i]!];
      }
      yield* batches;
    }
  }
}

export function learningRate(step: number, o: Pick<PretrainOptions, "lr" | "warmupSteps" | "steps">): number {
  if (step < o.warmupSteps) return (o.lr * (step + 1)) / o.warmupSteps;
  const progress = Math.min(1, (step - o.warmupSteps) / Math.max(1, o.steps - o.warmupSteps));
  return o.lr * (0.1 + 0.45 * (1 + Math.cos(Math.PI * progress)));
}

function modelConfig(a: TinyArchitecture, tokenizer: Tokenizer): Qwen2Config {
  return {
    architecture: "Qwen2ForCausalLM",
    vocabSize: tokenizer.vocabSize,
    hiddenSize: a.hiddenSize,
    intermediateSize: a.intermediateSize,
    numHiddenLayers: a.numHiddenLayers,
    numAttentionHeads: a.numAttentionHeads,
    numKeyValueHeads: a.numKeyValueHeads,
    headDim: a.hiddenSize / a.numAttentionHeads,
    ropeTheta: 10000,
    rmsNormEps: 1e-6,
    tieWordEmbeddings: true,
    attentionBias: true,
    maxPositionEmbeddings: 1024,
    eosTokenId: tokenizer.eosTokenId,
    torchDtype: "float32",
  };
}

/** Scales gradients in place so their global L2 norm is at most `clip`; returns the norm before. */
async function clipGradients(grads: Map<string, tf.Tensor>, clip: number): Promise<number> {
  const normT = tf.tidy(() => tf.sqrt(tf.addN([...grads.values()].map((g) => tf.sum(tf.square(g))))));
  let norm: number;
  try {
    norm = (await normT.data())[0]!;
  } finally {
    normT.dispose();
  }
  if (Number.isFinite(norm) && norm > clip) {
    for (const [name, g] of grads) {
      grads.set(name, tf.mul(g, clip / norm));
      g.dispose();
    }
  }
  return norm;
}

function writeState(out: string, state: TrainerState): void {
  writeFileSync(join(out, "trainer_state.json"), `${JSON.stringify(state, null, 2)}\n`);
}

function formatSeconds(s: number): string {
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${s.toFixed(1)}s`;
}

/** Trains (or resumes) and saves the model; returns the final trainer state. */
export async function pretrain(o: PretrainOptions): Promise<TrainerState> {
  const backend = await selectBackend({ backend: o.backend ?? "wasm", log: o.log });
  void backend;
  const out = resolve(o.out);
  mkdirSync(out, { recursive: true });
  const t0 = performance.now();
  const docs = pretrainCorpus(o);
  let model: Qwen2Model;
  let tokenizer: Tokenizer;
  let startStep = 0;
  let losses: [number, number][] = [];
  let priorSeconds = 0;
  const stateFile = join(out, "trainer_state.json");
  if (o.resume && existsSync(stateFile)) {
    const prior = JSON.parse(readFileSync(stateFile, "utf8")) as TrainerState;
    ({ model, tokenizer } = loadPretrained(out));
    startStep = prior.step;
    losses = prior.losses;
    priorSeconds = prior.wallSeconds;
    o.log(`[pretrain] resuming ${out} at step ${startStep} (optimizer moments start fresh)`);
  } else {
    if (o.resume) o.log(`[pretrain] nothing to resume in ${out} (no trainer_state.json); starting fresh`);
    tokenizer = buildTinyTokenizer(docs.slice(0, o.tokenizerDocs), o.architecture.vocabSize);
    model = Qwen2Model.random(modelConfig(o.architecture, tokenizer), { seed: o.seed, std: o.initStd });
  }
  const pickTemplate = seededRandom(o.seed * 7919 + 303);
  const rows = docs.map((d) =>
    trainingRow(tokenizer, d, { withTemplate: pickTemplate() < o.templateFraction }),
  );
  const meanLen = rows.reduce((a, r) => a + r.ids.length, 0) / rows.length;
  const codeShare = docs.filter((d) => d.style !== "plain").length / docs.length;
  const parameters = countParameters(model.config);
  o.log(
    `[pretrain] corpus ${docs.length} docs (${(codeShare * 100).toFixed(0)}% with code), ${meanLen.toFixed(0)} tokens/doc, vocab ${tokenizer.vocabSize}; ` +
      `model ${parameters} params (hidden ${model.config.hiddenSize}, ${model.config.numHiddenLayers} layers, ` +
      `${model.config.numAttentionHeads}q/${model.config.numKeyValueHeads}kv heads); ${o.steps} steps x ${o.batchSize} docs; setup ${formatSeconds((performance.now() - t0) / 1000)}`,
  );
  const optimizer = tf.train.adam(o.lr, 0.9, 0.98, 1e-8);
  const order = batchOrder(rows, o.batchSize, o.seed + 17);
  for (let s = 0; s < startStep; s++) order.next();
  const state = (step: number, tokensPerSecond: number): TrainerState => ({
    step,
    steps: o.steps,
    seed: o.seed,
    losses,
    tokensPerSecond,
    wallSeconds: priorSeconds + (performance.now() - t0) / 1000,
    parameters,
    corpusDocs: docs.length,
    options: {
      steps: o.steps,
      seed: o.seed,
      batchSize: o.batchSize,
      lr: o.lr,
      warmupSteps: o.warmupSteps,
      clip: o.clip,
      initStd: o.initStd,
      corpusDocs: o.corpusDocs,
      tokenizerDocs: o.tokenizerDocs,
      codeFraction: o.codeFraction,
      hardFraction: o.hardFraction,
      templateFraction: o.templateFraction,
      logEvery: o.logEvery,
      saveEvery: o.saveEvery,
      evalProblems: o.evalProblems,
      splitSeed: o.splitSeed,
      resume: o.resume,
      backend: o.backend,
    },
    architecture: o.architecture,
  });
  let windowLoss = 0;
  let windowSteps = 0;
  let windowTokens = 0;
  let windowStart = performance.now();
  let tokensPerSecond = 0;
  for (let step = startStep; step < o.steps; step++) {
    const picked = order.next().value as number[];
    const batchRows = picked.map((i) => rows[i]!);
    const batch = padBatch(
      batchRows.map((r) => r.ids),
      "right",
      tokenizer.padTokenId,
    );
    const L = batch.length;
    const mask = new Float32Array(batch.batch * L);
    let maskTokens = 0;
    batchRows.forEach((r, b) => {
      for (let t = 0; t < r.lossMask.length; t++) mask[b * L + t] = r.lossMask[t]!;
      maskTokens += r.lossMask.reduce((a, v) => a + v, 0);
    });
    (optimizer as unknown as { learningRate: number }).learningRate = learningRate(step, o);
    const { loss, grads } = await forwardBackward(
      model,
      batch,
      (mb) =>
        tf.tidy(() => {
          const m = tf.tensor2d(mask.subarray(mb.rows[0] * L, mb.rows[1] * L), [mb.batch.batch, L]);
          return tf.div(tf.neg(tf.sum(tf.mul(mb.scores.logProbs, m))), maskTokens) as tf.Scalar;
        }),
      { microBatchSize: o.batchSize },
    );
    if (!Number.isFinite(loss)) throw new Error(`pretrain: loss is ${loss} at step ${step + 1}; lower --lr`);
    await clipGradients(grads, o.clip);
    applyGradients(model, optimizer, grads);
    windowLoss += loss;
    windowSteps++;
    windowTokens += batch.batch * L;
    const done = step + 1;
    if (done % o.logEvery === 0 || done === o.steps) {
      const seconds = (performance.now() - windowStart) / 1000;
      tokensPerSecond = windowTokens / seconds;
      const mean = windowLoss / windowSteps;
      losses.push([done, Number(mean.toFixed(4))]);
      const elapsed = priorSeconds + (performance.now() - t0) / 1000;
      o.log(
        `[pretrain] step ${done}/${o.steps} loss ${mean.toFixed(4)} lr ${learningRate(step, o).toExponential(2)} ` +
          `${tokensPerSecond.toFixed(0)} tokens/s elapsed ${formatSeconds(elapsed)}`,
      );
      windowLoss = 0;
      windowSteps = 0;
      windowTokens = 0;
      windowStart = performance.now();
    }
    if (done % o.saveEvery === 0 || done === o.steps) {
      await saveModel(model, out, { tokenizer });
      writeState(out, state(done, tokensPerSecond));
    }
  }
  if (startStep >= o.steps) o.log(`[pretrain] ${out} already has ${startStep} steps; nothing to train`);
  const final = state(Math.max(startStep, o.steps), tokensPerSecond);
  await saveModel(model, out, { tokenizer });
  writeState(out, final);
  optimizer.dispose();
  model.dispose();
  return final;
}

// ---------------------------------------------------------------------------------------------------
// Measuring the base model: rollouts with one real Python call, as ToRL's C=1.

export interface RolloutRecord {
  problem: Problem;
  response: string;
  extracted: string | null;
  correct: boolean;
  usedCode: boolean;
  /** Whether the code ran without error (only meaningful when usedCode). */
  passed: boolean;
}

export interface TirFigures {
  n: number;
  accuracy: number;
  boxedRatio: number;
  codeRatio: number;
  /** Of the responses with code: the share whose code ran without error. */
  passRatio: number;
  accuracyHard: number;
  accuracyEasy: number;
  codeRatioHard: number;
  codeRatioEasy: number;
  /** Accuracy of responses that used code / that did not (null when there were none). */
  accuracyWithCode: number | null;
  accuracyWithoutCode: number | null;
  /** Of the passing code calls: the share whose boxed answer equals the printed output. */
  copiedOutputRatio: number | null;
}

/** The last \boxed{...} of a text (nested braces), or null. */
export function lastBoxed(text: string): string | null {
  const at = text.lastIndexOf("\\boxed{");
  if (at < 0) return null;
  let depth = 0;
  for (let i = at + "\\boxed".length; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(at + "\\boxed{".length, i).trim();
  }
  return null;
}

/** Runs Python code like a sandbox call: stdout, stderr, exit code; killed after `timeoutMs`. */
export function runPython(
  code: string,
  timeoutMs = 5000,
): Promise<{ stdout: string; stderr: string; returnCode: number | null }> {
  return new Promise((done, fail) => {
    const child = spawn("python3", ["-"], { stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    child.on("error", (e) => {
      clearTimeout(timer);
      fail(new Error(`cannot run python3: ${e.message}`));
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ stdout, stderr, returnCode: code });
    });
    child.stdin.end(code);
  });
}

async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

/**
 * Rollouts of `problems` with at most one tool call: generate until "```output", run the last ```python
 * block, append the observation, generate to the end. Greedy when temperature is 0.
 */
export async function tirRollouts(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  problems: readonly Problem[],
  options: { temperature: number; seed?: number; maxNewTokens?: number },
): Promise<RolloutRecord[]> {
  const maxNew = options.maxNewTokens ?? 96;
  const prompts = problems.map((p) => tokenizer.encode(tinyPrompt(p.question)));
  const first = await generate(model, tokenizer, prompts, {
    maxNewTokens: maxNew,
    temperature: options.temperature,
    seed: options.seed,
    stop: ["```output"],
  });
  const calls = first.map((g) => (g.stopReason === "```output" ? extractLastPythonBlock(g.text) : ""));
  const runs = await mapLimit(calls, 4, async (code) =>
    code ? formatObservation(toResponse(await runPython(code))) : undefined,
  );
  const again: number[] = [];
  const contexts: number[][] = [];
  const partial = first.map((g, i) => {
    if (g.stopReason !== "```output") return g.text;
    const text = g.text + wrapObservation(runs[i]?.observation ?? "No code found.");
    again.push(i);
    contexts.push([...prompts[i]!, ...tokenizer.encode(text)]);
    return text;
  });
  const second = contexts.length
    ? await generate(model, tokenizer, contexts, {
        maxNewTokens: maxNew,
        temperature: options.temperature,
        seed: (options.seed ?? 0) + 1,
      })
    : [];
  const responses = partial.slice();
  again.forEach((i, k) => {
    responses[i] += second[k]!.text;
  });
  return problems.map((problem, i) => {
    const extracted = lastBoxed(responses[i]!);
    return {
      problem,
      response: responses[i]!,
      extracted,
      correct: extracted === problem.answer,
      usedCode: runs[i] !== undefined,
      passed: runs[i]?.pass ?? false,
    };
  });
}

function toResponse(r: { stdout: string; stderr: string; returnCode: number | null }) {
  return {
    status: "Finished",
    message: "",
    run_result: { status: "Finished", return_code: r.returnCode, stdout: r.stdout, stderr: r.stderr },
  } as never;
}

const ratio = (num: number, den: number): number => (den === 0 ? 0 : num / den);
const ratioOrNull = (num: number, den: number): number | null => (den === 0 ? null : num / den);

export function tirFigures(records: readonly RolloutRecord[]): TirFigures {
  const hard = records.filter((r) => r.problem.hard);
  const easy = records.filter((r) => !r.problem.hard);
  const code = records.filter((r) => r.usedCode);
  const plain = records.filter((r) => !r.usedCode);
  const count = (xs: readonly RolloutRecord[], f: (r: RolloutRecord) => boolean) => xs.filter(f).length;
  const passing = code.filter((r) => r.passed);
  return {
    n: records.length,
    accuracy: ratio(
      count(records, (r) => r.correct),
      records.length,
    ),
    boxedRatio: ratio(
      count(records, (r) => r.extracted !== null),
      records.length,
    ),
    codeRatio: ratio(code.length, records.length),
    passRatio: ratio(passing.length, code.length),
    accuracyHard: ratio(
      count(hard, (r) => r.correct),
      hard.length,
    ),
    accuracyEasy: ratio(
      count(easy, (r) => r.correct),
      easy.length,
    ),
    codeRatioHard: ratio(
      count(hard, (r) => r.usedCode),
      hard.length,
    ),
    codeRatioEasy: ratio(
      count(easy, (r) => r.usedCode),
      easy.length,
    ),
    accuracyWithCode: ratioOrNull(
      count(code, (r) => r.correct),
      code.length,
    ),
    accuracyWithoutCode: ratioOrNull(
      count(plain, (r) => r.correct),
      plain.length,
    ),
    copiedOutputRatio: ratioOrNull(
      count(passing, (r) => {
        const m = /```output\n([\s\S]*?)\n```\n/.exec(r.response);
        return m !== null && r.extracted === m[1]!.trim();
      }),
      passing.length,
    ),
  };
}

export interface BaseEvaluation {
  model: string;
  heldOut: { splitSeed: number; count: number };
  greedy: TirFigures;
  /** Temperature-1 sampling, `samples` per problem. */
  sampled: TirFigures & { samples: number };
  examples: { question: string; answer: string; greedy: string; correct: boolean }[];
}

/** Greedy and temperature-1 figures of a model directory on the first `count` held-out problems. */
export async function evaluateBase(
  dir: string,
  count: number,
  options: { splitSeed?: number; samples?: number; seed?: number } = {},
): Promise<BaseEvaluation> {
  const { model, tokenizer } = loadPretrained(dir, { trainable: false });
  try {
    const problems = heldOutProblems(count, options.splitSeed ?? RECIPE_SPLIT_SEED);
    const greedy = await tirRollouts(model, tokenizer, problems, { temperature: 0 });
    const samples = options.samples ?? 2;
    const repeated = problems.flatMap((p) => Array.from({ length: samples }, () => p));
    const sampled = await tirRollouts(model, tokenizer, repeated, {
      temperature: 1,
      seed: options.seed ?? 1,
    });
    return {
      model: dir,
      heldOut: { splitSeed: options.splitSeed ?? RECIPE_SPLIT_SEED, count },
      greedy: tirFigures(greedy),
      sampled: { ...tirFigures(sampled), samples },
      examples: greedy.slice(0, 12).map((r) => ({
        question: r.problem.question,
        answer: r.problem.answer,
        greedy: r.response,
        correct: r.correct,
      })),
    };
  } finally {
    model.dispose();
  }
}

function pct(x: number | null): string {
  return x === null ? "-" : `${(x * 100).toFixed(1)}%`;
}

export function describeFigures(name: string, f: TirFigures): string {
  return (
    `${name}: acc ${pct(f.accuracy)} (hard ${pct(f.accuracyHard)}, easy ${pct(f.accuracyEasy)}), boxed ${pct(f.boxedRatio)}, ` +
    `code ratio ${pct(f.codeRatio)} (hard ${pct(f.codeRatioHard)}, easy ${pct(f.codeRatioEasy)}), pass ${pct(f.passRatio)}, ` +
    `acc with code ${pct(f.accuracyWithCode)} / without ${pct(f.accuracyWithoutCode)}, output copied ${pct(f.copiedOutputRatio)}`
  );
}

// ---------------------------------------------------------------------------------------------------
// The command.

const USAGE = `usage: pnpm torl pretrain [--out DIR] [--steps N] [--seed S] [options]

Pretrains the tiny Qwen2-architecture base model of the CPU recipe on a synthetic two-style corpus
(about 40% of solutions reason with a Python block and its output), saves it in HF format
(config.json, model.safetensors, tokenizer.json) every --save-every steps, then measures it on
held-out problems (greedy and temperature 1, one real Python call) into pretrain_eval.json.
The committed base model is examples/torl/assets/tiny-base (these defaults, run in resumed legs;
see examples/torl/README-pretrain.md for how, and for its measured figures).

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

function parsePretrainArgs(args: string[]): { options: Omit<PretrainOptions, "log">; evalOnly: boolean } {
  const o: Omit<PretrainOptions, "log"> = { ...DEFAULT_PRETRAIN, architecture: { ...TINY_ARCHITECTURE } };
  const { flags: f } = parseFlags(args, {
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
  });
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

export const pretrainCommand: CliCommand = {
  summary: "pretrain the tiny Qwen2-architecture base model on the two-style math corpus",
  usage: USAGE,
  async run(args) {
    const { options, evalOnly } = parsePretrainArgs(args);
    const log = (line: string) => console.log(line);
    const out = resolve(options.out);
    if (!evalOnly) {
      const state = await pretrain({ ...options, log });
      const last = state.losses.at(-1);
      log(
        `[pretrain] saved ${out}: ${state.step} steps, loss ${last?.[1] ?? "-"}, ${formatSeconds(state.wallSeconds)}`,
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
    return 0;
  },
};
