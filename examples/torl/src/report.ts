/**
 * The run report: `runs/<name>/report.html` (self-contained: inline CSS and SVG, no scripts, nothing
 * fetched) and `runs/<name>/report.png` (the same SVG charts composed with @napi-rs/canvas), from
 * the run's metrics.jsonl, summary.json and samples.jsonl.
 *
 * Charts per step: validation accuracy (per data source and the mean), reward, code ratio, pass ratio,
 * effective code ratio and response length; a second run (e.g. the C=0 control) can be overlaid,
 * dashed. Below them, sample trajectories with the model's code and the tool's observations highlighted.
 *
 * `pnpm torl report runs/<name> [--compare runs/<other>]`; the trainer calls `writeReport(runDir)`.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createCanvas, Image } from "@napi-rs/canvas";
import { type CliCommand, InputError, parseFlags, UsageError } from "@torl-ts/core";

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
// Charts (SVG strings shared by the HTML and the PNG)

/** Escapes text for HTML and SVG element content and attribute values. */
export function escapeHtml(s: string): string {
  return s
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const PALETTE = [
  "#1f77b4",
  "#d62728",
  "#2ca02c",
  "#9467bd",
  "#ff7f0e",
  "#8c564b",
  "#e377c2",
  "#17becf",
  "#bcbd22",
  "#7f7f7f",
];
/** Colours of the overlaid (compared) run's series. */
const COMPARE_COLORS = ["#555555", "#aaaaaa"];
const FONT = "DejaVu Sans, Liberation Sans, Arial, sans-serif";

export interface Series {
  label: string;
  color: string;
  dashed?: boolean;
  points: [number, number][];
}

function niceStep(span: number, ticks: number): number {
  const raw = span / Math.max(1, ticks);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
}

function fmtNum(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 1e4) return v.toExponential(1);
  return String(Number(v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 3)));
}

/** A line chart as a standalone SVG string. `unit` fixes the y axis to [0, 1]. */
export function lineChart(opts: {
  title: string;
  series: Series[];
  width?: number;
  height?: number;
  unit?: boolean;
}): string {
  const W = opts.width ?? 420;
  const H = opts.height ?? 260;
  const m = { l: 48, r: 12, t: 28, b: 34 };
  // Series without a single point (a metric this run does not log) stay out of the chart and legend.
  const shown = opts.series.filter((s) =>
    s.points.some(([x, y]) => Number.isFinite(x) && Number.isFinite(y)),
  );
  // Legend entries flow left to right and wrap (10 px text is ~5.8 px per character).
  const entryWidth = (s: Series) => 28 + s.label.length * 5.8;
  const legend: { s: Series; x: number; row: number }[] = [];
  let lx0 = 0;
  let row = 0;
  for (const s of shown) {
    if (lx0 > 0 && lx0 + entryWidth(s) > W - m.l - m.r) {
      row++;
      lx0 = 0;
    }
    legend.push({ s, x: lx0, row });
    lx0 += entryWidth(s) + 8;
  }
  const legendRows = shown.length ? row + 1 : 0;
  const plotH = H - m.t - m.b - legendRows * 15;
  const plotW = W - m.l - m.r;
  const all = opts.series
    .flatMap((s) => s.points)
    .filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="${FONT}" role="img" aria-label="${escapeHtml(opts.title)}">`,
    `<title>${escapeHtml(opts.title)}</title>`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${m.l}" y="18" font-size="14" font-weight="bold" fill="#222">${escapeHtml(opts.title)}</text>`,
  ];
  if (all.length === 0) {
    parts.push(
      `<text x="${W / 2}" y="${m.t + plotH / 2}" font-size="12" fill="#888" text-anchor="middle">no data</text>`,
      "</svg>",
    );
    return parts.join("");
  }
  let x0 = Math.min(...all.map((p) => p[0]));
  let x1 = Math.max(...all.map((p) => p[0]));
  if (x0 === x1) {
    x0 -= 1;
    x1 += 1;
  }
  let y0 = opts.unit ? 0 : Math.min(...all.map((p) => p[1]));
  let y1 = opts.unit ? 1 : Math.max(...all.map((p) => p[1]));
  if (!opts.unit) {
    if (y0 === y1) {
      y0 -= Math.abs(y0) * 0.1 || 1;
      y1 += Math.abs(y1) * 0.1 || 1;
    }
    const pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  const yStep = niceStep(y1 - y0, 5);
  const xStep = Math.max(1, niceStep(x1 - x0, 6));
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0)) * plotW;
  const sy = (y: number) => m.t + plotH - ((y - y0) / (y1 - y0)) * plotH;
  for (let y = Math.ceil(y0 / yStep) * yStep; y <= y1 + 1e-9; y += yStep) {
    const py = sy(y).toFixed(1);
    parts.push(
      `<line x1="${m.l}" x2="${W - m.r}" y1="${py}" y2="${py}" stroke="#e5e5e5"/>`,
      `<text x="${m.l - 5}" y="${py}" dy="4" font-size="10" fill="#555" text-anchor="end">${fmtNum(y)}</text>`,
    );
  }
  for (let x = Math.ceil(x0 / xStep) * xStep; x <= x1 + 1e-9; x += xStep) {
    const px = sx(x).toFixed(1);
    parts.push(
      `<line x1="${px}" x2="${px}" y1="${m.t + plotH}" y2="${m.t + plotH + 4}" stroke="#888"/>`,
      `<text x="${px}" y="${m.t + plotH + 15}" font-size="10" fill="#555" text-anchor="middle">${fmtNum(x)}</text>`,
    );
  }
  parts.push(
    `<rect x="${m.l}" y="${m.t}" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`,
    `<text x="${m.l + plotW / 2}" y="${m.t + plotH + 28}" font-size="10" fill="#555" text-anchor="middle">step</text>`,
  );
  // Dashed (compared) series first, so the run itself is drawn on top.
  for (const s of [...opts.series].sort((a, b) => Number(!!b.dashed) - Number(!!a.dashed))) {
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (pts.length === 0) continue;
    const coords = pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`);
    const dash = s.dashed ? ` stroke-dasharray="6 4"` : "";
    if (pts.length > 1)
      parts.push(
        `<polyline points="${coords.join(" ")}" fill="none" stroke="${s.color}" stroke-width="2"${dash}/>`,
      );
    if (pts.length <= 40)
      for (const c of coords) {
        const [cx, cy] = c.split(",");
        parts.push(`<circle cx="${cx}" cy="${cy}" r="2.5" fill="${s.color}"/>`);
      }
  }
  legend.forEach(({ s, x, row }) => {
    const lx = m.l + x;
    const ly = H - legendRows * 15 + row * 15 + 4;
    const dash = s.dashed ? ` stroke-dasharray="6 4"` : "";
    parts.push(
      `<line x1="${lx}" x2="${lx + 18}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2"${dash}/>`,
      `<text x="${lx + 22}" y="${ly}" dy="4" font-size="10" fill="#333">${escapeHtml(s.label)}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("");
}

interface RunData {
  dir: string;
  label: string;
  metrics: Row[];
  summary?: Record<string, unknown>;
}

function seriesOf(run: RunData, key: string, label: string, color: string, dashed: boolean): Series {
  return {
    label,
    color,
    dashed,
    points: run.metrics.filter((r) => typeof r[key] === "number").map((r) => [r.step, r[key]!]),
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

const METRIC_CHARTS: { title: string; keys: [string, string][]; unit?: boolean }[] = [
  {
    title: "Reward",
    keys: [
      ["critic/score/mean", "score"],
      ["critic/rewards/mean", "reward"],
    ],
  },
  { title: "Code ratio", keys: [["tool/code_ratio", "code ratio"]], unit: true },
  { title: "Code pass ratio", keys: [["tool/pass_ratio", "pass ratio"]], unit: true },
  {
    title: "Effective code ratio",
    keys: [["tool/effective_code_ratio", "effective code ratio"]],
    unit: true,
  },
  { title: "Response length (tokens)", keys: [["response_length/mean", "mean"]] },
];

/** Every chart of the report as SVG strings, in order. */
export function reportCharts(run: RunData, compare?: RunData): { title: string; svg: string }[] {
  const runs = compare ? [run, compare] : [run];
  const suffix = (r: RunData) => (compare ? ` (${r.label})` : "");
  const charts: { title: string; svg: string }[] = [];
  const accSeries: Series[] = [];
  for (const [ri, r] of runs.entries()) {
    const data = { ...r, metrics: withMeanAccuracy(r.metrics) };
    accSeries.push(seriesOf(data, "val/acc", `mean${suffix(r)}`, "#111111", ri > 0));
    if (ri > 0) continue;
    for (const [i, s] of validationSources(run.metrics).entries())
      accSeries.push(seriesOf(data, `val/${s}/acc`, s, PALETTE[i % PALETTE.length]!, false));
  }
  charts.push({
    title: "Validation accuracy",
    svg: lineChart({ title: "Validation accuracy", series: accSeries, unit: true }),
  });
  for (const c of METRIC_CHARTS) {
    const series: Series[] = [];
    for (const [ri, r] of runs.entries())
      for (const [ki, [key, label]] of c.keys.entries()) {
        const color = ri === 0 ? PALETTE[ki % PALETTE.length]! : COMPARE_COLORS[ki % 2]!;
        series.push(seriesOf(r, key, `${label}${suffix(r)}`, color, ri > 0));
      }
    charts.push({ title: c.title, svg: lineChart({ title: c.title, series, unit: c.unit }) });
  }
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
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.sub{color:#666;font-size:13px}
.charts{display:grid;grid-template-columns:repeat(3,420px);gap:12px}
.charts svg{border:1px solid #ddd;background:#fff}
table{border-collapse:collapse;font-size:13px;background:#fff}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right} th{background:#f0f0f0} td:first-child,th:first-child{text-align:left}
.sample{border:1px solid #ddd;border-left:5px solid #999;background:#fff;margin:10px 0;padding:8px 12px}
.sample.correct{border-left-color:#2ca02c} .sample.wrong{border-left-color:#d62728}
.facts span{display:inline-block;font-size:12px;background:#eee;border-radius:3px;padding:1px 6px;margin:0 6px 4px 0}
pre{white-space:pre-wrap;word-break:break-word;font-family:DejaVu Sans Mono,Liberation Mono,monospace;font-size:12px;margin:4px 0}
.code{background:#e8f0fe;color:#0b3d91} .obs{background:#fff3cd;color:#7a4b00;font-weight:bold}
.legend span{font-size:12px;padding:1px 6px;margin-right:8px}
summary{cursor:pointer;font-size:12px;color:#555}
`;

function summaryTable(run: RunData, compare?: RunData): string {
  const runs = compare ? [run, compare] : [run];
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary ?? {})))];
  if (keys.length === 0) return `<p class="sub">no summary.json</p>`;
  const cell = (v: unknown) =>
    escapeHtml(
      typeof v === "number"
        ? fmtNum(v)
        : v === undefined
          ? ""
          : typeof v === "string"
            ? v
            : JSON.stringify(v),
    );
  return [
    "<table>",
    `<tr><th>summary</th>${runs.map((r) => `<th>${escapeHtml(r.label)}</th>`).join("")}</tr>`,
    ...keys.map(
      (k) =>
        `<tr><td>${escapeHtml(k)}</td>${runs.map((r) => `<td>${cell(r.summary?.[k])}</td>`).join("")}</tr>`,
    ),
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
}

function loadRun(dir: string): RunData {
  // runs/<experiment>-<yyyymmdd>-<hhmmss>: the experiment name alone keeps legends short
  const label = basename(resolve(dir)).replace(/-\d{8}-\d{6}$/, "");
  return { dir, label, metrics: readRunMetrics(dir), summary: readSummary(dir) };
}

/** The report page as a string. */
export function renderReportHtml(runDir: string, options: ReportOptions = {}): string {
  const run = loadRun(runDir);
  const compare = options.compareDir ? loadRun(options.compareDir) : undefined;
  const charts = reportCharts(run, compare);
  const samples = pickSamples(readSamples(runDir), options.maxSamples ?? 8);
  const steps = run.metrics.length
    ? `${run.metrics[0]!.step}..${run.metrics[run.metrics.length - 1]!.step}`
    : "none";
  return [
    "<!DOCTYPE html>",
    `<html lang="en"><head><meta charset="utf-8">`,
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`,
    `<title>${escapeHtml(`ToRL run ${run.label}`)}</title><style>${CSS}</style></head><body>`,
    `<h1>ToRL run ${escapeHtml(run.label)}</h1>`,
    `<div class="sub">${escapeHtml(resolve(runDir))} &middot; ${run.metrics.length} logged steps (${steps})${
      compare ? ` &middot; dashed: ${escapeHtml(compare.label)}` : ""
    }</div>`,
    `<h2>Training curves</h2><div class="charts">${charts.map((c) => c.svg).join("\n")}</div>`,
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
  const charts = reportCharts(run, compare);
  const cols = 3;
  const cw = 420;
  const ch = 260;
  const gap = 10;
  const top = 44;
  const width = cols * cw + (cols + 1) * gap;
  const height = top + Math.ceil(charts.length / cols) * (ch + gap) + gap;
  const canvas = createCanvas(width, height);
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fafafa";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#222";
  ctx.font = "bold 20px DejaVu Sans, sans-serif";
  ctx.fillText(`ToRL run ${run.label}${compare ? `  (dashed: ${compare.label})` : ""}`, gap + 4, 30);
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
    "usage: pnpm torl report RUN_DIR [--compare OTHER_RUN_DIR] [--samples N] [--screenshot FILE.png]",
    "",
    "Reads RUN_DIR/metrics.jsonl, summary.json and samples.jsonl; writes RUN_DIR/report.html (self-contained)",
    "and RUN_DIR/report.png (the charts). --compare overlays a second run, dashed (e.g. the C=0 control).",
    "--screenshot also renders the HTML page with headless Chromium into FILE.png.",
  ].join("\n"),
  async run(args) {
    const { flags, positionals } = parseFlags(
      args,
      { compare: { type: "string" }, samples: { type: "integer", min: 0 }, screenshot: { type: "string" } },
      { positionals: true },
    );
    const [dir, ...extra] = positionals;
    if (!dir) throw new UsageError("RUN_DIR is required");
    if (extra.length) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const maxSamples = flags.samples;
    const out = await writeReport(dir, { compareDir: flags.compare, maxSamples });
    console.log(`wrote ${out.html}`);
    if (out.png) console.log(`wrote ${out.png}`);
    if (flags.screenshot) {
      await screenshotHtml(out.html, flags.screenshot);
      console.log(`wrote ${flags.screenshot}`);
    }
    return 0;
  },
};
