/**
 * The run report: `runs/<name>/report.html` (self-contained: inline CSS and SVG, no scripts, nothing
 * fetched) and `runs/<name>/report.png` (the same SVG charts composed with @napi-rs/canvas), from
 * the run's metrics.jsonl, summary.json and samples.jsonl.
 *
 * Charts (report-charts.ts draws them), per step or per second of training (a switch in the page):
 * validation accuracy per data source and the mean; training accuracy, score and reward (one line when
 * they are equal), no-answer rate, response length and its clip ratio; code, pass and effective code
 * ratios (gaps where undefined); policy loss, entropy, KL, gradient norm, learning rate, clip fractions,
 * advantages and returns, the critic's figures; throughput and the time of each step by phase, stacked.
 * Lines are lightly smoothed over the faint raw values; hovering shows the values at a step. A second
 * run (e.g. the C=0 control) can be overlaid, dashed. Then the summary, and sample trajectories with the
 * model's code and the tool's observations highlighted.
 *
 * `pnpm torl report runs/<name> [--compare runs/<other>]`; the trainer calls `writeReport(runDir)`.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createCanvas, Image } from "@napi-rs/canvas";
import { type CliCommand, InputError, parseFlags, UsageError } from "@torl-ts/core";
import type { TrajectorySample } from "@torl-ts/verl";
import { escapeHtml, FONT, fmtNum, lineChart, PALETTE, type Series, stackedChart } from "./report-charts.js";

export { escapeHtml, lineChart, type Series, smoothSeries, stackedChart } from "./report-charts.js";

/** A report input that cannot be read: names the file and, where it applies, the line. */
export class ReportInputError extends InputError {
  override name = "ReportInputError";
  constructor(
    readonly file: string,
    message: string,
    readonly line?: number,
  ) {
    super(`${file}${line !== undefined ? `:${line}` : ""}: ${message}`);
  }
}

type Row = { step: number } & Record<string, number>;

function readJsonl<T>(file: string): T[] {
  const lines = readFileSync(file, "utf8").split("\n");
  let last = lines.length - 1;
  while (last >= 0 && !lines[last]!.trim()) last--;
  const out: T[] = [];
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    try {
      out.push(JSON.parse(line) as T);
    } catch (e) {
      // A torn last line (a killed run) is skipped; a bad line elsewhere is an error.
      if (i !== last) throw new ReportInputError(file, `not valid JSON (${(e as Error).message})`, i + 1);
    }
  });
  return out;
}

/** The run's metrics, sorted by step; lines without a numeric step are an error. */
export function readRunMetrics(runDir: string): Row[] {
  const file = join(runDir, "metrics.jsonl");
  if (!existsSync(file)) throw new ReportInputError(file, "not found (is this a run directory?)");
  const rows = readJsonl<Row>(file);
  rows.forEach((r, i) => {
    if (typeof r?.step !== "number") throw new ReportInputError(file, `line has no numeric "step"`, i + 1);
  });
  return rows.sort((a, b) => a.step - b.step);
}

function readSummary(runDir: string): Record<string, unknown> | undefined {
  const file = join(runDir, "summary.json");
  if (!existsSync(file)) return undefined;
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new ReportInputError(file, `not valid JSON (${(e as Error).message})`);
  }
}

function readSamples(runDir: string): TrajectorySample[] {
  const file = join(runDir, "samples.jsonl");
  if (!existsSync(file)) return [];
  const samples = readJsonl<TrajectorySample>(file);
  samples.forEach((s, i) => {
    if (typeof s?.response !== "string" || typeof s.prompt !== "string")
      throw new ReportInputError(file, `sample needs string "prompt" and "response"`, i + 1);
  });
  return samples;
}

// ---------------------------------------------------------------------------------------------------
// Charts (SVG strings shared by the HTML and the PNG; drawn by report-charts.ts)

/** Colours of the overlaid (compared) run's series. */
const COMPARE_COLORS = ["#555555", "#aaaaaa", "#777777"];

interface RunData {
  dir: string;
  label: string;
  metrics: Row[];
  summary?: Record<string, unknown>;
}

/** The x axis of the charts: the training step, or seconds of training (the sum of timing_s/step). */
export type ReportAxis = "step" | "wall";

/**
 * Ratios over tool calls or over responses with code have no value at a step without any: they are
 * gaps there, not 0 (the trainer logs 0). Key -> the metric that is 0 exactly when it is undefined.
 */
const UNDEFINED_WHEN_ZERO: Record<string, string> = {
  "tool/pass_ratio": "tool/code_ratio",
  "tool/effective_code_ratio": "tool/code_ratio",
  "val/tool/pass_ratio": "val/tool/code_ratio",
  "val/tool/effective_code_ratio": "val/tool/code_ratio",
};

/** Seconds of training at the end of each step: the running sum of timing_s/step (step 0: 0). */
export function wallClock(metrics: Row[]): Map<number, number> {
  const out = new Map<number, number>();
  let t = 0;
  for (const r of metrics) {
    if (typeof r["timing_s/step"] === "number") t += r["timing_s/step"];
    out.set(r.step, t);
  }
  return out;
}

function hasWallClock(metrics: Row[]): boolean {
  return metrics.some((r) => typeof r["timing_s/step"] === "number");
}

function xOf(run: RunData, axis: ReportAxis): (r: Row) => number {
  if (axis === "step") return (r) => r.step;
  const wall = wallClock(run.metrics);
  return (r) => wall.get(r.step)!;
}

function seriesOf(
  run: RunData,
  key: string,
  label: string,
  color: string,
  dashed: boolean,
  axis: ReportAxis,
): Series {
  const x = xOf(run, axis);
  const denominator = UNDEFINED_WHEN_ZERO[key];
  return {
    label,
    color,
    dashed,
    points: run.metrics
      .filter((r) => typeof r[key] === "number")
      .map((r) => [x(r), denominator !== undefined && r[denominator] === 0 ? Number.NaN : r[key]!]),
  };
}

/** Data sources with val/<source>/acc in any row, sorted. */
export function validationSources(metrics: Row[]): string[] {
  const set = new Set<string>();
  for (const r of metrics)
    for (const k of Object.keys(r)) {
      const m = /^val\/(.+)\/acc$/.exec(k);
      if (m && m[1] !== "tool") set.add(m[1]!);
    }
  return [...set].sort();
}

/** val/acc where the trainer wrote it, else the mean over the sources present in that row. */
function withMeanAccuracy(metrics: Row[]): Row[] {
  const sources = validationSources(metrics);
  return metrics.map((r) => {
    if (typeof r["val/acc"] === "number") return r;
    const vals = sources.map((s) => r[`val/${s}/acc`]).filter((v): v is number => typeof v === "number");
    return vals.length ? { ...r, "val/acc": vals.reduce((a, b) => a + b, 0) / vals.length } : r;
  });
}

/** The throughput the trainer logged (perf/throughput), else veRL's formula from what it logs:
 * tokens per worker (global_seqlen/mean) over the step's seconds. */
function withThroughput(metrics: Row[]): Row[] {
  return metrics.map((r) => {
    if (typeof r["perf/throughput"] === "number") return r;
    const tokens = r["global_seqlen/mean"];
    const seconds = r["timing_s/step"];
    return typeof tokens === "number" && typeof seconds === "number" && seconds > 0
      ? { ...r, "perf/throughput": tokens / seconds }
      : r;
  });
}

/** True when `b` has the same value as `a` at every step where either is logged (e.g. the reward
 * without a KL penalty is the score): drawing both would put one line exactly on top of the other. */
function sameSeries(metrics: Row[], a: string, b: string): boolean {
  return metrics.every((r) => {
    const x = r[a];
    const y = r[b];
    return (
      x === y ||
      (typeof x === "number" && typeof y === "number" && Math.abs(x - y) <= 1e-9 * (1 + Math.abs(x)))
    );
  });
}

interface ChartSpec {
  title: string;
  group: "Outcomes" | "Tool use" | "Optimisation" | "Time";
  yLabel: string;
  /** Metric key and its legend label. */
  keys: [string, string][];
  unit?: boolean;
  /** [a, b, why]: b is drawn only when it differs from a somewhere; otherwise the note says why not. */
  merge?: [string, string, string][];
  /** Drawn (as "no data") even when the run logs none of the keys. */
  always?: boolean;
  smooth?: boolean;
}

const CHARTS: ChartSpec[] = [
  {
    title: "Training accuracy",
    group: "Outcomes",
    yLabel: "fraction correct",
    keys: [["reward/acc", "accuracy (sampled)"]],
    unit: true,
  },
  {
    title: "Score and reward",
    group: "Outcomes",
    yLabel: "per response (+1 right, -1 wrong)",
    keys: [
      ["critic/score/mean", "score"],
      ["critic/rewards/mean", "reward"],
    ],
    merge: [["critic/score/mean", "critic/rewards/mean", "reward = score (no KL penalty in the reward)"]],
    always: true,
  },
  {
    title: "No-answer rate",
    group: "Outcomes",
    yLabel: "fraction without \\boxed{}",
    keys: [["reward/no_answer_rate", "no answer"]],
    unit: true,
  },
  {
    title: "Response length",
    group: "Outcomes",
    yLabel: "tokens",
    keys: [
      ["response_length/mean", "mean"],
      ["response_length/max", "max"],
    ],
  },
  {
    title: "Response length clip ratio",
    group: "Outcomes",
    yLabel: "fraction at max length",
    keys: [["response_length/clip_ratio", "clipped"]],
    unit: true,
  },
  {
    title: "Code ratio",
    group: "Tool use",
    yLabel: "fraction of responses",
    keys: [["tool/code_ratio", "code ratio"]],
    unit: true,
    always: true,
  },
  {
    title: "Code pass ratio",
    group: "Tool use",
    yLabel: "fraction of tool calls",
    keys: [["tool/pass_ratio", "pass ratio"]],
    unit: true,
    always: true,
  },
  {
    title: "Effective code ratio",
    group: "Tool use",
    yLabel: "fraction of responses with code",
    keys: [["tool/effective_code_ratio", "effective code ratio"]],
    unit: true,
    always: true,
  },
  {
    title: "Policy loss",
    group: "Optimisation",
    yLabel: "loss",
    keys: [["actor/pg_loss", "pg_loss"]],
  },
  {
    title: "Entropy",
    group: "Optimisation",
    yLabel: "nats per token",
    keys: [["actor/entropy", "entropy"]],
  },
  {
    title: "KL",
    group: "Optimisation",
    yLabel: "nats per token",
    keys: [
      ["actor/ppo_kl", "ppo_kl (old vs new)"],
      ["actor/kl_loss", "kl_loss (vs reference)"],
      ["actor/reward_kl_penalty", "reward KL penalty"],
    ],
  },
  {
    title: "Gradient norm",
    group: "Optimisation",
    yLabel: "L2 norm before clipping",
    keys: [
      ["actor/grad_norm", "actor"],
      ["critic/grad_norm", "critic"],
    ],
  },
  {
    title: "Learning rate",
    group: "Optimisation",
    yLabel: "learning rate",
    keys: [
      ["actor/lr", "actor"],
      ["critic/lr", "critic"],
    ],
    smooth: false,
  },
  {
    title: "Clip fractions",
    group: "Optimisation",
    yLabel: "fraction of tokens",
    keys: [
      ["actor/pg_clipfrac", "pg_clipfrac"],
      ["actor/pg_clipfrac_lower", "pg_clipfrac_lower (dual clip)"],
      ["critic/vf_clipfrac", "vf_clipfrac"],
    ],
  },
  {
    title: "Advantages and returns",
    group: "Optimisation",
    yLabel: "per token",
    keys: [
      ["critic/advantages/mean", "adv mean"],
      ["critic/advantages/max", "adv max"],
      ["critic/advantages/min", "adv min"],
      ["critic/returns/mean", "return mean"],
      ["critic/returns/max", "return max"],
      ["critic/returns/min", "return min"],
    ],
    merge: [
      ["critic/advantages/mean", "critic/returns/mean", "returns = advantages (no critic)"],
      ["critic/advantages/max", "critic/returns/max", "returns = advantages (no critic)"],
      ["critic/advantages/min", "critic/returns/min", "returns = advantages (no critic)"],
    ],
  },
  {
    title: "Critic",
    group: "Optimisation",
    yLabel: "value",
    keys: [
      ["critic/values/mean", "values mean"],
      ["critic/vf_loss", "vf_loss"],
      ["critic/vf_explained_var", "explained variance"],
    ],
  },
  {
    title: "Throughput",
    group: "Time",
    yLabel: "tokens/s per worker",
    keys: [["perf/throughput", "throughput"]],
  },
];

/** The phases of a step, stacked (timing_s/step holds them all, validation included). */
const TIMING_LAYERS: [string, string][] = [
  ["timing_s/gen", "gen"],
  ["timing_s/reward", "reward"],
  ["timing_s/old_log_prob", "old_log_prob"],
  ["timing_s/ref", "ref"],
  ["timing_s/values", "values"],
  ["timing_s/adv", "adv"],
  ["timing_s/update_critic", "update_critic"],
  ["timing_s/update_actor", "update_actor"],
  ["timing_s/testing", "testing"],
];

/** Each step's time by phase, and what the phases leave out of timing_s/step ("other"). */
function timingChart(run: RunData, axis: ReportAxis, xLabel: string, note?: string): string {
  const x = xOf(run, axis);
  const rows = run.metrics.filter((r) => typeof r["timing_s/step"] === "number");
  const layers: Series[] = TIMING_LAYERS.map(([key, label], i) => ({
    label,
    color: PALETTE[i % PALETTE.length]!,
    points: rows.filter((r) => typeof r[key] === "number").map((r) => [x(r), r[key]!]),
  }));
  const other: [number, number][] = rows.map((r) => {
    const parts = TIMING_LAYERS.reduce((a, [key]) => a + (typeof r[key] === "number" ? r[key] : 0), 0);
    return [x(r), Math.max(0, r["timing_s/step"]! - parts)];
  });
  // What the phases leave out of the step (e.g. weight sync, metrics), when there is any.
  if (other.some(([, y]) => y > 1e-6)) layers.push({ label: "other", color: "#cccccc", points: other });
  return stackedChart({
    title: "Time per step",
    yLabel: "seconds",
    xLabel,
    note,
    layers,
    describeX: describeX(run, axis),
  });
}

function describeX(run: RunData, axis: ReportAxis): (x: number) => string {
  if (axis === "step") {
    const wall = wallClock(run.metrics);
    return (x) =>
      hasWallClock(run.metrics) ? `step ${x} (${fmtNum(wall.get(x) ?? Number.NaN)} s)` : `step ${x}`;
  }
  const wall = wallClock(run.metrics);
  return (x) => {
    const step = [...wall].find(([, t]) => t === x)?.[0];
    return `${fmtNum(x)} s${step !== undefined ? ` (step ${step})` : ""}`;
  };
}

export interface ChartRenderOptions {
  axis?: ReportAxis;
  /** EMA weight of the smoothed lines (TensorBoard's slider); 0 draws the raw series alone. Default 0.6. */
  smoothing?: number;
}

/** Every chart of the report as SVG strings, in order, with the group each belongs to. */
export function reportCharts(
  run: RunData,
  compare?: RunData,
  options: ChartRenderOptions = {},
): { title: string; group: ChartSpec["group"]; svg: string }[] {
  const axis = options.axis ?? "step";
  const smoothing = options.smoothing ?? 0.6;
  const xLabel = axis === "step" ? "step" : "wall-clock (s, sum of timing_s/step)";
  const runs = (compare ? [run, compare] : [run]).map((r) => ({ ...r, metrics: withThroughput(r.metrics) }));
  const main = runs[0]!;
  const suffix = (r: RunData) => (compare ? ` (${r.label})` : "");
  const charts: { title: string; group: ChartSpec["group"]; svg: string }[] = [];
  const accSeries: Series[] = [];
  for (const [ri, r] of runs.entries()) {
    const data = { ...r, metrics: withMeanAccuracy(r.metrics) };
    accSeries.push(seriesOf(data, "val/acc", `mean${suffix(r)}`, "#111111", ri > 0, axis));
    if (ri > 0) continue;
    for (const [i, s] of validationSources(r.metrics).entries())
      accSeries.push(seriesOf(data, `val/${s}/acc`, s, PALETTE[i % PALETTE.length]!, false, axis));
  }
  charts.push({
    title: "Validation accuracy",
    group: "Outcomes",
    svg: lineChart({
      title: "Validation accuracy",
      yLabel: "accuracy (greedy)",
      xLabel,
      series: accSeries,
      unit: true,
      describeX: describeX(main, axis),
    }),
  });
  for (const c of CHARTS) {
    const series: Series[] = [];
    const notes = new Set<string>();
    for (const [ri, r] of runs.entries()) {
      const skip = new Set<string>();
      for (const [a, b, why] of c.merge ?? [])
        if (sameSeries(r.metrics, a, b)) {
          skip.add(b);
          if (ri === 0) notes.add(why);
        }
      for (const [ki, [key, label]] of c.keys.entries()) {
        if (skip.has(key)) continue;
        const color = ri === 0 ? PALETTE[ki % PALETTE.length]! : COMPARE_COLORS[ki % COMPARE_COLORS.length]!;
        series.push(seriesOf(r, key, `${label}${suffix(r)}`, color, ri > 0, axis));
      }
    }
    const hasData = series.some((s) => s.points.length > 0);
    if (!hasData && !c.always) continue;
    const gaps = series.some((s) => s.points.some(([, y]) => !Number.isFinite(y)));
    const undefinedNote = gaps ? "gaps: undefined, no tool call at that step" : "";
    charts.push({
      title: c.title,
      group: c.group,
      svg: lineChart({
        title: c.title,
        yLabel: c.yLabel,
        xLabel,
        series,
        unit: c.unit,
        smoothing: c.smooth === false ? 0 : smoothing,
        note: [...notes, undefinedNote].filter(Boolean).join("; ") || undefined,
        describeX: describeX(main, axis),
      }),
    });
  }
  if (hasWallClock(main.metrics))
    charts.push({
      title: "Time per step",
      group: "Time",
      svg: timingChart(main, axis, xLabel, compare ? `${main.label} only` : undefined),
    });
  return charts;
}

// ---------------------------------------------------------------------------------------------------
// Trajectories

type Span = 0 | 1 | 2; // plain, code, observation

/** Classifies each character of a response: code (```python blocks) and tool observations. */
export function classifyResponse(s: TrajectorySample): Span[] {
  const text = s.response;
  const cls: Span[] = new Array(text.length).fill(0);
  const mark = (a: number, b: number, c: Span) => {
    for (let i = Math.max(0, a); i < Math.min(text.length, b); i++) cls[i] = c;
  };
  for (const m of text.matchAll(/```python[^\n]*\n[\s\S]*?(?:```\n?|$)/g))
    mark(m.index!, m.index! + m[0].length, 1);
  const ranges = s.observation_ranges ?? s.tool_calls?.flatMap((c) => (c.range ? [c.range] : [])) ?? [];
  if (ranges.length) for (const [a, b] of ranges) mark(a, b, 2);
  else
    for (const m of text.matchAll(/```output\n[\s\S]*?(?:\n```\n?|$)/g))
      mark(m.index!, m.index! + m[0].length, 2);
  return cls;
}

/** The response as HTML: escaped, code and observations in highlighted spans. */
export function highlightResponse(s: TrajectorySample): string {
  const cls = classifyResponse(s);
  const text = s.response;
  let out = "";
  let i = 0;
  while (i < text.length) {
    let j = i;
    while (j < text.length && cls[j] === cls[i]) j++;
    const chunk = escapeHtml(text.slice(i, j));
    out +=
      cls[i] === 1
        ? `<span class="code">${chunk}</span>`
        : cls[i] === 2
          ? `<span class="obs">${chunk}</span>`
          : chunk;
    i = j;
  }
  return out;
}

/** Picks up to `max` samples: from the first and the last step, those with tool calls first. */
export function pickSamples(samples: TrajectorySample[], max: number): TrajectorySample[] {
  if (samples.length <= max) return samples;
  const steps = [...new Set(samples.map((s) => s.step))].sort((a, b) => a - b);
  const hasCode = (s: TrajectorySample) => (s.tool_calls?.length ?? 0) > 0 || /```python/.test(s.response);
  const from = (step: number, k: number) => {
    const at = samples.filter((s) => s.step === step);
    const ordered = [
      ...at.filter((s) => hasCode(s) && s.correct),
      ...at.filter((s) => hasCode(s) && !s.correct),
      ...at.filter((s) => !hasCode(s)),
    ];
    return ordered.slice(0, k);
  };
  if (steps.length === 1) return from(steps[0]!, max);
  const first = from(steps[0]!, Math.floor(max / 2));
  return [...first, ...from(steps[steps.length - 1]!, max - first.length)];
}

function sampleHtml(s: TrajectorySample): string {
  const calls = s.tool_calls?.length ?? 0;
  const passed = s.tool_calls?.filter((c) => c.success).length ?? 0;
  const verdict = s.correct === undefined ? "" : s.correct ? "correct" : "wrong";
  const facts = [
    `step ${s.step}`,
    s.split ?? "train",
    s.data_source,
    `score ${fmtNum(s.score)}`,
    verdict,
    s.ground_truth !== undefined ? `answer ${s.ground_truth}` : undefined,
    s.extracted !== undefined ? `extracted ${s.extracted ?? "none"}` : undefined,
    s.tool_calls ? `${calls} call${calls === 1 ? "" : "s"}, ${passed} passed` : undefined,
  ].filter((x): x is string => !!x);
  return [
    `<div class="sample ${verdict}">`,
    `<div class="facts">${facts.map((f) => `<span>${escapeHtml(f)}</span>`).join("")}</div>`,
    `<details><summary>prompt</summary><pre>${escapeHtml(s.prompt)}</pre></details>`,
    `<pre class="response">${highlightResponse(s)}</pre>`,
    "</div>",
  ].join("\n");
}

// ---------------------------------------------------------------------------------------------------
// Page

const CSS = `
body{font-family:${FONT};margin:24px;color:#222;background:#fafafa;max-width:1320px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px} h3{font-size:14px;margin:16px 0 6px;color:#444}
.sub{color:#666;font-size:13px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,420px);gap:12px}
.charts svg{border:1px solid #ddd;background:#fff}
.charts svg rect.hover:hover{fill-opacity:0.06}
.axis{font-size:13px;margin:4px 0 8px} .axis label{margin-right:14px;cursor:pointer}
.by-wall{display:none} input[name=xaxis]{display:none}
.axis label::before{content:"\\25CB  "}
#x-step:checked ~ .axis label[for=x-step],#x-wall:checked ~ .axis label[for=x-wall]{font-weight:bold}
#x-step:checked ~ .axis label[for=x-step]::before,#x-wall:checked ~ .axis label[for=x-wall]::before{content:"\\25CF  "}
#x-wall:checked ~ .by-wall{display:block} #x-wall:checked ~ .by-step{display:none}
table{border-collapse:collapse;font-size:13px;background:#fff}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top} th{background:#f0f0f0}
table.summary td{max-width:36em;overflow-wrap:anywhere} table.summary td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv td{border:none;padding:0 10px 0 0;font-size:12px}
.sample{border:1px solid #ddd;border-left:5px solid #999;background:#fff;margin:10px 0;padding:8px 12px}
.sample.correct{border-left-color:#2ca02c} .sample.wrong{border-left-color:#d62728}
.facts span{display:inline-block;font-size:12px;background:#eee;border-radius:3px;padding:1px 6px;margin:0 6px 4px 0}
pre{white-space:pre-wrap;word-break:break-word;font-family:DejaVu Sans Mono,Liberation Mono,monospace;font-size:12px;margin:4px 0}
.code{background:#e8f0fe;color:#0b3d91} .obs{background:#fff3cd;color:#7a4b00;font-weight:bold}
.legend span{font-size:12px;padding:1px 6px;margin-right:8px}
summary{cursor:pointer;font-size:12px;color:#555}
`;

/**
 * A path as the report shows it: relative to the working directory when it lies below it, else from
 * the run directory's parent on (no one's home or work directory in a shared report).
 */
export function displayPath(path: string, runDir: string): string {
  const abs = resolve(path);
  const rel = relative(process.cwd(), abs);
  if (rel && !rel.startsWith("..") && !isAbsolute(rel)) return rel;
  if (rel === "") return ".";
  const parent = dirname(resolve(runDir));
  const fromParent = relative(parent, abs);
  return fromParent && !fromParent.startsWith("..") ? fromParent : basename(abs);
}

/** One summary value as HTML: numbers formatted, objects as a small key/value table, paths shortened. */
function summaryCell(v: unknown, runDir: string): { html: string; numeric: boolean } {
  if (typeof v === "number") return { html: escapeHtml(fmtNum(v)), numeric: true };
  if (v === undefined) return { html: "", numeric: false };
  if (v === null) return { html: "none", numeric: false };
  if (typeof v === "string")
    return { html: escapeHtml(isAbsolute(v) ? displayPath(v, runDir) : v), numeric: false };
  if (typeof v === "object" && !Array.isArray(v)) {
    const rows = Object.entries(v as Record<string, unknown>).map(
      ([k, x]) => `<tr><td>${escapeHtml(k)}</td><td>${summaryCell(x, runDir).html}</td></tr>`,
    );
    return { html: `<table class="kv">${rows.join("")}</table>`, numeric: false };
  }
  return { html: escapeHtml(JSON.stringify(v)), numeric: false };
}

function summaryTable(run: RunData, compare?: RunData): string {
  const runs = compare ? [run, compare] : [run];
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary ?? {})))];
  if (keys.length === 0) return `<p class="sub">no summary.json</p>`;
  return [
    `<table class="summary">`,
    `<tr><th>summary</th>${runs.map((r) => `<th>${escapeHtml(r.label)}</th>`).join("")}</tr>`,
    ...keys.map((k) => {
      const cells = runs.map((r) => {
        const c = summaryCell(r.summary?.[k], r.dir);
        return `<td${c.numeric ? ` class="num"` : ""}>${c.html}</td>`;
      });
      return `<tr><td>${escapeHtml(k)}</td>${cells.join("")}</tr>`;
    }),
    "</table>",
  ].join("\n");
}

export interface ReportOptions {
  /** A second run to overlay (dashed), e.g. the C=0 control. */
  compareDir?: string;
  /** Most trajectories shown; default 8. */
  maxSamples?: number;
  /** Skip report.png. */
  noPng?: boolean;
  /** The x axis shown first in the page (both are there) and drawn in report.png. Default "step". */
  axis?: ReportAxis;
  /** EMA weight of the smoothed lines; 0 draws the raw series alone. Default 0.6. */
  smoothing?: number;
}

function loadRun(dir: string): RunData {
  // runs/<experiment>-<yyyymmdd>-<hhmmss>: the experiment name alone keeps legends short
  const label = basename(resolve(dir)).replace(/-\d{8}-\d{6}$/, "");
  const summary = readSummary(dir);
  // A run known only by its summary (metrics.jsonl not kept) still gets its table, without charts.
  const metrics = summary && !existsSync(join(dir, "metrics.jsonl")) ? [] : readRunMetrics(dir);
  return { dir, label, metrics, summary };
}

function chartGrid(charts: ReturnType<typeof reportCharts>): string {
  const groups = [...new Set(charts.map((c) => c.group))];
  return groups
    .map(
      (g) =>
        `<h3>${escapeHtml(g)}</h3><div class="charts">${charts
          .filter((c) => c.group === g)
          .map((c) => c.svg)
          .join("\n")}</div>`,
    )
    .join("\n");
}

/** The report page as a string. */
export function renderReportHtml(runDir: string, options: ReportOptions = {}): string {
  const run = loadRun(runDir);
  const compare = options.compareDir ? loadRun(options.compareDir) : undefined;
  const chartOptions = { smoothing: options.smoothing };
  const samples = pickSamples(readSamples(runDir), options.maxSamples ?? 8);
  const steps = run.metrics.length
    ? `${run.metrics[0]!.step}..${run.metrics[run.metrics.length - 1]!.step}`
    : "none";
  const wall = hasWallClock(run.metrics);
  const smoothing = options.smoothing ?? 0.6;
  const curves = !run.metrics.length
    ? `<p class="sub">no metrics.jsonl in this directory: the per-step charts need the run's metrics</p>`
    : [
        `<div class="sub">Faint lines: the raw values; solid: smoothed (EMA ${smoothing}, as TensorBoard's slider).` +
          " Hover a chart for the values at a step.</div>",
        wall
          ? `<input type="radio" name="xaxis" id="x-step"${options.axis === "wall" ? "" : " checked"}>` +
            `<input type="radio" name="xaxis" id="x-wall"${options.axis === "wall" ? " checked" : ""}>` +
            `<div class="axis">x axis: <label for="x-step">step</label><label for="x-wall">wall-clock (seconds of training)</label></div>`
          : "",
        `<div class="by-step">${chartGrid(reportCharts(run, compare, { ...chartOptions, axis: "step" }))}</div>`,
        wall
          ? `<div class="by-wall">${chartGrid(reportCharts(run, compare, { ...chartOptions, axis: "wall" }))}</div>`
          : "",
      ].join("\n");
  return [
    "<!DOCTYPE html>",
    `<html lang="en"><head><meta charset="utf-8">`,
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`,
    `<title>${escapeHtml(`ToRL run ${run.label}`)}</title><style>${CSS}</style></head><body>`,
    `<h1>ToRL run ${escapeHtml(run.label)}</h1>`,
    `<div class="sub">${escapeHtml(displayPath(runDir, runDir))} &middot; ${run.metrics.length} logged steps (${steps})${
      compare ? ` &middot; dashed: ${escapeHtml(compare.label)}` : ""
    }</div>`,
    `<h2>Training curves</h2>`,
    // The radio inputs must be siblings of the chart blocks for the CSS switch; hidden, the labels show.
    `<div class="curves">${curves}</div>`,
    `<h2>Summary</h2>${summaryTable(run, compare)}`,
    `<h2>Sample trajectories</h2>`,
    `<div class="legend"><span class="code">model's code</span><span class="obs">tool output (masked from the loss)</span></div>`,
    samples.length ? samples.map(sampleHtml).join("\n") : `<p class="sub">no samples.jsonl</p>`,
    "</body></html>",
  ].join("\n");
}

/** The charts (and a title line) drawn into one PNG with @napi-rs/canvas. */
export function renderReportPng(runDir: string, options: ReportOptions = {}): Buffer {
  const run = loadRun(runDir);
  const compare = options.compareDir ? loadRun(options.compareDir) : undefined;
  const axis = options.axis === "wall" && hasWallClock(run.metrics) ? "wall" : "step";
  const charts = run.metrics.length ? reportCharts(run, compare, { axis, smoothing: options.smoothing }) : [];
  const cols = 3;
  const cw = 420;
  const ch = 260;
  const gap = 10;
  const top = 44;
  const width = cols * cw + (cols + 1) * gap;
  const height = top + Math.max(1, Math.ceil(charts.length / cols)) * (ch + gap) + gap;
  const canvas = createCanvas(width, height);
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fafafa";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#222";
  ctx.font = "bold 20px DejaVu Sans, sans-serif";
  ctx.fillText(`ToRL run ${run.label}${compare ? `  (dashed: ${compare.label})` : ""}`, gap + 4, 30);
  if (charts.length === 0) {
    ctx.font = "14px DejaVu Sans, sans-serif";
    ctx.fillText("no metrics.jsonl: no charts", gap + 4, top + 30);
  }
  charts.forEach((c, i) => {
    const img = new Image();
    img.src = Buffer.from(c.svg);
    ctx.drawImage(img, gap + (i % cols) * (cw + gap), top + Math.floor(i / cols) * (ch + gap), cw, ch);
  });
  return canvas.toBuffer("image/png");
}

/** Writes report.html and report.png into the run directory; returns their paths. */
export async function writeReport(
  runDir: string,
  options: ReportOptions = {},
): Promise<{ html: string; png?: string }> {
  const html = join(runDir, "report.html");
  writeFileSync(html, renderReportHtml(runDir, options));
  if (options.noPng) return { html };
  const png = join(runDir, "report.png");
  writeFileSync(png, renderReportPng(runDir, options));
  return { html, png };
}

// ---------------------------------------------------------------------------------------------------
// Headless Chromium (render checks)

/** The Chromium binary on PATH (Debian's `chromium`), or undefined. */
export function findChromium(): string | undefined {
  for (const name of ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]) {
    try {
      const p = execFileSync("which", [name], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim();
      if (p) return p;
    } catch {
      // not this one
    }
  }
  return undefined;
}

export class ChromiumError extends Error {
  override name = "ChromiumError";
}

/** Screenshots a local HTML file with headless Chromium (offline flags, a fresh profile). */
export async function screenshotHtml(
  htmlFile: string,
  pngFile: string,
  options: { width?: number; height?: number; timeoutMs?: number; chromium?: string } = {},
): Promise<void> {
  const bin = options.chromium ?? findChromium();
  if (!bin)
    throw new ChromiumError(
      "chromium not found on PATH (Debian: apt-get install -y chromium; see .ci/setup.d/chromium.sh)",
    );
  const profile = mkdtempSync(join(tmpdir(), "torl-chromium-"));
  const args = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    `--user-data-dir=${profile}`,
    `--screenshot=${resolve(pngFile)}`,
    `--window-size=${options.width ?? 1360},${options.height ?? 1400}`,
    pathToFileURL(resolve(htmlFile)).href,
  ];
  try {
    await new Promise<void>((ok, fail) => {
      const child = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      child.stderr.on("data", (d) => {
        err = (err + d).slice(-4000);
      });
      const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
      child.on("error", (e) => {
        clearTimeout(timer);
        fail(new ChromiumError(`cannot start ${bin}: ${e.message}`));
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        if (code === 0 && existsSync(pngFile)) ok();
        else
          fail(
            new ChromiumError(
              `${bin} exited with ${signal ?? code} and no screenshot: ${err.trim().slice(-1000)}`,
            ),
          );
      });
    });
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}

export const reportCommand: CliCommand = {
  summary: "write report.html and report.png for a run directory",
  usage: [
    "usage: pnpm torl report RUN_DIR [--compare OTHER_RUN_DIR] [--samples N] [--x step|wall]",
    "                        [--smoothing W] [--screenshot FILE.png]",
    "",
    "Reads RUN_DIR/metrics.jsonl, summary.json and samples.jsonl; writes RUN_DIR/report.html (self-contained)",
    "and RUN_DIR/report.png (the charts). --compare overlays a second run, dashed (e.g. the C=0 control).",
    "--x wall: seconds of training (the sum of timing_s/step) on the x axis of report.png and first in the",
    "page (the page switches between both). --smoothing W: EMA weight in [0, 1) of the smoothed lines drawn",
    "over the raw values (default 0.6; 0: raw only). --samples N: trajectories shown (default 8).",
    "--screenshot also renders the HTML page with headless Chromium into FILE.png.",
  ].join("\n"),
  async run(args) {
    const { flags, positionals } = parseFlags(
      args,
      {
        compare: { type: "string" },
        samples: { type: "integer", min: 0 },
        x: { type: "string", choices: ["step", "wall"] },
        smoothing: { type: "number", min: 0, max: 0.999 },
        screenshot: { type: "string" },
      },
      { positionals: true },
    );
    const [dir, ...extra] = positionals;
    if (!dir) throw new UsageError("RUN_DIR is required");
    if (extra.length) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const maxSamples = flags.samples;
    const out = await writeReport(dir, {
      compareDir: flags.compare,
      maxSamples,
      axis: flags.x,
      smoothing: flags.smoothing,
    });
    console.log(`wrote ${out.html}`);
    if (out.png) console.log(`wrote ${out.png}`);
    if (flags.screenshot) {
      await screenshotHtml(out.html, flags.screenshot);
      console.log(`wrote ${flags.screenshot}`);
    }
    return 0;
  },
};
