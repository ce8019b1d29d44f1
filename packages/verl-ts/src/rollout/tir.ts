/**
 * Tool-integrated reasoning (TIR) rollout, ToRL's `_tir_generate` made asynchronous and generic over the
 * Tool interface (tool.ts).
 *
 * Each sequence alternates generation rounds and tool calls. A round generates with the tool's stop
 * strings; when one matches, `tool.parse(roundText)` looks for the call in the text of that round (the
 * stop string itself excluded). With a call, the round's text is cut before the stop string, the call
 * goes to the tool and the sequence pauses; the tool's `text` is appended and the sequence continues.
 * At most C calls per sequence (`numLlmCallsAvailable`); once they are spent, rounds run without stop
 * strings. C = 0 is plain generation. A stop string with no call in the round ends the sequence.
 *
 * The engine is step-wise and continuous: one decode step for every row that has a token to feed, then
 * a yield to the event loop. A row that stops for a tool is dispatched at the end of that step (all
 * calls found in one step go to the tool as one batch, `executeBatch`), the other rows keep decoding,
 * and the row re-enters as soon as its own result is back: the appended tokens are fed through the
 * following steps (prefill of the new tokens inside the running batch), then it samples again. New
 * prompts are prefilled and join the batch when rows free up (`maxBatchSize`).
 *
 * Masks: `toolOutputMask` is 0 on every token that overlaps text appended by a tool (ToRL: the whole
 * "```output\n...\n```\n" block), 1 elsewhere, found through character offsets of the re-encoded
 * appended text, for every call (C > 1 too). The loss mask is `responseMask & toolOutputMask`.
 *
 * execution_passes: 1 when every tool call of the sequence ran without error (ToolResult.success),
 * 0 when at least one failed. A sequence without calls has 1 (nothing failed) and num_tool_calls 0;
 * read num_tool_calls to tell "no code" from "code that passed" (the reward manager does).
 */
import { TextDecoder } from "node:util";
import {
  type LmHead,
  maskFromCharRanges,
  mulberry32,
  padBatch,
  type Qwen2Model,
  type SamplingParams,
  sample,
  type Tokenizer,
} from "../models/index.js";
import type { DataProto } from "../protocol/index.js";
import {
  promptsFromDataProto,
  type RolloutBatchOptions,
  rolloutMetrics,
  rolloutTrainingBatch,
} from "./batch.js";
import { RaggedKVCache } from "./ragged-cache.js";
import { executeAll, guardTool, type Tool, type ToolCall, ToolError, type ToolResult } from "./tool.js";

export interface TirRolloutOptions {
  /** The tool the model may call; without one the rollout is plain generation. */
  tool?: Tool;
  /** C: most tool calls per sequence (veRL/ToRL `num_llm_calls_available`). Default 1; 0 = no tool. */
  numLlmCallsAvailable?: number;
  /** Most response tokens per sequence, generated and appended together (`max_response_length`). */
  maxResponseLength: number;
  /** 0 = greedy. Default 1. */
  temperature?: number;
  topP?: number;
  topK?: number;
  /** Seed; sequence i samples from its own stream derived from (seed, i). */
  seed?: number;
  /** EOS id(s); default the tokenizer's. */
  eosTokenId?: number | number[];
  ignoreEos?: boolean;
  /** Rows decoded together; further prompts join as rows finish. Default 64. */
  maxBatchSize?: number;
  /**
   * Edits a row's next-token logits in place before sampling (constrained decoding, tests).
   * `responseIds` is the response so far, appended tokens included.
   */
  logitsProcessor?: (index: number, responseIds: readonly number[], logits: Float32Array) => void;
  /** Called as sequences call tools and finish (progress, traces). */
  onEvent?: (event: TirEvent) => void;
  /** Called with each sequence as soon as it finishes (streaming), before the rollout resolves. */
  onSample?: (sample: TirSample) => void;
  /**
   * Weights that may change during the rollout (partial rollouts): see PolicyVersionSource. Each sample
   * records the lowest and highest version that sampled its tokens (`policyVersions`).
   */
  policy?: PolicyVersionSource;
  /** Stops the rollout at the next token boundary: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Record each sampled token's log-prob at the sampling temperature (1 when greedy) in `logprobs`. */
  logprobs?: boolean;
}

/**
 * The version of the weights a rollout samples with, when they may be replaced while it runs. At every
 * token boundary (between two decode steps) the engine awaits `boundary()`; true means the model's
 * weights were replaced there, and the engine recomputes the context of every running sequence (its
 * prompt and response so far) under the new weights before sampling on: the sequences keep their
 * tokens and continue under the new policy.
 */
export interface PolicyVersionSource {
  version(): number;
  boundary(): Promise<boolean>;
  /**
   * Calls `wake` when new weights wait to be applied, so that a rollout whose sequences all wait for
   * tools takes them at once (that wait is a token boundary too); returns the unsubscribe.
   */
  onUpdate?(wake: () => void): () => void;
}

export type TirEvent =
  | { type: "tool_call"; index: number; call: ToolCall }
  | { type: "tool_result"; index: number; result: ToolResult; latencyMs: number }
  | { type: "finish"; index: number; reason: "stop" | "length" };

/** One tool call in a sequence. */
export interface TirCallRecord {
  call: ToolCall;
  observation: string;
  success: boolean;
  /** [start, end) of the appended text in the sample's `text`. */
  textRange: [number, number];
  latencyMs: number;
  metrics?: Record<string, number>;
}

/** One finished sequence. Arrays are unpadded; `padRolloutBatch` builds the batch tensors. */
export interface TirSample {
  index: number;
  promptIds: number[];
  responseIds: number[];
  /** 1 for every response token, EOS included (padding only appears in padRolloutBatch). */
  responseMask: Uint8Array;
  /** 0 on tokens overlapping tool-appended text, 1 elsewhere. */
  toolOutputMask: Uint8Array;
  /** The response decoded (special tokens skipped). */
  text: string;
  /** "stop": EOS, or a stop string with no call in its round; "length": maxResponseLength reached. */
  finishReason: "stop" | "length";
  /** The EOS id, the stop string, or null for "length". */
  stopReason: string | number | null;
  numToolCalls: number;
  numToolPasses: number;
  /** 1 when every call passed (also with no calls), else 0. */
  executionPasses: number;
  /** Generation rounds (1 + calls whose result was appended). */
  numRounds: number;
  calls: TirCallRecord[];
  /** With TirRolloutOptions.logprobs: each response token's log-prob when sampled (0 on appended tokens). */
  logprobs?: number[];
  /** With TirRolloutOptions.policy: the lowest and highest weight version that sampled a token. */
  policyVersions?: [number, number];
}

export interface TirRolloutStats {
  wallMs: number;
  /** Time inside prefill and decode steps. */
  modelMs: number;
  /** Time with no row to decode, waiting for tools. */
  toolWaitMs: number;
  decodeSteps: number;
  /** Tokens sampled by the model. */
  generatedTokens: number;
  /** Tokens appended for tool results (fed, not sampled). */
  appendedTokens: number;
  toolCalls: number;
  toolBatches: number;
}

export interface TirRolloutResult {
  samples: TirSample[];
  stats: TirRolloutStats;
}

/** The tool failed as infrastructure (its promise rejected), not as a call. */
export class ToolExecutionError extends Error {
  override name = "ToolExecutionError";
  constructor(
    readonly tool: string,
    readonly indices: number[],
    override readonly cause: unknown,
  ) {
    super(
      `tool ${tool} failed for sequences [${indices.join(", ")}]: ${(cause as Error)?.message ?? String(cause)}`,
    );
  }
}

/** The error of `Tool.release` calls that failed (the rollouts' releases run after the last step). */
export function releaseFailure(tool: string, failed: unknown[]): ToolError {
  const first = failed[0];
  const more = failed.length > 1 ? ` (${failed.length - 1} more release(s) failed too)` : "";
  if (first instanceof ToolError)
    return new ToolError(first.tool, first.member, `${first.detail}${more}`, { cause: first });
  return new ToolError(tool, "release", `failed: ${(first as Error)?.message ?? String(first)}${more}`, {
    cause: first,
  });
}

export class RolloutInputError extends Error {
  override name = "RolloutInputError";
}

type RowState = "queued" | "run" | "wait" | "done";

interface Row {
  index: number;
  prompt: number[];
  response: number[];
  /** 1 = tool output, per response token. */
  toolTok: number[];
  state: RowState;
  /** Tokens to feed before the next sample (the last sampled token, or appended tokens). */
  feed: number[];
  rng: () => number;
  callsLeft: number;
  roundStart: number;
  roundText: string;
  roundEnds: number[];
  decoder: TextDecoder;
  /** Text of the response so far, as built (model text + appended text). */
  text: string;
  textAtRound: number;
  calls: TirCallRecord[];
  instanceId?: string;
  finishReason?: "stop" | "length";
  stopReason: string | number | null;
  rounds: number;
  /** Text that follows the kept tokens of a stopped round, before the appended text. */
  leftover: string;
  pendingCall?: ToolCall;
  /** Per response token: its log-prob when sampled (0 on appended tokens), with options.logprobs. */
  logprobs: number[];
  /** The lowest and highest weight version that sampled a token of this row. */
  versionMin: number;
  versionMax: number;
}

function rowSeed(seed: number, index: number): number {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  h = Math.imul(h ^ (index + 0x85ebca6b), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Runs the TIR rollout for token prompts. Resolves when every sequence finished. */
export async function tirRollout(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  prompts: ArrayLike<number>[],
  options: TirRolloutOptions,
): Promise<TirRolloutResult> {
  return new TirEngine(model, tokenizer, options).run(prompts);
}

/** A rollout of a prompt batch: the training batch, the samples it was made from, and the run's stats. */
export interface PromptBatchRollout {
  batch: DataProto;
  samples: TirSample[];
  stats: TirRolloutStats;
}

/**
 * The TIR rollout of a veRL prompt batch as the training batch the actor update reads
 * (`rolloutTrainingBatch`): prompts from `input_ids` / `attention_mask` (left-padded), the prompt width
 * kept, responses padded to maxResponseLength, rows in input order. `maskToolOutput` decides the loss
 * mask (see RolloutBatchOptions).
 */
export async function rolloutPromptBatch(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  prompts: DataProto,
  options: TirRolloutOptions & Pick<RolloutBatchOptions, "maskToolOutput">,
): Promise<PromptBatchRollout> {
  const { maskToolOutput, ...rolloutOptions } = options;
  const { samples, stats } = await tirRollout(
    model,
    tokenizer,
    promptsFromDataProto(prompts),
    rolloutOptions,
  );
  const batch = rolloutTrainingBatch(samples, {
    padTokenId: tokenizer.padTokenId,
    promptLength: prompts.batch.input_ids!.shape[1]!,
    responseLength: options.maxResponseLength,
    maskToolOutput,
  });
  return { batch, samples, stats };
}

/**
 * veRL's `generate_sequences` with tools: `rolloutPromptBatch`'s training batch (union it with the
 * input batch for the non-tensor columns) with metaInfo `rollout_metrics` (`rolloutMetrics` of the
 * samples) and `rollout_stats`.
 */
export async function generateSequences(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  prompts: DataProto,
  options: TirRolloutOptions,
): Promise<DataProto> {
  const { batch, samples, stats } = await rolloutPromptBatch(model, tokenizer, prompts, options);
  batch.metaInfo.rollout_metrics = rolloutMetrics(samples);
  batch.metaInfo.rollout_stats = { ...stats };
  return batch;
}

class TirEngine {
  private readonly tool?: Tool;
  private readonly budget: number;
  private readonly maxLen: number;
  private readonly eos: Set<number>;
  private readonly sampling: SamplingParams;
  private readonly maxBatch: number;
  private readonly stats: TirRolloutStats = {
    wallMs: 0,
    modelMs: 0,
    toolWaitMs: 0,
    decodeSteps: 0,
    generatedTokens: 0,
    appendedTokens: 0,
    toolCalls: 0,
    toolBatches: 0,
  };
  private rows: Row[] = [];
  /** Rows in cache order. */
  private inCache: Row[] = [];
  private cache?: RaggedKVCache;
  private wake?: () => void;
  private failure?: unknown;
  private inFlight = 0;

  constructor(
    private readonly model: Qwen2Model,
    private readonly tokenizer: Tokenizer,
    private readonly o: TirRolloutOptions,
  ) {
    // results and parsed calls checked as they come back: a malformed one fails naming the tool
    this.tool = o.tool ? guardTool(o.tool, { label: o.tool.name }) : undefined;
    this.budget = o.tool ? (o.numLlmCallsAvailable ?? 1) : 0;
    if (!Number.isInteger(this.budget) || this.budget < 0)
      throw new RolloutInputError(
        `numLlmCallsAvailable must be a non-negative integer, got ${o.numLlmCallsAvailable}`,
      );
    if (!Number.isInteger(o.maxResponseLength) || o.maxResponseLength < 0)
      throw new RolloutInputError(
        `maxResponseLength must be a non-negative integer, got ${o.maxResponseLength}`,
      );
    this.maxLen = o.maxResponseLength;
    this.eos = new Set(
      o.ignoreEos
        ? []
        : ([] as number[]).concat(
            o.eosTokenId ?? (tokenizer.eosTokenId !== undefined ? [tokenizer.eosTokenId] : []),
          ),
    );
    this.sampling = {
      maxNewTokens: o.maxResponseLength,
      temperature: o.temperature ?? 1,
      topP: o.topP ?? 1,
      topK: o.topK ?? 0,
    };
    this.maxBatch = Math.max(1, o.maxBatchSize ?? 64);
  }

  async run(prompts: ArrayLike<number>[]): Promise<TirRolloutResult> {
    const t0 = performance.now();
    const seed = this.o.seed ?? Math.floor(Math.random() * 2 ** 31);
    this.rows = prompts.map((p, index) => {
      if (p.length === 0) throw new RolloutInputError(`prompt ${index} is empty`);
      return {
        index,
        prompt: Array.from(p),
        response: [],
        toolTok: [],
        state: "queued",
        feed: [],
        rng: mulberry32(rowSeed(seed, index)),
        callsLeft: this.budget,
        roundStart: 0,
        roundText: "",
        roundEnds: [],
        decoder: new TextDecoder("utf-8"),
        text: "",
        textAtRound: 0,
        calls: [],
        stopReason: null,
        rounds: 1,
        leftover: "",
        logprobs: [],
        versionMin: Number.POSITIVE_INFINITY,
        versionMax: Number.NEGATIVE_INFINITY,
      };
    });
    let lmHead = this.model.lmHead(true);
    let queued = 0; // rows[0..queued) were admitted
    const signal = this.o.signal;
    const onAbort = () => this.wake?.();
    signal?.addEventListener("abort", onAbort);
    const unsubscribe = this.o.policy?.onUpdate?.(onAbort);
    let releaseError: Error | undefined;
    try {
      if (this.maxLen === 0) for (const r of this.rows) this.finish(r, "length", null);
      else
        for (;;) {
          if (this.failure) throw this.failure;
          if (signal?.aborted) throw signal.reason ?? new Error("the rollout was aborted");
          if (this.o.policy && (await this.o.policy.boundary())) {
            lmHead.weight.dispose();
            lmHead = this.model.lmHead(true);
            await this.recomputeContexts();
            await this.dispatch();
            continue;
          }
          const live = this.inCache.filter((r) => r.state !== "done").length;
          const free = this.maxBatch - live;
          const ready = this.inCache.some((r) => r.state === "run" && r.feed.length > 0);
          if (queued < this.rows.length && free > 0 && (!ready || free >= Math.ceil(this.maxBatch / 4))) {
            const take = this.rows.slice(queued, queued + free);
            queued += take.length;
            await this.admit(take);
            await this.dispatch();
            continue;
          }
          if (ready) {
            await this.step(lmHead);
            await this.dispatch();
            this.compact();
            await yieldToEventLoop();
            continue;
          }
          if (this.inFlight > 0) {
            const w0 = performance.now();
            await new Promise<void>((resolve) => {
              this.wake = resolve;
            });
            this.wake = undefined;
            this.stats.toolWaitMs += performance.now() - w0;
            continue;
          }
          break;
        }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      unsubscribe?.();
      lmHead.weight.dispose();
      this.cache?.dispose();
      if (this.tool) {
        const tool = this.tool;
        const released = await Promise.allSettled(
          this.rows.filter((r) => r.instanceId).map((r) => tool.release(r.instanceId!)),
        );
        const failed = released.flatMap((s) => (s.status === "rejected" ? [s.reason as unknown] : []));
        if (failed.length > 0) releaseError = releaseFailure(tool.name, failed);
      }
    }
    // a release that fails leaks the tool's instances (sessions, processes): the step fails on it (after
    // another failure, that one propagates from the try above)
    if (releaseError) throw releaseError;
    this.stats.wallMs = performance.now() - t0;
    return { samples: this.rows.map((r) => this.output(r)), stats: this.stats };
  }

  /** Prefills new prompts and appends them to the running batch. */
  private async admit(rows: Row[]): Promise<void> {
    const t0 = performance.now();
    const fresh = new RaggedKVCache(this.model.config, rows.length);
    const batch = padBatch(
      rows.map((r) => r.prompt),
      "left",
      this.tokenizer.padTokenId,
    );
    const logits = await this.model.prefill(batch, fresh);
    let data: Float32Array;
    try {
      data = (await logits.data()) as Float32Array;
    } finally {
      logits.dispose();
    }
    const V = data.length / rows.length;
    if (this.cache) this.cache.absorb(fresh);
    else this.cache = fresh;
    this.inCache.push(...rows);
    this.stats.modelMs += performance.now() - t0;
    rows.forEach((r, i) => {
      r.state = "run";
      this.onLogits(r, data.subarray(i * V, (i + 1) * V));
    });
  }

  /**
   * The weights changed (partial rollout): every running sequence's cache is rebuilt by one prefill of
   * its whole context under the new weights; a sequence that had tokens to feed samples its next token
   * from that prefill, as the decode step of those tokens would have. Finished rows leave the cache.
   */
  private async recomputeContexts(): Promise<void> {
    const rows = this.inCache.filter((r) => r.state !== "done");
    const sampleAfter = rows.map((r) => r.state === "run" && r.feed.length > 0);
    const contexts = rows.map((r, i) => {
      const all = r.prompt.concat(r.response);
      return sampleAfter[i] ? all : all.slice(0, all.length - r.feed.length);
    });
    if (rows.length === 0) {
      this.cache?.dispose();
      this.cache = undefined;
      this.inCache = [];
      return;
    }
    for (const [i, r] of rows.entries()) if (sampleAfter[i]) r.feed = [];
    const t0 = performance.now();
    const fresh = new RaggedKVCache(this.model.config, rows.length);
    let data: Float32Array;
    try {
      const logits = await this.model.prefill(padBatch(contexts, "left", this.tokenizer.padTokenId), fresh);
      try {
        data = (await logits.data()) as Float32Array;
      } finally {
        logits.dispose();
      }
    } catch (e) {
      fresh.dispose();
      throw e;
    }
    this.cache?.dispose();
    this.cache = fresh;
    this.inCache = rows;
    this.stats.modelMs += performance.now() - t0;
    const V = data.length / rows.length;
    rows.forEach((r, i) => {
      // a tool result that arrived during the prefill went to the old cache ("nothing appended" drops a token)
      const extra = fresh.rowLength(i) - (r.prompt.length + r.response.length - r.feed.length);
      if (!sampleAfter[i] && extra > 0) fresh.dropLast(i, extra);
      if (sampleAfter[i]) this.onLogits(r, data.subarray(i * V, (i + 1) * V));
    });
  }

  /** One decode step for every row with a token to feed. */
  private async step(lmHead: LmHead): Promise<void> {
    const t0 = performance.now();
    const cache = this.cache!;
    const n = this.inCache.length;
    const tokens = new Int32Array(n).fill(this.tokenizer.padTokenId);
    const active = new Uint8Array(n);
    const fed: Row[] = [];
    this.inCache.forEach((r, i) => {
      if (r.state === "run" && r.feed.length > 0) {
        tokens[i] = r.feed.shift()!;
        active[i] = 1;
        fed.push(r);
      }
    });
    cache.setActive(active);
    const logits = await this.model.decodeStep(tokens, cache, lmHead);
    let data: Float32Array;
    try {
      data = (await logits.data()) as Float32Array;
    } finally {
      logits.dispose();
    }
    this.stats.decodeSteps++;
    this.stats.modelMs += performance.now() - t0;
    const V = data.length / n;
    this.inCache.forEach((r, i) => {
      if (active[i] && r.feed.length === 0) this.onLogits(r, data.subarray(i * V, (i + 1) * V));
    });
  }

  /** Samples a row's next token from its logits and moves the row on. */
  private onLogits(r: Row, logits: Float32Array): void {
    if (this.o.logitsProcessor) {
      logits = logits.slice();
      this.o.logitsProcessor(r.index, r.response, logits);
    }
    const tok = sample(logits, this.sampling, r.rng);
    this.stats.generatedTokens++;
    r.response.push(tok);
    r.toolTok.push(0);
    if (this.o.logprobs) r.logprobs.push(tokenLogProb(logits, tok, this.sampling.temperature || 1));
    if (this.o.policy) {
      const v = this.o.policy.version();
      r.versionMin = Math.min(r.versionMin, v);
      r.versionMax = Math.max(r.versionMax, v);
    }
    if (this.eos.has(tok)) {
      this.flushRound(r);
      this.finish(r, "stop", tok);
      return;
    }
    if (!this.tokenizer.isSpecial(tok))
      r.roundText += r.decoder.decode(this.tokenizer.tokenBytes(tok), { stream: true });
    r.roundEnds.push(r.roundText.length);
    if (r.callsLeft > 0 && this.tool) {
      const hit = findStop(
        r.roundText,
        this.tool.stop,
        r.roundEnds.length >= 2 ? r.roundEnds[r.roundEnds.length - 2]! : 0,
      );
      if (hit) {
        this.onToolStop(r, hit.at, hit.stop);
        return;
      }
    }
    if (r.response.length >= this.maxLen) {
      this.flushRound(r);
      this.finish(r, "length", null);
      return;
    }
    r.feed.push(tok);
  }

  private onToolStop(r: Row, at: number, stop: string): void {
    const before = r.roundText.slice(0, at);
    const call = this.tool!.parse(before);
    if (!call) {
      this.flushRound(r);
      this.finish(r, "stop", stop);
      return;
    }
    // Keep the round's tokens that end before the stop string; the rest of their text before the stop
    // string is re-encoded with the appended text.
    const roundIds = r.response.slice(r.roundStart);
    let keep = 0;
    while (keep < roundIds.length && r.roundEnds[keep]! <= at) keep++;
    while (keep > 0 && !before.startsWith(this.tokenizer.decode(roundIds.slice(0, keep), true))) keep--;
    const keptText = this.tokenizer.decode(roundIds.slice(0, keep), true);
    // Tokens fed to the cache this round: all sampled ones but the last.
    const fedThisRound = roundIds.length - 1;
    this.cache!.dropLast(this.inCache.indexOf(r), fedThisRound - keep);
    r.response.length = r.roundStart + keep;
    r.toolTok.length = r.roundStart + keep;
    if (this.o.logprobs) r.logprobs.length = r.response.length;
    r.leftover = before.slice(keptText.length);
    r.text += keptText;
    r.roundText = "";
    r.roundEnds = [];
    r.decoder = new TextDecoder("utf-8");
    if (r.response.length >= this.maxLen) {
      this.finish(r, "length", null);
      return;
    }
    r.state = "wait";
    r.pendingCall = call;
    this.o.onEvent?.({ type: "tool_call", index: r.index, call });
  }

  /** Sends the calls found in the last step to the tool, as one batch, without waiting for them. */
  private async dispatch(): Promise<void> {
    const batch = this.inCache.filter((r) => r.state === "wait" && r.pendingCall);
    if (batch.length === 0) return;
    const tool = this.tool!;
    for (const r of batch) if (!r.instanceId) r.instanceId = await tool.create();
    const items = batch.map((r) => ({ instanceId: r.instanceId!, call: r.pendingCall! }));
    for (const r of batch) r.pendingCall = undefined;
    this.inFlight++;
    this.stats.toolBatches++;
    this.stats.toolCalls += items.length;
    const t0 = performance.now();
    executeAll(tool, items).then(
      (results) => {
        const latencyMs = performance.now() - t0;
        if (results.length !== batch.length) {
          this.fail(
            new ToolExecutionError(
              tool.name,
              batch.map((r) => r.index),
              new Error(`${results.length} results for ${batch.length} calls`),
            ),
          );
          return;
        }
        try {
          for (const [i, r] of batch.entries()) this.onResult(r, items[i]!.call, results[i]!, latencyMs);
        } catch (e) {
          this.fail(e);
          return;
        }
        this.inFlight--;
        this.wake?.();
      },
      (e) =>
        this.fail(
          new ToolExecutionError(
            tool.name,
            batch.map((r) => r.index),
            e,
          ),
        ),
    );
  }

  private fail(e: unknown): void {
    this.failure ??= e;
    this.inFlight--;
    this.wake?.();
  }

  private onResult(r: Row, call: ToolCall, result: ToolResult, latencyMs: number): void {
    this.o.onEvent?.({ type: "tool_result", index: r.index, result, latencyMs });
    if (r.state !== "wait") return;
    const appendText = (r.leftover + result.text).normalize("NFC");
    const leftoverLen = r.leftover.normalize("NFC").length;
    const enc = this.tokenizer.encodeWithOffsets(appendText);
    const isTool = maskFromCharRanges(enc.offsets, [[leftoverLen, appendText.length]]);
    const room = this.maxLen - r.response.length;
    const ids = enc.ids.slice(0, room);
    r.callsLeft--;
    const textStart = r.text.length + r.leftover.length;
    r.calls.push({
      call,
      observation: result.observation,
      success: result.success,
      textRange: [textStart, textStart + result.text.length],
      latencyMs,
      ...(result.metrics ? { metrics: result.metrics } : {}),
    });
    r.text += r.leftover + result.text;
    r.leftover = "";
    for (let i = 0; i < ids.length; i++) {
      r.response.push(ids[i]!);
      r.toolTok.push(isTool[i]!);
      if (this.o.logprobs) r.logprobs.push(0);
    }
    this.stats.appendedTokens += ids.length;
    if (r.response.length >= this.maxLen) {
      this.finish(r, "length", null);
      return;
    }
    r.rounds++;
    r.roundStart = r.response.length;
    r.textAtRound = r.text.length;
    r.state = "run";
    if (ids.length > 0) r.feed = ids;
    else {
      // Nothing appended: re-feed the last token of the context to get fresh logits.
      const ctx = r.response.length > 0 ? r.response[r.response.length - 1]! : r.prompt[r.prompt.length - 1]!;
      this.cache!.dropLast(this.inCache.indexOf(r), 1);
      r.feed = [ctx];
    }
  }

  /** Moves the current round's text into the sequence text. */
  private flushRound(r: Row): void {
    r.text += r.roundText + r.decoder.decode();
    r.roundText = "";
    r.roundEnds = [];
  }

  private finish(r: Row, reason: "stop" | "length", stopReason: string | number | null): void {
    r.state = "done";
    r.finishReason = reason;
    r.stopReason = stopReason;
    r.feed = [];
    this.o.onEvent?.({ type: "finish", index: r.index, reason });
    this.o.onSample?.(this.output(r));
  }

  /** Drops finished rows from the cache once they are a quarter of it. */
  private compact(): void {
    const keep: number[] = [];
    this.inCache.forEach((r, i) => {
      if (r.state !== "done") keep.push(i);
    });
    if (keep.length === this.inCache.length || keep.length > this.inCache.length * 0.75) return;
    this.cache!.keepRows(keep);
    this.inCache = keep.map((i) => this.inCache[i]!);
  }

  private output(r: Row): TirSample {
    const passes = r.calls.filter((c) => c.success).length;
    const text = this.tokenizer.decode(r.response, true);
    for (const c of r.calls)
      c.textRange = [Math.min(c.textRange[0], text.length), Math.min(c.textRange[1], text.length)];
    return {
      index: r.index,
      promptIds: r.prompt,
      responseIds: r.response,
      responseMask: new Uint8Array(r.response.length).fill(1),
      toolOutputMask: Uint8Array.from(r.toolTok, (t) => 1 - t),
      text,
      finishReason: r.finishReason ?? "length",
      stopReason: r.stopReason,
      numToolCalls: r.calls.length,
      numToolPasses: passes,
      executionPasses: passes === r.calls.length ? 1 : 0,
      numRounds: r.rounds,
      calls: r.calls,
      ...(this.o.logprobs ? { logprobs: r.logprobs } : {}),
      ...(this.o.policy ? { policyVersions: this.versionsOf(r) } : {}),
    };
  }

  /** A row's version range; a row that sampled nothing gets the current version. */
  private versionsOf(r: Row): [number, number] {
    if (r.versionMin <= r.versionMax) return [r.versionMin, r.versionMax];
    const v = this.o.policy!.version();
    return [v, v];
  }
}

/** log softmax(logits / temperature) at tok. */
function tokenLogProb(logits: Float32Array, tok: number, temperature: number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let s = 0;
  for (let i = 0; i < logits.length; i++) s += Math.exp((logits[i]! - max) / temperature);
  return (logits[tok]! - max) / temperature - Math.log(s);
}

/** The earliest stop string in `text` that ends after `from` (matches across token boundaries). */
function findStop(text: string, stops: string[], from: number): { at: number; stop: string } | undefined {
  let best: { at: number; stop: string } | undefined;
  for (const s of stops) {
    if (s.length === 0) continue;
    const at = text.indexOf(s, Math.max(0, from - s.length + 1));
    if (at >= 0 && (!best || at < best.at)) best = { at, stop: s };
  }
  return best;
}
