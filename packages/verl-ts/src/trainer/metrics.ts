/**
 * Step metrics with veRL's names (compute_data_metrics, compute_timing_metrics) plus ToRL's tool
 * metrics. Every function reads columns of the step's DataProto and returns a flat name -> number map.
 */
import { type MaskMatrix, maskedVar, type ScoreMatrix } from "../algorithms/masked.js";
import type { DataProto } from "../protocol/data-proto.js";

function stats(prefix: string, values: number[], out: Record<string, number>): void {
  if (values.length === 0) return;
  let sum = 0;
  let max = -Infinity;
  let min = Infinity;
  for (const v of values) {
    sum += v;
    if (v > max) max = v;
    if (v < min) min = v;
  }
  out[`${prefix}/mean`] = sum / values.length;
  out[`${prefix}/max`] = max;
  out[`${prefix}/min`] = min;
}

function rowSums(data: DataProto, key: string): number[] {
  const t = data.tensor(key);
  const [B, T] = [t.shape[0]!, t.shape[1] ?? 1];
  return Array.from({ length: B }, (_, b) => {
    let s = 0;
    for (let i = 0; i < T; i++) s += Number(t.data[b * T + i]);
    return s;
  });
}

/** Values of `key` at tokens where `maskKey` is 1. */
function maskedValues(data: DataProto, key: string, maskKey: string): number[] {
  const t = data.tensor(key);
  const m = data.tensor(maskKey);
  const out: number[] = [];
  for (let i = 0; i < t.data.length; i++) if (Number(m.data[i]) !== 0) out.push(Number(t.data[i]));
  return out;
}

/**
 * veRL's data metrics: critic/score, critic/rewards (per-sequence sums), critic/advantages and
 * critic/returns (over the loss tokens), with a critic critic/values and critic/vf_explained_var,
 * response_length and prompt_length (mean/max/min/clip_ratio).
 */
export function computeDataMetrics(data: DataProto): Record<string, number> {
  const out: Record<string, number> = {};
  const mask = data.batch.loss_mask ? "loss_mask" : "response_mask";
  if (data.batch.token_level_scores) stats("critic/score", rowSums(data, "token_level_scores"), out);
  if (data.batch.token_level_rewards) stats("critic/rewards", rowSums(data, "token_level_rewards"), out);
  if (data.batch.advantages) stats("critic/advantages", maskedValues(data, "advantages", mask), out);
  if (data.batch.returns) stats("critic/returns", maskedValues(data, "returns", mask), out);
  if (data.batch.values && data.batch.returns) {
    stats("critic/values", maskedValues(data, "values", mask), out);
    // how much of the returns' variance the critic explains: 1 - Var(returns - values) / Var(returns)
    const m = data.tensor(mask) as MaskMatrix;
    const returns = data.tensor("returns") as ScoreMatrix;
    const v = data.tensor("values").data;
    const diff = { data: returns.data.map((r, i) => r - Number(v[i])), shape: returns.shape };
    out["critic/vf_explained_var"] = 1 - maskedVar(diff, m, false) / (maskedVar(returns, m, false) + 1e-5);
  }
  const R = data.tensor("responses").shape[1]!;
  const respLen = rowSums(data, "response_mask");
  stats("response_length", respLen, out);
  out["response_length/clip_ratio"] = respLen.filter((l) => l >= R).length / Math.max(1, respLen.length);
  const attn = data.tensor("attention_mask");
  const P = data.tensor("prompts").shape[1]!;
  const W = attn.shape[1]!;
  const promptLen = Array.from({ length: data.length }, (_, b) => {
    let s = 0;
    for (let t = 0; t < P; t++) s += Number(attn.data[b * W + t]);
    return s;
  });
  stats("prompt_length", promptLen, out);
  out["prompt_length/clip_ratio"] = promptLen.filter((l) => l >= P).length / Math.max(1, promptLen.length);
  return out;
}

/** Loosely equal answers: the extracted answer with spaces and a trailing ".0" removed. */
function squash(s: string): string {
  return s.replace(/\s+/g, "").replace(/\.0+$/, "");
}

/**
 * ToRL's tool metrics (fractions in [0, 1]), under `prefix` (default "tool"):
 * - code_ratio: responses with at least one tool call;
 * - pass_ratio: tool calls that ran without error, over all calls (0 without calls);
 * - effective_code_ratio: responses whose final answer appears in the output of a passing tool call,
 *   over responses with code (code that computed the answer rather than checking it afterwards; a
 *   proxy for the paper's "effective code");
 * - calls_per_response;
 * - pass_ratio_correct / pass_ratio_wrong: pass_ratio over the calls of the responses whose answer was
 *   right / wrong (the paper's Figure 4c); absent when no response of that kind made a call, since the
 *   ratio has no value then.
 * Reads num_tool_calls, num_tool_passes, acc (for the split by correctness) and (for
 * effective_code_ratio) tool_observations and extracted_answer. Returns nothing when the batch has no
 * tool columns.
 */
export function computeToolMetrics(data: DataProto, prefix = "tool"): Record<string, number> {
  if (!data.batch.num_tool_calls) return {};
  const calls = Array.from(data.tensor("num_tool_calls").data as ArrayLike<number>, Number);
  const passes = data.batch.num_tool_passes
    ? Array.from(data.tensor("num_tool_passes").data as ArrayLike<number>, Number)
    : undefined;
  const n = Math.max(1, calls.length);
  const withCode = calls.filter((c) => c > 0).length;
  const totalCalls = calls.reduce((a, b) => a + b, 0);
  const out: Record<string, number> = {
    [`${prefix}/code_ratio`]: withCode / n,
    [`${prefix}/calls_per_response`]: totalCalls / n,
  };
  if (passes) {
    const totalPasses = passes.reduce((a, b) => a + b, 0);
    out[`${prefix}/pass_ratio`] = totalCalls === 0 ? 0 : totalPasses / totalCalls;
    const acc = data.nonTensorBatch.acc as boolean[] | undefined;
    if (acc) {
      const by = { correct: { calls: 0, passes: 0 }, wrong: { calls: 0, passes: 0 } };
      calls.forEach((c, i) => {
        const g = acc[i] ? by.correct : by.wrong;
        g.calls += c;
        g.passes += passes[i]!;
      });
      for (const [kind, g] of Object.entries(by))
        if (g.calls > 0) out[`${prefix}/pass_ratio_${kind}`] = g.passes / g.calls;
    }
  }
  const obs = data.nonTensorBatch.tool_observations as string[][] | undefined;
  const ans = data.nonTensorBatch.extracted_answer as (string | null)[] | undefined;
  if (obs && ans) {
    let effective = 0;
    calls.forEach((c, i) => {
      const a = ans[i];
      if (c > 0 && a) {
        const target = squash(a);
        if (target && obs[i]?.some((o) => squash(o).includes(target))) effective++;
      }
    });
    out[`${prefix}/effective_code_ratio`] = withCode === 0 ? 0 : effective / withCode;
  }
  return out;
}

/** Validation accuracy per data source and overall: val/<source>/acc, val/acc. */
export function computeValidationMetrics(
  sources: string[],
  correct: boolean[],
  scores: number[],
): Record<string, number> {
  const by = new Map<string, { n: number; c: number; s: number }>();
  sources.forEach((src, i) => {
    const e = by.get(src) ?? { n: 0, c: 0, s: 0 };
    e.n++;
    e.c += correct[i] ? 1 : 0;
    e.s += scores[i] ?? 0;
    by.set(src, e);
  });
  const out: Record<string, number> = {};
  let n = 0;
  let c = 0;
  for (const [src, e] of [...by].sort(([a], [b]) => a.localeCompare(b))) {
    out[`val/${src}/acc`] = e.c / e.n;
    out[`val/${src}/score`] = e.s / e.n;
    n += e.n;
    c += e.c;
  }
  out["val/acc"] = n ? c / n : 0;
  return out;
}

/** Prompt and response tokens of a batch (attention mask before and within the response columns). */
export function tokenCounts(data: DataProto): { prompt: number; response: number } {
  const attn = data.tensor("attention_mask");
  const R = data.tensor("responses").shape[1]!;
  const W = attn.shape[1]!;
  let prompt = 0;
  let response = 0;
  for (let b = 0; b < data.length; b++)
    for (let t = 0; t < W; t++) {
      const v = Number(attn.data[b * W + t]);
      if (t < W - R) prompt += v;
      else response += v;
    }
  return { prompt, response };
}

/** Phases timed per token (veRL): gen per response token, the others per prompt + response token. */
const PER_TOKEN_PHASES = ["gen", "ref", "values", "adv", "update_critic", "update_actor"] as const;

/**
 * veRL's compute_timing_metrics, per-token part: timing_per_token_ms/<phase> = seconds x 1000 / tokens,
 * for the phases of `timing` (timing_s/<phase> seconds) that ran.
 */
export function computeTimingPerTokenMetrics(
  data: DataProto,
  timing: Record<string, number>,
): Record<string, number> {
  const { prompt, response } = tokenCounts(data);
  const out: Record<string, number> = {};
  for (const phase of PER_TOKEN_PHASES) {
    const seconds = timing[`timing_s/${phase}`];
    if (seconds === undefined) continue;
    const tokens = phase === "gen" ? response : prompt + response;
    if (tokens > 0) out[`timing_per_token_ms/${phase}`] = (seconds * 1000) / tokens;
  }
  return out;
}

/**
 * veRL's compute_throughout_metrics: perf/total_num_tokens (prompt + response tokens of the batch),
 * perf/time_per_step (seconds), perf/throughput = tokens / (seconds x workers).
 */
export function computeThroughputMetrics(
  totalTokens: number,
  stepSeconds: number,
  workers: number,
): Record<string, number> {
  return {
    "perf/total_num_tokens": totalTokens,
    "perf/time_per_step": stepSeconds,
    "perf/throughput": totalTokens / (stepSeconds * workers),
  };
}
