/**
 * The trainer's side of the multi-turn agent loop: `actor_rollout_ref.rollout.multi_turn.*` read into
 * agent-loop options (config/ checks those settings), the prompt renderer for `data.template_type=model`
 * (the model's chat template, with the tools' schemas when the agent loop is on), and the training
 * batch with the loop's extra columns.
 */
import type { MultiTurnConfig, TrainerConfig } from "../config/types.js";
import type { PromptTemplate } from "../data/templates.js";
import type { Tokenizer } from "../models/tokenizer.js";
import type { DataProto } from "../protocol/index.js";
import type { AgentLoopOptions, AgentSample } from "./agent-loop.js";
import { type RolloutBatchOptions, rolloutTrainingBatch } from "./batch.js";
import { ChatTemplate } from "./chat-template.js";
import { loadToolConfig, readToolConfig } from "./tool-config.js";

export type { MultiTurnConfig };

export function multiTurnConfig(cfg: TrainerConfig): MultiTurnConfig {
  return cfg.actor_rollout_ref.rollout.multi_turn;
}

/**
 * The prompt renderer of `data.template_type=model`: the model's chat template with a generation
 * prompt, listing the tools of multi_turn.tool_config_path when the agent loop is on.
 */
export function modelPromptRenderer(cfg: TrainerConfig, tokenizer: Tokenizer): PromptTemplate {
  const template = ChatTemplate.fromTokenizer(tokenizer);
  const mt = multiTurnConfig(cfg);
  const tools =
    mt?.enable && mt.tool_config_path ? readToolConfig(mt.tool_config_path).map((e) => e.schema) : undefined;
  return (messages) =>
    template.render(
      messages.map((m) => ({ role: m.role as "user", content: m.content })),
      { tools, addGenerationPrompt: true },
    );
}

/** The agent loop's tools and settings (not the sampling ones) from the config; imports the tools. */
export async function multiTurnSettings(
  cfg: TrainerConfig,
  tokenizer: Tokenizer,
): Promise<
  Pick<
    AgentLoopOptions,
    | "tools"
    | "chatTemplate"
    | "maxAssistantTurns"
    | "maxParallelCalls"
    | "maxToolResponseLength"
    | "toolResponseTruncateSide"
  >
> {
  const mt = multiTurnConfig(cfg);
  return {
    tools: mt.tool_config_path ? await loadToolConfig(mt.tool_config_path) : new Map(),
    chatTemplate: ChatTemplate.fromTokenizer(tokenizer),
    maxAssistantTurns: mt.max_assistant_turns,
    maxParallelCalls: mt.max_parallel_calls,
    maxToolResponseLength: mt.max_tool_response_length,
    toolResponseTruncateSide: mt.tool_response_truncate_side,
  };
}

/**
 * `rolloutTrainingBatch` of the conversations plus their turns: `num_turns` and `num_malformed_calls`
 * (Int32Array [B]) and the non-tensor `tool_call_names` (per row, the tool of each call that ran).
 */
export function agentTrainingBatch(samples: AgentSample[], options: RolloutBatchOptions): DataProto {
  const ordered = [...samples].sort((a, b) => a.index - b.index);
  const out = rolloutTrainingBatch(ordered, options);
  const B = ordered.length;
  out.batch.num_turns = { data: Int32Array.from(ordered, (s) => s.numTurns), shape: [B] };
  out.batch.num_malformed_calls = { data: Int32Array.from(ordered, (s) => s.numMalformedCalls), shape: [B] };
  out.nonTensorBatch.tool_call_names = ordered.map((s) =>
    s.calls.filter((c) => c.call.name).map((c) => c.call.name),
  );
  return out;
}

/**
 * Metrics of a multi-turn batch: veRL's num_turns/min|max|mean, tool/malformed_call_ratio (calls answered
 * with an error before reaching a tool, over all calls) and tool/<tool_name>/calls_per_response.
 * Nothing for a batch without the agent loop's columns.
 */
export function computeMultiTurnMetrics(data: DataProto): Record<string, number> {
  if (!data.batch.num_turns) return {};
  const column = (key: string) => Array.from(data.tensor(key).data as ArrayLike<number>, Number);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const turns = column("num_turns");
  const n = Math.max(1, turns.length);
  const calls = sum(column("num_tool_calls"));
  const malformed = sum(column("num_malformed_calls"));
  const out: Record<string, number> = {
    "num_turns/min": Math.min(...turns),
    "num_turns/max": Math.max(...turns),
    "num_turns/mean": sum(turns) / n,
    "tool/malformed_call_ratio": calls === 0 ? 0 : malformed / calls,
  };
  const byName = new Map<string, number>();
  for (const names of (data.nonTensorBatch.tool_call_names ?? []) as string[][])
    for (const name of names) byName.set(name, (byName.get(name) ?? 0) + 1);
  for (const [name, count] of byName) out[`tool/${name}/calls_per_response`] = count / n;
  return out;
}
