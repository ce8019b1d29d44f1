/**
 * SimpleTIR's void-turn filter (algorithm.void_turn_filter): a multi-turn trajectory whose turn produced
 * neither a complete tool call nor a final answer (a truncated code block, text that trails off) is left
 * out of the policy update, which keeps such degenerate turns from being reinforced.
 *
 * A response's turns are separated by the tool's observations (ToRL's "```output ... ```" blocks, or the
 * agent loop's tool turns). Every turn before an observation ended in a tool call (that is what started
 * the observation), so only the last turn can be void: it is void when it holds no complete ```python
 * block, no <tool_call>...</tool_call> and no \boxed{} answer.
 */
import type { DataProto } from "../protocol/data-proto.js";
import { extractBoxedAnswer } from "../reward/extract.js";
import { OUTPUT_STOP } from "./code-interpreter.js";

/** The text after the last tool observation of `response` (all of it when there is none). */
export function lastTurn(response: string, stop = OUTPUT_STOP): string {
  const at = response.lastIndexOf(stop);
  if (at < 0) return response;
  // the observation block closes with ``` on its own line
  const close = response.indexOf("```", at + stop.length);
  return close < 0 ? "" : response.slice(close + 3);
}

/** Whether the last turn of `response` has neither a complete tool call nor a final answer. */
export function hasVoidTurn(response: string, stop = OUTPUT_STOP): boolean {
  const turn = lastTurn(response, stop);
  if (/```python\n[\s\S]*?\n```/.test(turn)) return false;
  if (/<tool_call>[\s\S]*?<\/tool_call>/.test(turn)) return false;
  return extractBoxedAnswer(turn) === null;
}

/**
 * Takes the responses with a void turn out of the update: their loss_mask rows become 0 (the rows stay,
 * so batch shapes and GRPO groups are unchanged; their scores still count in their group's baseline).
 * Returns train/void_turn_trajectories (how many) and train/void_turn_fraction.
 */
export function applyVoidTurnFilter(batch: DataProto, stop = OUTPUT_STOP): Record<string, number> {
  const text = batch.column<string>("response_text");
  const mask = batch.tensor<Uint8Array | Float32Array>("loss_mask");
  const R = mask.shape[1]!;
  let dropped = 0;
  text.forEach((t, b) => {
    if (!hasVoidTurn(String(t ?? ""), stop)) return;
    dropped++;
    for (let i = b * R; i < (b + 1) * R; i++) mask.data[i] = 0;
  });
  return {
    "train/void_turn_trajectories": dropped,
    "train/void_turn_fraction": text.length ? dropped / text.length : 0,
  };
}
