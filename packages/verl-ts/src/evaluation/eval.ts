/**
 * The paper's evaluation (`pnpm torl eval`, in ../cli/eval.ts). Generates with tool calls (TIR rollout, at most C calls
 * per response) for every row of a veRL-schema dataset, grades the last \boxed{} answer with
 * compute_score, and reports per data_source: accuracy (over all samples; with n > 1 also pass@n),
 * code ratio, code pass ratio and effective code ratio. Greedy by default (n = 1, temperature 0).
 *
 * Figures (fractions in [0, 1]), the same definitions as the trainer's metrics:
 * - acc: correct samples / samples;
 * - pass_at_n: rows with at least one correct sample / rows (n > 1);
 * - code_ratio: samples with at least one tool call / samples;
 * - pass_ratio: tool calls that ran without error / tool calls (0 without calls);
 * - effective_code_ratio: samples whose extracted answer appears in the output of one of their passing
 *   calls / samples with calls (0 without calls).
 * `overall` pools every sample; `overall.mean_source_acc` is the unweighted mean over data sources (the
 * paper's "average" column).
 */
import { InputError } from "@torl-ts/core";
import { type RlDatasetRow, readRlDataset } from "../data/rows.js";
import { renderPrompt } from "../data/templates.js";
import { type BackendName, selectBackend } from "../models/backend.js";
import { loadPretrained } from "../models/pretrained.js";
import { computeMathScore } from "../reward/score.js";
import type { PythonCodeInterpreter } from "../rollout/code-interpreter.js";
import { createCodeInterpreterTool } from "../rollout/code-interpreter-tool.js";
import { type TirSample, tirRollout } from "../rollout/tir.js";
import type { Tool } from "../rollout/tool.js";
import { type TrajectorySample, trajectoryFromTir } from "./trajectory.js";

export interface EvalOptions {
  /** HF model directory (config.json, model.safetensors, tokenizer.json). */
  model: string;
  /** Dataset file(s) in veRL's schema (.parquet or .jsonl). */
  data: string | string[];
  /** Samples per row; default 1. */
  n?: number;
  /** Default 0 (greedy) when n = 1, 1.0 when n > 1. */
  temperature?: number;
  topP?: number;
  /** C, tool calls per response; default 1 (the paper's script). 0 = no tool. */
  maxCalls?: number;
  /** First K rows only. */
  limit?: number;
  /** Response token budget; default 3072, capped by the model's positions minus the longest prompt. */
  maxResponseLength?: number;
  /** Drop prompts longer than this minus 10 tokens (ToRL's filter); default: keep all. */
  maxPromptLength?: number;
  /** data.template_type; default tir_base_0309. */
  template?: string;
  seed?: number;
  /** Warm sandbox interpreters; default 2. */
  workers?: number;
  /** Seconds per code run; default 10. */
  runTimeout?: number;
  backend?: BackendName | "auto";
  /** Edits next-token logits before sampling (constrained decoding, scripted tests); see TirRolloutOptions. */
  logitsProcessor?: (index: number, responseIds: readonly number[], logits: Float32Array) => void;
  /** A tool to use instead of the sandboxed Python interpreter (tests, other tools). */
  tool?: Tool;
  /** Progress lines; default stderr. null = quiet. */
  log?: ((line: string) => void) | null;
}

/** One evaluated sample: the report's trajectory record plus the figures it counts towards. */
export interface EvalSample extends TrajectorySample {
  row: number;
  sample: number;
  data_source: string;
  correct: boolean;
  num_tool_calls: number;
  num_tool_passes: number;
  effective_code: boolean;
  response_tokens: number;
  finish_reason: "stop" | "length";
}

export interface EvalFigures {
  rows: number;
  samples: number;
  acc: number;
  pass_at_n?: number;
  mean_score: number;
  code_ratio: number;
  pass_ratio: number;
  effective_code_ratio: number;
  calls: number;
  mean_response_tokens: number;
}

export interface EvalResult {
  model: string;
  data: string[];
  n: number;
  temperature: number;
  max_calls: number;
  max_response_length: number;
  dropped_overlong: number;
  wall_seconds: number;
  per_source: Record<string, EvalFigures>;
  overall: EvalFigures & { mean_source_acc: number };
  samples: EvalSample[];
}

/** A model/data pair that cannot be evaluated (empty data, no room for a response...). */
export class EvalInputError extends InputError {
  override name = "EvalInputError";
}

/** Loosely equal answers (as the trainer's effective code ratio): no spaces, no trailing ".0". */
function squash(s: string): string {
  return s.replace(/\s+/g, "").replace(/\.0+$/, "");
}

/** The figures of a set of samples (see the module comment for the definitions). */
export function evalFigures(samples: readonly EvalSample[], n: number): EvalFigures {
  const count = samples.length;
  const rows = new Map<number, boolean>();
  for (const s of samples) rows.set(s.row, (rows.get(s.row) ?? false) || s.correct);
  const withCode = samples.filter((s) => s.num_tool_calls > 0);
  const calls = samples.reduce((a, s) => a + s.num_tool_calls, 0);
  const passes = samples.reduce((a, s) => a + s.num_tool_passes, 0);
  const div = (a: number, b: number) => (b === 0 ? 0 : a / b);
  const out: EvalFigures = {
    rows: rows.size,
    samples: count,
    acc: div(samples.filter((s) => s.correct).length, count),
    mean_score: div(
      samples.reduce((a, s) => a + s.score, 0),
      count,
    ),
    code_ratio: div(withCode.length, count),
    pass_ratio: div(passes, calls),
    effective_code_ratio: div(withCode.filter((s) => s.effective_code).length, withCode.length),
    calls,
    mean_response_tokens: div(
      samples.reduce((a, s) => a + s.response_tokens, 0),
      count,
    ),
  };
  if (n > 1) out.pass_at_n = div([...rows.values()].filter(Boolean).length, rows.size);
  return out;
}

/** Per-source and overall figures from sample records. */
export function summarizeEval(
  samples: readonly EvalSample[],
  n: number,
): Pick<EvalResult, "per_source" | "overall"> {
  const sources = [...new Set(samples.map((s) => s.data_source))].sort();
  const per_source: Record<string, EvalFigures> = {};
  for (const src of sources)
    per_source[src] = evalFigures(
      samples.filter((s) => s.data_source === src),
      n,
    );
  const accs = sources.map((s) => per_source[s]!.acc);
  return {
    per_source,
    overall: {
      ...evalFigures(samples, n),
      mean_source_acc: accs.length ? accs.reduce((a, b) => a + b, 0) / accs.length : 0,
    },
  };
}

function toEvalSample(
  s: TirSample,
  row: RlDatasetRow,
  rowIndex: number,
  sampleIndex: number,
  prompt: string,
): EvalSample {
  const gt = row.reward_model.ground_truth;
  const graded = computeMathScore(s.text, gt, { rewardType: "default" });
  const base = trajectoryFromTir(s, {
    step: 0,
    split: "val",
    prompt,
    score: graded.score,
    data_source: row.data_source,
    ground_truth: gt,
    extracted: graded.extracted,
    correct: graded.correct,
  });
  const target = graded.extracted ? squash(graded.extracted) : "";
  const effective =
    s.numToolCalls > 0 &&
    target !== "" &&
    s.calls.some((c) => c.success && squash(c.observation).includes(target));
  return {
    ...base,
    row: rowIndex,
    sample: sampleIndex,
    data_source: row.data_source,
    correct: graded.correct,
    num_tool_calls: s.numToolCalls,
    num_tool_passes: s.numToolPasses,
    effective_code: effective,
    response_tokens: s.responseIds.length,
    finish_reason: s.finishReason,
  };
}

/** Runs the evaluation. */
export async function evaluate(options: EvalOptions): Promise<EvalResult> {
  const log = options.log === null ? () => {} : (options.log ?? ((l: string) => console.error(l)));
  const started = performance.now();
  const n = options.n ?? 1;
  if (!(Number.isInteger(n) && n >= 1)) throw new EvalInputError(`n must be a positive integer, got ${n}`);
  const temperature = options.temperature ?? (n > 1 ? 1 : 0);
  const maxCalls = options.maxCalls ?? 1;
  const template = options.template ?? "tir_base_0309";
  const files = typeof options.data === "string" ? [options.data] : options.data;

  let rows = await readRlDataset(files);
  if (options.limit !== undefined) rows = rows.slice(0, options.limit);
  if (rows.length === 0) throw new EvalInputError(`no rows to evaluate in ${files.join(", ")}`);

  const backend = await selectBackend({ backend: options.backend, log: (l: string) => log(l) });
  void backend;
  const { model, tokenizer } = loadPretrained(options.model, { trainable: false });
  let ownTool: PythonCodeInterpreter | undefined;
  try {
    const texts = rows.map((r) => renderPrompt(template, r.prompt));
    let ids = texts.map((t) => tokenizer.encode(t));
    let kept = rows.map((_, i) => i);
    if (options.maxPromptLength !== undefined) {
      const limit = options.maxPromptLength - 10;
      kept = kept.filter((i) => ids[i]!.length <= limit);
    }
    const dropped = rows.length - kept.length;
    if (kept.length === 0) throw new EvalInputError(`every prompt is longer than max_prompt_length - 10`);
    ids = kept.map((i) => ids[i]!);
    const longest = Math.max(...ids.map((p) => p.length));
    const room = model.config.maxPositionEmbeddings - longest;
    if (room < 1)
      throw new EvalInputError(
        `the longest prompt has ${longest} tokens, which fills the model's ${model.config.maxPositionEmbeddings} positions`,
      );
    const maxResponseLength = Math.min(options.maxResponseLength ?? 3072, room);

    let tool = options.tool;
    if (!tool && maxCalls > 0) {
      // the trainer's code interpreter, its interpreters in this process
      ownTool = await createCodeInterpreterTool(
        { sandbox_actors: 0, sandbox_workers: options.workers ?? 2, run_timeout: options.runTimeout ?? 10 },
        { log: (l) => log(l) },
      );
      tool = ownTool;
    }
    const prompts = ids.flatMap((p) => Array.from({ length: n }, () => p));
    log(
      `eval: ${kept.length} rows x ${n} samples, temperature ${temperature}, C=${maxCalls}, ` +
        `max response ${maxResponseLength} tokens${dropped ? `, ${dropped} overlong prompts dropped` : ""}`,
    );
    let finished = 0;
    const every = Math.max(1, Math.ceil(prompts.length / 10));
    const { samples } = await tirRollout(model, tokenizer, prompts, {
      tool: maxCalls > 0 ? tool : undefined,
      numLlmCallsAvailable: maxCalls,
      maxResponseLength,
      temperature,
      topP: options.topP ?? 1,
      seed: options.seed ?? 0,
      logitsProcessor: options.logitsProcessor,
      onEvent: (e) => {
        if (e.type === "finish" && (++finished % every === 0 || finished === prompts.length))
          log(`eval: ${finished}/${prompts.length} responses`);
      },
    });
    const records = samples
      .slice()
      .sort((a, b) => a.index - b.index)
      .map((s) => {
        const k = Math.floor(s.index / n);
        const rowIndex = kept[k]!;
        return toEvalSample(s, rows[rowIndex]!, rowIndex, s.index % n, texts[rowIndex]!);
      });
    return {
      model: options.model,
      data: files,
      n,
      temperature,
      max_calls: maxCalls,
      max_response_length: maxResponseLength,
      dropped_overlong: dropped,
      wall_seconds: (performance.now() - started) / 1000,
      ...summarizeEval(records, n),
      samples: records,
    };
  } finally {
    await ownTool?.close();
    model.dispose();
  }
}

const pct = (v: number | undefined) => (v === undefined ? "-" : (100 * v).toFixed(1));

/** The per-source table printed by `pnpm torl eval`. */
export function formatEvalTable(result: EvalResult): string {
  const head = [
    "data_source",
    "rows",
    "samples",
    "acc%",
    ...(result.n > 1 ? [`pass@${result.n}%`] : []),
    "code%",
    "pass%",
    "eff.code%",
    "resp.tok",
  ];
  const line = (name: string, f: EvalFigures) => [
    name,
    String(f.rows),
    String(f.samples),
    pct(f.acc),
    ...(result.n > 1 ? [pct(f.pass_at_n)] : []),
    pct(f.code_ratio),
    pct(f.pass_ratio),
    pct(f.effective_code_ratio),
    f.mean_response_tokens.toFixed(0),
  ];
  const body = [
    head,
    ...Object.entries(result.per_source).map(([s, f]) => line(s, f)),
    line("all", result.overall),
  ];
  const widths = head.map((_, c) => Math.max(...body.map((r) => r[c]!.length)));
  const fmt = (r: string[]) =>
    r.map((v, c) => (c === 0 ? v.padEnd(widths[c]!) : v.padStart(widths[c]!))).join("  ");
  return [
    fmt(body[0]!),
    widths.map((w) => "-".repeat(w)).join("  "),
    ...body.slice(1, -1).map(fmt),
    widths.map((w) => "-".repeat(w)).join("  "),
    fmt(body[body.length - 1]!),
    `mean over sources: acc ${pct(result.overall.mean_source_acc)}%  (${result.n} sample${result.n > 1 ? "s" : ""} per row, temperature ${result.temperature}, C=${result.max_calls}, ${result.wall_seconds.toFixed(1)} s)`,
  ].join("\n");
}
