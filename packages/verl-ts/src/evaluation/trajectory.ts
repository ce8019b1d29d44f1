/** The trajectory record every sample file of a run holds, and its form for a TIR rollout sample. */

/**
 * One line of `runs/<name>/samples.jsonl`: one trajectory (a training rollout or a validation
 * generation), written by the trainer (or by `pnpm torl eval --samples`). Only `step`, `prompt`,
 * `response` and `score` are required.
 *
 * ```json
 * {"step": 4, "split": "val", "data_source": "math", "prompt": "A conversation ... Assistant:\n",
 *  "response": "...```python\nprint(12*34)\n```\n```output\n408\n```\nThe answer is \\boxed{408}.",
 *  "ground_truth": "408", "extracted": "408", "correct": true, "score": 1,
 *  "observation_ranges": [[31, 50]],
 *  "tool_calls": [{"code": "print(12*34)\n", "observation": "408", "success": true, "range": [31, 50]}]}
 * ```
 *
 * - `response`: the whole response text as the model saw it: generated text and the text appended by
 *   the tool (TirSample.text).
 * - `observation_ranges`: [start, end) character ranges of `response` that the tool appended
 *   (TirCallRecord.textRange, one per call). `tool_calls[i].range` is the same per call; either may be
 *   given. Without both, "```output ... ```" blocks are found by their fences.
 * - `tool_calls`: each call's code, observation and whether it passed (TirCallRecord: call.arguments.code,
 *   observation, success, textRange).
 * - `split`: "train" or "val" (default "train").
 */
export interface TrajectorySample {
  step: number;
  prompt: string;
  response: string;
  score: number;
  split?: "train" | "val";
  data_source?: string;
  ground_truth?: string;
  extracted?: string | null;
  correct?: boolean;
  observation_ranges?: [number, number][];
  tool_calls?: { code: string; observation: string; success: boolean; range?: [number, number] }[];
}

/** The sample record for one TIR rollout sample (the shape of @torl-ts/verl's TirSample). */
export function trajectoryFromTir(
  sample: {
    text: string;
    calls: {
      call: { arguments: Record<string, unknown> };
      observation: string;
      success: boolean;
      textRange: [number, number];
    }[];
  },
  fields: Omit<TrajectorySample, "response" | "observation_ranges" | "tool_calls">,
): TrajectorySample {
  return {
    ...fields,
    response: sample.text,
    observation_ranges: sample.calls.map((c) => [c.textRange[0], c.textRange[1]]),
    tool_calls: sample.calls.map((c) => ({
      code: String(c.call.arguments.code ?? JSON.stringify(c.call.arguments)),
      observation: c.observation,
      success: c.success,
      range: [c.textRange[0], c.textRange[1]],
    })),
  };
}
