/**
 * The pretraining loop: Adam with linear warmup then cosine decay to 10% of the peak rate, a global
 * gradient-norm clip, loss on the response tokens only, and an HF model directory with
 * trainer_state.json (the run's progress, read back by --resume) saved every `saveEvery` steps.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { RECIPE_SPLIT_SEED, seededRandom } from "../data/index.js";
import {
  applyGradients,
  type BackendName,
  countParameters,
  forwardBackward,
  loadPretrained,
  padBatch,
  type Qwen2Config,
  Qwen2Model,
  saveModel,
  selectBackend,
  type Tokenizer,
} from "../models/index.js";
import { batchOrder, type PretrainCorpusOptions, pretrainCorpus } from "./pretrain-corpus.js";
import { buildTinyTokenizer, TINY_ARCHITECTURE, type TinyArchitecture, trainingRow } from "./tiny-model.js";

export interface PretrainOptions extends PretrainCorpusOptions {
  out: string;
  steps: number;
  batchSize: number;
  /** Peak learning rate (Adam); warmup then cosine decay to 10% of it. */
  lr: number;
  warmupSteps: number;
  /** Global gradient-norm clip. */
  clip: number;
  /** Std of the normal initialisation of weight matrices and embeddings. */
  initStd: number;
  /** Documents the tokenizer learns its merges from. */
  tokenizerDocs: number;
  /** Share of rows with the full instruction template; the rest start at the question (see trainingRow). */
  templateFraction: number;
  architecture: TinyArchitecture;
  logEvery: number;
  saveEvery: number;
  /** Held-out problems to evaluate at the end (0: none). */
  evalProblems: number;
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

/**
 * How far a pretraining run got and what it measured on the way; saved as trainer_state.json (the HF
 * file name) next to the model and read back by --resume.
 */
export interface PretrainProgress {
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

/** The Adam step size at `step`: linear warmup to `lr`, then cosine decay to a tenth of it at `steps`. */
export function warmupCosineLearningRate(
  step: number,
  o: Pick<PretrainOptions, "lr" | "warmupSteps" | "steps">,
): number {
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

const PROGRESS_FILE = "trainer_state.json";

function writeProgress(out: string, progress: PretrainProgress): void {
  writeFileSync(join(out, PROGRESS_FILE), `${JSON.stringify(progress, null, 2)}\n`);
}

export function formatSeconds(s: number): string {
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${s.toFixed(1)}s`;
}

/** Trains (or resumes) and saves the model; returns the run's final progress. */
export async function pretrain(o: PretrainOptions): Promise<PretrainProgress> {
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
  const progressFile = join(out, PROGRESS_FILE);
  if (o.resume && existsSync(progressFile)) {
    const prior = JSON.parse(readFileSync(progressFile, "utf8")) as PretrainProgress;
    ({ model, tokenizer } = loadPretrained(out));
    startStep = prior.step;
    losses = prior.losses;
    priorSeconds = prior.wallSeconds;
    o.log(`[pretrain] resuming ${out} at step ${startStep} (optimizer moments start fresh)`);
  } else {
    if (o.resume) o.log(`[pretrain] nothing to resume in ${out} (no ${PROGRESS_FILE}); starting fresh`);
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
  const progress = (step: number, tokensPerSecond: number): PretrainProgress => ({
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
    const lr = warmupCosineLearningRate(step, o);
    (optimizer as unknown as { learningRate: number }).learningRate = lr;
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
        `[pretrain] step ${done}/${o.steps} loss ${mean.toFixed(4)} lr ${lr.toExponential(2)} ` +
          `${tokensPerSecond.toFixed(0)} tokens/s elapsed ${formatSeconds(elapsed)}`,
      );
      windowLoss = 0;
      windowSteps = 0;
      windowTokens = 0;
      windowStart = performance.now();
    }
    if (done % o.saveEvery === 0 || done === o.steps) {
      await saveModel(model, out, { tokenizer });
      writeProgress(out, progress(done, tokensPerSecond));
    }
  }
  if (startStep >= o.steps) o.log(`[pretrain] ${out} already has ${startStep} steps; nothing to train`);
  const final = progress(Math.max(startStep, o.steps), tokensPerSecond);
  await saveModel(model, out, { tokenizer });
  writeProgress(out, final);
  optimizer.dispose();
  model.dispose();
  return final;
}
