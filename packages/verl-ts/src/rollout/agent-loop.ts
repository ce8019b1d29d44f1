/**
 * veRL's multi-turn tool agent loop for chat models: several tools, hermes-format calls, tool responses
 * as `tool` turns of the model's own chat template. It sits beside the text-trigger TIR rollout (tir.ts),
 * which stays ToRL's mode for base models.
 *
 * A conversation alternates assistant turns and tool turns:
 *
 * 1. Assistant turn: the model generates from the whole context until its end-of-turn token (EOS) or
 *    the response budget. All conversations that are still going generate their turn together, through
 *    the TIR engine (`tirRollout` without a tool): a step-wise continuous batch over the model.
 * 2. The turn's `<tool_call>` blocks are parsed (hermes.ts). No block: the conversation ends. Each
 *    block is run by its tool, or answered with the error the model made (bad JSON, unknown tool,
 *    arguments that do not match the schema). Calls beyond `maxParallelCalls` in one turn are not run:
 *    they are answered with an error saying so (veRL drops them without a word; here the model learns
 *    why, and every call keeps its response).
 * 3. Each response, cut to `maxToolResponseLength` characters on `toolResponseTruncateSide` (veRL's
 *    rule), becomes a `tool` message; the chat template renders the tool turns and the next assistant
 *    header, and those tokens are appended. If they do not fit in the response budget, the
 *    conversation ends there ("length"), as veRL's agent loop does.
 * 4. At most `maxAssistantTurns` assistant turns (null: no limit other than the budget); the turn that
 *    reaches the limit ends the conversation, its calls unrun.
 *
 * Loss masks: `toolOutputMask` is 1 exactly on the tokens the model generated (every assistant turn,
 * its end-of-turn token included) and 0 on everything the template and the tools added. Calls: each
 * call record's `textRange` is the range of the tool turns that answer it in the sample's text.
 *
 * Sampling: turn t samples with seed (seed, t); within a turn the conversations still going are
 * numbered in order, so results are reproducible for a given batch (unlike tirRollout, a row's stream
 * depends on which other rows are still going).
 */
import type { Qwen2Model } from "../models/qwen2.js";
import type { Tokenizer } from "../models/tokenizer.js";
import type { ChatTemplate, ChatTurn } from "./chat-template.js";
import { parseHermesToolCalls } from "./hermes.js";
import {
  RolloutInputError,
  releaseFailure,
  type TirCallRecord,
  type TirSample,
  ToolExecutionError,
  tirRollout,
} from "./tir.js";
import { executeAll, guardTool, type OpenAIFunctionSchema, type ToolCall, type ToolResult } from "./tool.js";
import type { ConfiguredTool } from "./tool-config.js";

/** veRL's `multi_turn.tool_response_truncate_side`: which part of a long response is kept. */
export type TruncateSide = "left" | "middle" | "right";

export interface AgentLoopOptions {
  /** The tools, keyed by the function name the model calls (tool-config.ts builds this map). */
  tools: ReadonlyMap<string, ConfiguredTool>;
  /** The model's chat template: renders the tool turns. */
  chatTemplate: ChatTemplate;
  /** Most response tokens per conversation: assistant and tool turns together. */
  maxResponseLength: number;
  /** veRL `max_assistant_turns`; null or undefined: no limit but the budget. */
  maxAssistantTurns?: number | null;
  /** veRL `max_parallel_calls`: calls run per assistant turn. Default 1. */
  maxParallelCalls?: number;
  /** veRL `max_tool_response_length`, in characters. Default 256. */
  maxToolResponseLength?: number;
  /** veRL `tool_response_truncate_side`. Default "middle". */
  toolResponseTruncateSide?: TruncateSide;
  temperature?: number;
  topP?: number;
  topK?: number;
  seed?: number;
  /** End-of-turn token id(s); default the tokenizer's EOS. */
  eosTokenId?: number | number[];
  /** Conversations decoded together. Default 64. */
  maxBatchSize?: number;
  /** Edits a row's next-token logits before sampling; `responseIds` is the whole response so far. */
  logitsProcessor?: (index: number, responseIds: readonly number[], logits: Float32Array) => void;
}

/** One finished conversation: a TirSample (so `rolloutTrainingBatch` takes it) plus its turns. */
export interface AgentSample extends TirSample {
  /** veRL's num_turns: the prompt, the assistant turns and the tool-response turns. */
  numTurns: number;
  assistantTurns: number;
  /** Calls answered with an error before reaching a tool (malformed, unknown, over the limit). */
  numMalformedCalls: number;
}

export interface AgentLoopResult {
  samples: AgentSample[];
  stats: { wallMs: number; assistantTurns: number; toolCalls: number; generatedTokens: number };
}

/** veRL's truncation of a tool response longer than `limit` characters. */
export function truncateToolResponse(text: string, limit: number, side: TruncateSide): string {
  if (text.length <= limit) return text;
  if (side === "left") return `${text.slice(0, limit)}...(truncated)`;
  if (side === "right") return `(truncated)...${text.slice(text.length - limit)}`;
  const half = Math.floor(limit / 2);
  return `${text.slice(0, half)}...(truncated)...${text.slice(text.length - half)}`;
}

interface Conversation {
  index: number;
  prompt: number[];
  response: number[];
  /** 1 on tokens the model generated. */
  own: number[];
  assistantTurns: number;
  toolTurns: number;
  calls: (TirCallRecord & { tokenRange: [number, number] })[];
  malformed: number;
  /** Tool instances of this conversation, by tool name. */
  instances: Map<string, string>;
  finishReason?: "stop" | "length";
  stopReason: string | number | null;
}

/** One call of a turn: the parsed call or the error the model reads instead. */
interface TurnCall {
  conversation: Conversation;
  call?: ToolCall;
  error?: string;
  result?: ToolResult;
  latencyMs: number;
}

function turnSeed(seed: number, turn: number): number {
  let h = (seed ^ Math.imul(turn + 1, 0x9e3779b9)) >>> 0;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b) >>> 0;
  return (h ^ (h >>> 13)) >>> 0;
}

/** Runs the multi-turn agent loop for token prompts (already rendered with the chat template and tools). */
export async function agentLoopRollout(
  model: Qwen2Model,
  tokenizer: Tokenizer,
  prompts: ArrayLike<number>[],
  o: AgentLoopOptions,
): Promise<AgentLoopResult> {
  const t0 = performance.now();
  const maxLen = o.maxResponseLength;
  const maxParallel = o.maxParallelCalls ?? 1;
  const limit = o.maxToolResponseLength ?? 256;
  const side = o.toolResponseTruncateSide ?? "middle";
  const maxTurns = o.maxAssistantTurns ?? null;
  if (!Number.isInteger(maxParallel) || maxParallel < 1)
    throw new RolloutInputError(`maxParallelCalls must be an integer >= 1, got ${o.maxParallelCalls}`);
  if (!Number.isInteger(limit) || limit < 1)
    throw new RolloutInputError(
      `maxToolResponseLength must be an integer >= 1, got ${o.maxToolResponseLength}`,
    );
  if (maxTurns !== null && (!Number.isInteger(maxTurns) || maxTurns < 1))
    throw new RolloutInputError(
      `maxAssistantTurns must be an integer >= 1 or null, got ${o.maxAssistantTurns}`,
    );
  if (!["left", "middle", "right"].includes(side))
    throw new RolloutInputError(`toolResponseTruncateSide must be left, middle or right, got ${side}`);
  const schemas = new Map<string, OpenAIFunctionSchema>([...o.tools].map(([n, t]) => [n, t.schema]));
  // each tool's results checked as they come back: a malformed one fails naming the tool
  const tools = new Map([...o.tools].map(([n, t]) => [n, guardTool(t.tool, { label: n })]));
  const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
  const stats = { wallMs: 0, assistantTurns: 0, toolCalls: 0, generatedTokens: 0 };
  const all: Conversation[] = prompts.map((p, index) => ({
    index,
    prompt: Array.from(p),
    response: [],
    own: [],
    assistantTurns: 0,
    toolTurns: 0,
    calls: [],
    malformed: 0,
    instances: new Map(),
    stopReason: null,
  }));
  let releaseError: Error | undefined;
  try {
    let going = maxLen === 0 ? [] : all;
    for (const c of all) if (maxLen === 0) c.finishReason = "length";
    for (let turn = 0; going.length > 0; turn++) {
      // 1. One assistant turn for every conversation still going.
      const budget = Math.max(...going.map((c) => maxLen - c.response.length));
      const processor = o.logitsProcessor;
      const { samples } = await tirRollout(
        model,
        tokenizer,
        going.map((c) => [...c.prompt, ...c.response]),
        {
          maxResponseLength: budget,
          numLlmCallsAvailable: 0,
          temperature: o.temperature ?? 1,
          topP: o.topP ?? 1,
          topK: o.topK ?? 0,
          seed: turnSeed(seed, turn),
          maxBatchSize: o.maxBatchSize ?? 64,
          ...(o.eosTokenId !== undefined ? { eosTokenId: o.eosTokenId } : {}),
          ...(processor
            ? {
                logitsProcessor: (i: number, ids: readonly number[], logits: Float32Array) =>
                  processor(going[i]!.index, [...going[i]!.response, ...ids], logits),
              }
            : {}),
        },
      );
      const pending: TurnCall[] = [];
      for (const s of samples) {
        const c = going[s.index]!;
        const room = maxLen - c.response.length;
        const ids = s.responseIds.slice(0, room);
        const turnStart = c.response.length;
        c.response.push(...ids);
        for (const _ of ids) c.own.push(1);
        c.assistantTurns++;
        stats.assistantTurns++;
        stats.generatedTokens += ids.length;
        if (s.finishReason !== "stop" || ids.length < s.responseIds.length) {
          c.finishReason = "length";
          continue;
        }
        // The turn's text without its end-of-turn token, special tokens kept (a template may make
        // <tool_call> a special token).
        const turnText = tokenizer.decode(c.response.slice(turnStart, -1), false);
        const parsed = parseHermesToolCalls(turnText, schemas);
        if (parsed.length === 0) {
          c.finishReason = "stop";
          c.stopReason = s.stopReason;
          continue;
        }
        if (maxTurns !== null && c.assistantTurns >= maxTurns) {
          c.finishReason = "stop";
          c.stopReason = "max_assistant_turns";
          continue;
        }
        if (c.response.length >= maxLen) {
          c.finishReason = "length";
          continue;
        }
        parsed.forEach((p, k) => {
          if (k >= maxParallel)
            pending.push({
              conversation: c,
              error: `Error: at most ${maxParallel} tool call(s) run per turn; this call was not run`,
              latencyMs: 0,
            });
          else pending.push({ conversation: c, ...p, latencyMs: 0 });
        });
      }

      // 2. Run the calls: all calls to one tool go out as one batch; the tools run concurrently.
      const byTool = new Map<string, TurnCall[]>();
      for (const p of pending) if (p.call) byTool.set(p.call.name, [...(byTool.get(p.call.name) ?? []), p]);
      await Promise.all(
        [...byTool].map(async ([name, calls]) => {
          const tool = tools.get(name)!;
          const items: { instanceId: string; call: ToolCall }[] = [];
          for (const p of calls) {
            const c = p.conversation;
            if (!c.instances.has(name)) c.instances.set(name, await tool.create());
            items.push({ instanceId: c.instances.get(name)!, call: p.call! });
          }
          const started = performance.now();
          let results: ToolResult[];
          try {
            results = await executeAll(tool, items);
          } catch (e) {
            throw new ToolExecutionError(
              name,
              calls.map((p) => p.conversation.index),
              e,
            );
          }
          if (results.length !== calls.length)
            throw new ToolExecutionError(
              name,
              calls.map((p) => p.conversation.index),
              new Error(`${results.length} results for ${calls.length} calls`),
            );
          const latencyMs = performance.now() - started;
          calls.forEach((p, k) => {
            p.result = results[k];
            p.latencyMs = latencyMs;
          });
        }),
      );
      stats.toolCalls += pending.length;

      // 3. Append each conversation's tool turns.
      const next: Conversation[] = [];
      for (const c of going) {
        const mine = pending.filter((p) => p.conversation === c);
        if (mine.length === 0) continue;
        const turns: ChatTurn[] = mine.map((p) => ({
          role: "tool",
          content: truncateToolResponse(p.result?.observation ?? p.error!, limit, side),
        }));
        const endOfTurn = tokenizer.decode([c.response[c.response.length - 1]!], false);
        const ids = tokenizer.encode(o.chatTemplate.toolTurnsText(turns, endOfTurn));
        const start = c.response.length;
        const fits = start + ids.length < maxLen;
        for (const [k, p] of mine.entries()) {
          if (!p.call) c.malformed++;
          c.calls.push({
            call: p.call ?? { name: "", arguments: {} },
            observation: turns[k]!.content,
            success: p.result?.success ?? false,
            textRange: [0, 0],
            tokenRange: fits ? [start, start + ids.length] : [start, start],
            latencyMs: p.latencyMs,
            ...(p.result?.metrics ? { metrics: p.result.metrics } : {}),
          });
        }
        if (!fits) {
          c.finishReason = "length";
          continue;
        }
        c.response.push(...ids);
        for (const _ of ids) c.own.push(0);
        c.toolTurns++;
        next.push(c);
      }
      going = next;
    }
  } finally {
    const released = await Promise.all(
      all.flatMap((c) =>
        [...c.instances].map(([name, id]) =>
          tools
            .get(name)!
            .release(id)
            .then(
              () => undefined,
              (e: unknown) => ({ name, e }),
            ),
        ),
      ),
    );
    const failed = released.filter((r) => r !== undefined);
    if (failed.length > 0)
      releaseError = releaseFailure(
        failed[0]!.name,
        failed.filter((f) => f.name === failed[0]!.name).map((f) => f.e),
      );
  }
  // a failed release leaks the tool's instances: the rollout fails on it (after another failure, that
  // one propagates from the try above)
  if (releaseError) throw releaseError;
  stats.wallMs = performance.now() - t0;
  return { samples: all.map((c) => toSample(c, tokenizer)), stats };
}

function toSample(c: Conversation, tokenizer: Tokenizer): AgentSample {
  const text = tokenizer.decode(c.response, true);
  const textAt = (token: number) => tokenizer.decode(c.response.slice(0, token), true).length;
  const calls: TirCallRecord[] = c.calls.map(({ tokenRange, ...record }) => ({
    ...record,
    textRange: [textAt(tokenRange[0]), textAt(tokenRange[1])],
  }));
  const passes = calls.filter((k) => k.success).length;
  return {
    index: c.index,
    promptIds: c.prompt,
    responseIds: c.response,
    responseMask: new Uint8Array(c.response.length).fill(1),
    toolOutputMask: Uint8Array.from(c.own),
    text,
    finishReason: c.finishReason ?? "length",
    stopReason: c.stopReason,
    numToolCalls: calls.length,
    numToolPasses: passes,
    executionPasses: passes === calls.length ? 1 : 0,
    numRounds: c.assistantTurns,
    calls,
    numTurns: 1 + c.assistantTurns + c.toolTurns,
    assistantTurns: c.assistantTurns,
    numMalformedCalls: c.malformed,
  };
}
