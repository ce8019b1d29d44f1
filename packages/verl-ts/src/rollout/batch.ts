/**
 * Rollout samples as veRL batch columns: prompts left-padded, responses right-padded, masks, position
 * ids, and ToRL's per-row tool columns; plus the tool metrics the trainer logs.
 */
import { DataProto } from "../protocol/index.js";
import type { TirSample } from "./tir.js";

export interface RolloutBatchArrays {
  batchSize: number;
  promptLength: number;
  responseLength: number;
  /** [B, P] left-padded prompt ids. */
  prompts: Int32Array;
  /** [B, R] right-padded response ids. */
  responses: Int32Array;
  /** [B, P + R] prompts then responses. */
  inputIds: Int32Array;
  /** [B, P + R] 1 on real tokens. */
  attentionMask: Uint8Array;
  /** [B, P + R] real-token counts from 0 (padding keeps 0 on the left, continues on the right). */
  positionIds: Int32Array;
  /** [B, R] 1 on real response tokens, EOS included. */
  responseMask: Uint8Array;
  /** [B, R] 0 on tool output, 1 elsewhere (padding included: multiply with responseMask). */
  toolOutputMask: Uint8Array;
  /** [B] 1 when every call passed (also with none). */
  executionPasses: Float32Array;
  /** [B] tool calls per row. */
  numToolCalls: Int32Array;
  /** Decoded responses, per row. */
  responseText: string[];
  finishReasons: string[];
}

/**
 * Pads samples into batch arrays. `promptLength` / `responseLength` default to the longest row;
 * a row longer than a given length is an error (the rollout already respects max_response_length).
 */
export function padRolloutBatch(
  samples: TirSample[],
  options: { padTokenId: number; promptLength?: number; responseLength?: number },
): RolloutBatchArrays {
  const B = samples.length;
  const P = options.promptLength ?? Math.max(0, ...samples.map((s) => s.promptIds.length));
  const R = options.responseLength ?? Math.max(0, ...samples.map((s) => s.responseIds.length));
  const pad = options.padTokenId;
  const prompts = new Int32Array(B * P).fill(pad);
  const responses = new Int32Array(B * R).fill(pad);
  const inputIds = new Int32Array(B * (P + R));
  const attentionMask = new Uint8Array(B * (P + R));
  const positionIds = new Int32Array(B * (P + R));
  const responseMask = new Uint8Array(B * R);
  const toolOutputMask = new Uint8Array(B * R).fill(1);
  samples.forEach((s, b) => {
    const p = s.promptIds.length;
    const r = s.responseIds.length;
    if (p > P) throw new RangeError(`sample ${s.index}: prompt has ${p} tokens, more than promptLength ${P}`);
    if (r > R)
      throw new RangeError(`sample ${s.index}: response has ${r} tokens, more than responseLength ${R}`);
    prompts.set(s.promptIds, b * P + P - p);
    responses.set(s.responseIds, b * R);
    responseMask.fill(1, b * R, b * R + r);
    toolOutputMask.set(s.toolOutputMask, b * R);
    const W = P + R;
    inputIds.set(prompts.subarray(b * P, (b + 1) * P), b * W);
    inputIds.set(responses.subarray(b * R, (b + 1) * R), b * W + P);
    attentionMask.fill(1, b * W + P - p, b * W + P + r);
    // veRL: clip(cumsum(mask) - 1, 0) over the prompt and response, then counting on over right padding.
    for (let t = P - p, pos = 0; t < W; t++, pos++) positionIds[b * W + t] = pos;
  });
  return {
    batchSize: B,
    promptLength: P,
    responseLength: R,
    prompts,
    responses,
    inputIds,
    attentionMask,
    positionIds,
    responseMask,
    toolOutputMask,
    executionPasses: Float32Array.from(samples, (s) => s.executionPasses),
    numToolCalls: Int32Array.from(samples, (s) => s.numToolCalls),
    responseText: samples.map((s) => s.text),
    finishReasons: samples.map((s) => s.finishReason),
  };
}

/**
 * Tool metrics of a batch (ToRL's analysis), as fractions:
 * - tool/code_ratio: rows with at least one call;
 * - tool/pass_ratio: calls that passed, over all calls (0 without calls);
 * - tool/calls_per_response, tool/observation_tokens_per_response: means;
 * - response_length/mean, response_length/clip_ratio (rows that hit the length limit).
 */
export function rolloutMetrics(samples: TirSample[]): Record<string, number> {
  const n = Math.max(1, samples.length);
  const calls = samples.reduce((a, s) => a + s.numToolCalls, 0);
  const passes = samples.reduce((a, s) => a + s.numToolPasses, 0);
  const obs = samples.reduce((a, s) => a + s.toolOutputMask.reduce((x, m) => x + (1 - m), 0), 0);
  return {
    "tool/code_ratio": samples.filter((s) => s.numToolCalls > 0).length / n,
    "tool/pass_ratio": calls === 0 ? 0 : passes / calls,
    "tool/calls_per_response": calls / n,
    "tool/observation_tokens_per_response": obs / n,
    "response_length/mean": samples.reduce((a, s) => a + s.responseIds.length, 0) / n,
    "response_length/clip_ratio": samples.filter((s) => s.finishReason === "length").length / n,
  };
}

export interface RolloutBatchOptions {
  padTokenId: number;
  /** Prompt width P; default the longest prompt. A longer prompt is an error. */
  promptLength?: number;
  /** Response width R; default the longest response. A longer response is an error. */
  responseLength?: number;
  /**
   * loss_mask = response_mask & tool_output_mask when true (default; ToRL and veRL's
   * `actor.mask_tool_output`), = response_mask when false (tool output is trained on too).
   */
  maskToolOutput?: boolean;
}

/**
 * A rollout as the training batch the actor update reads: the one conversion from samples to batch
 * tensors, used by the stock worker's `generateSequences` and by hand-written algorithms alike.
 * Rows are in `sample.index` order. With P the prompt width and R the response width:
 *
 * | key                | dtype      | shape      | content                                                            |
 * | ------------------ | ---------- | ---------- | ------------------------------------------------------------------ |
 * | `prompts`          | Int32Array | [B, P]     | prompt ids, left-padded with padTokenId                           |
 * | `responses`        | Int32Array | [B, R]     | response ids (generated and tool-appended), right-padded          |
 * | `input_ids`        | Int32Array | [B, P + R] | prompts then responses: the response starts at column P           |
 * | `attention_mask`   | Uint8Array | [B, P + R] | 1 on real tokens                                                   |
 * | `position_ids`     | Int32Array | [B, P + R] | real-token count from 0, continuing over the right padding (veRL)  |
 * | `response_mask`    | Uint8Array | [B, R]     | 1 on real response tokens, EOS included                            |
 * | `tool_output_mask` | Uint8Array | [B, R]     | 0 on tokens of tool-appended text, 1 elsewhere (padding too)       |
 * | `loss_mask`        | Uint8Array | [B, R]     | response_mask & tool_output_mask (see `maskToolOutput`)            |
 * | `execution_passes` | Float32Array | [B]      | 1 when every tool call passed, also with no calls                 |
 * | `num_tool_calls`   | Int32Array | [B]        | tool calls per row                                                 |
 * | `num_tool_passes`  | Int32Array | [B]        | calls that passed                                                  |
 *
 * Non-tensor: `response_text` (decoded response), `finish_reason` ("stop" | "length"),
 * `tool_observations` (per row, the observations of the calls that passed). `responseOffset(batch)`
 * gives P. Masks are Uint8Array: convert with `Float32Array.from(mask)` before multiplying with
 * float tensors. Log-probs of `input_ids` (`tokenLogProbs`: column t scores token t) for the
 * response are columns [P, P + R), aligned with `loss_mask`.
 */
export function rolloutTrainingBatch(samples: TirSample[], options: RolloutBatchOptions): DataProto {
  const ordered = [...samples].sort((a, b) => a.index - b.index);
  const b = padRolloutBatch(ordered, options);
  const B = b.batchSize;
  const P = b.promptLength;
  const R = b.responseLength;
  const maskTool = options.maskToolOutput ?? true;
  const lossMask = new Uint8Array(B * R);
  for (let i = 0; i < lossMask.length; i++)
    lossMask[i] = b.responseMask[i]! & (maskTool ? b.toolOutputMask[i]! : 1);
  return DataProto.fromDict(
    {
      prompts: { data: b.prompts, shape: [B, P] },
      responses: { data: b.responses, shape: [B, R] },
      input_ids: { data: b.inputIds, shape: [B, P + R] },
      attention_mask: { data: b.attentionMask, shape: [B, P + R] },
      position_ids: { data: b.positionIds, shape: [B, P + R] },
      response_mask: { data: b.responseMask, shape: [B, R] },
      tool_output_mask: { data: b.toolOutputMask, shape: [B, R] },
      loss_mask: { data: lossMask, shape: [B, R] },
      execution_passes: { data: b.executionPasses, shape: [B] },
      num_tool_calls: { data: b.numToolCalls, shape: [B] },
      num_tool_passes: { data: Int32Array.from(ordered, (s) => s.numToolPasses), shape: [B] },
    },
    {
      response_text: b.responseText,
      finish_reason: b.finishReasons,
      tool_observations: ordered.map((s) => s.calls.filter((c) => c.success).map((c) => c.observation)),
    },
  );
}

/** Thrown when a batch lacks the columns that locate its responses. */
export class RolloutBatchError extends Error {
  override name = "RolloutBatchError";
}

/**
 * The column of `input_ids` where the responses begin (the prompt width P): `input_ids` is [B, P + R],
 * `responses` (or `response_mask`) [B, R].
 */
export function responseOffset(data: DataProto): number {
  const ids = data.batch.input_ids;
  const resp = data.batch.responses ?? data.batch.response_mask;
  if (ids?.shape.length !== 2 || resp?.shape.length !== 2)
    throw new RolloutBatchError(
      'responseOffset: need 2-d "input_ids" and "responses" (or "response_mask") tensors',
    );
  const offset = ids.shape[1]! - resp.shape[1]!;
  if (offset < 0)
    throw new RolloutBatchError(
      `responseOffset: input_ids is [${ids.shape}] but the responses are [${resp.shape}], wider`,
    );
  return offset;
}

/**
 * `rolloutTrainingBatch` plus metaInfo `rollout_metrics` (`rolloutMetrics` of the samples), for a
 * rollout run outside the trainer.
 */
export function rolloutDataProto(samples: TirSample[], options: RolloutBatchOptions): DataProto {
  const out = rolloutTrainingBatch(samples, options);
  out.metaInfo.rollout_metrics = rolloutMetrics(samples);
  return out;
}

/**
 * The prompts of a veRL batch as unpadded token rows: `input_ids` [B, P] where `attention_mask` is 1
 * (left padding, as veRL's dataset gives them).
 */
export function promptsFromDataProto(data: DataProto): number[][] {
  const ids = data.batch.input_ids;
  const mask = data.batch.attention_mask;
  if (!ids || ids.shape.length < 2 || ids.shape.length > 2)
    throw new RangeError('promptsFromDataProto: need a 2-d "input_ids" tensor');
  const [B, P] = ids.shape as [number, number];
  if (mask && (mask.shape[0] !== B || mask.shape[1] !== P))
    throw new RangeError(
      `promptsFromDataProto: attention_mask is [${mask.shape}] but input_ids is [${B}, ${P}]`,
    );
  return Array.from({ length: B }, (_, b) => {
    const row: number[] = [];
    for (let t = 0; t < P; t++)
      if (!mask || Number(mask.data[b * P + t])) row.push(Number(ids.data[b * P + t]));
    return row;
  });
}
