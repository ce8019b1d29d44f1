/**
 * The tiny base model of the CPU recipe: its architecture, its tokenizer, how a corpus document becomes a
 * training row, and where the committed pretrained weights live.
 *
 * A document is the ToRL prompt (tir_base_0309 with the question) followed by a response and EOS. The
 * loss covers the response only, and inside it not the tool's observation: the model learns to write
 * "```output" (the rollout's stop string) but never to predict what Python prints, exactly as RL will
 * train it (observation tokens are masked there too).
 */
import { fileURLToPath } from "node:url";
import { renderPrompt } from "../data/index.js";
import { buildByteBpeTokenizer, maskFromCharRanges, Tokenizer } from "../models/index.js";
import type { CorpusDocument } from "./corpus.js";

/** The pretrained tiny base model this package ships (HF format: config.json, model.safetensors, tokenizer.json), at assets/tiny-base of the package. */
export const TINY_BASE_DIR = fileURLToPath(new URL("../../assets/tiny-base", import.meta.url));

/** Architecture of the tiny base: Qwen2 (GQA, q/k/v biases, tied embeddings), ~0.2M parameters with the 1646-token vocabulary. */
export interface TinyArchitecture {
  hiddenSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  intermediateSize: number;
  /** Target size of the byte-level BPE vocabulary (before the 3 special tokens). */
  vocabSize: number;
}

export const TINY_ARCHITECTURE: TinyArchitecture = {
  hiddenSize: 64,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 192,
  vocabSize: 600,
};

/** The ToRL prompt of a question (tir_base_0309, raw text). */
export function tinyPrompt(question: string): string {
  return renderPrompt("tir_base_0309", [{ role: "user", content: question }]);
}

/**
 * Builds the tokenizer: byte-level BPE learned from corpus documents (prompt and response text), with
 * numbers split into groups of up to three digits (like Llama 3's and GPT-4's tokenizers) instead of
 * Qwen2's single digits, and every 1-3 digit group in the vocabulary.
 *
 * Why: copying a number (from the question into code, from the output into \boxed{}) is then copying
 * one or two tokens, which a two-layer model learns quickly; with single digits it needs an induction
 * circuit that did not form within the CPU budget (measured: teacher-forced digit copying stayed at
 * chance after 7k documents).
 */
export function buildTinyTokenizer(
  docs: readonly CorpusDocument[],
  vocabSize = TINY_ARCHITECTURE.vocabSize,
): Tokenizer {
  const text = docs.map((d) => tinyPrompt(d.problem.question) + d.response).join("\n");
  return withDigitGroups(buildByteBpeTokenizer({ corpus: text, vocabSize }));
}

/** A byte-level BPE tokenizer whose pre-tokenizer keeps up to three digits together, with all 1110 groups. */
export function withDigitGroups(base: Tokenizer): Tokenizer {
  const json = structuredClone(base.json) as Record<string, any>;
  const split = json.pre_tokenizer?.pretokenizers?.[0];
  const single = "\\p{N}|";
  if (
    split?.type !== "Split" ||
    typeof split.pattern?.Regex !== "string" ||
    !split.pattern.Regex.includes(single)
  )
    throw new Error("withDigitGroups: expected a byte-level BPE tokenizer with Qwen2's single-digit split");
  split.pattern.Regex = split.pattern.Regex.replace(single, "\\p{N}{1,3}|");
  const vocab = json.model.vocab as Record<string, number>;
  const merges = json.model.merges as [string, string][];
  let next = Math.max(...Object.values(vocab)) + 1;
  const digits = [..."0123456789"];
  for (const a of digits)
    for (const b of digits) {
      vocab[a + b] = next++;
      merges.push([a, b]);
    }
  // A three-digit group merges either way round, whichever pair BPE ranks first.
  for (const a of digits)
    for (const b of digits)
      for (const c of digits) {
        vocab[a + b + c] = next++;
        merges.push([a + b, c], [a, b + c]);
      }
  json.added_tokens = (json.added_tokens as { id: number }[]).map((t, i) => ({ ...t, id: next + i }));
  return new Tokenizer(json, base.config);
}

/** One training row: token ids and a 0/1 loss mask over them (1 = predict this token). */
export interface TrainingRow {
  ids: number[];
  lossMask: Uint8Array;
}

/** The character range of each observation's content (after "```output", through its closing fence). */
export function observationRanges(response: string): [number, number][] {
  const ranges: [number, number][] = [];
  const open = "```output";
  let from = 0;
  for (;;) {
    const at = response.indexOf(open, from);
    if (at < 0) break;
    const start = at + open.length;
    const close = response.indexOf("\n```\n", start);
    const end = close < 0 ? response.length : close + "\n```\n".length;
    ranges.push([start, end]);
    from = end;
  }
  return ranges;
}

/**
 * Tokenises a document as generation sees it: the prompt encoded alone, then the response, then EOS.
 * The mask covers response tokens (and EOS) outside observations. With `withTemplate: false` the
 * prompt keeps only its tail from the question on ("<question>\nAssistant:\n"): the fixed instruction
 * text is half of every row, and rotary attention only sees relative positions, so short rows teach
 * the same question-to-answer patterns at half the cost (pretraining mixes both kinds).
 */
export function trainingRow(
  tokenizer: Tokenizer,
  doc: CorpusDocument,
  options: { withTemplate?: boolean } = {},
): TrainingRow {
  const eos = tokenizer.eosTokenId;
  if (eos === undefined) throw new Error("the tokenizer has no EOS token");
  const full = tinyPrompt(doc.problem.question);
  const text =
    options.withTemplate === false ? full.slice(full.lastIndexOf(`\n${doc.problem.question}\n`) + 1) : full;
  const prompt = tokenizer.encode(text);
  const { ids: response, offsets } = tokenizer.encodeWithOffsets(doc.response);
  const observed = maskFromCharRanges(offsets, observationRanges(doc.response));
  const ids = [...prompt, ...response, eos];
  const lossMask = new Uint8Array(ids.length);
  for (let i = 0; i < response.length; i++) lossMask[prompt.length + i] = observed[i] ? 0 : 1;
  lossMask[ids.length - 1] = 1;
  return { ids, lossMask };
}
