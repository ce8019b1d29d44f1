/**
 * The run report's page and picture: report.html (self-contained: inline CSS and SVG, no scripts,
 * nothing fetched) and report.png (the same SVG charts composed with @napi-rs/canvas).
 */
import { writeFileSync } from "node:fs";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { createCanvas, Image } from "@napi-rs/canvas";
import { escapeHtml, FONT, fmtNum } from "./report-charts.js";
import { hasWallClock, type ReportAxis, reportCharts } from "./report-curves.js";
import { loadRun, type RunData, readSamples } from "./report-run.js";
import { pickSamples, sampleHtml } from "./report-samples.js";

export const CSS = `
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
  /** Legend names of the run and of the compared run (default: the run's name, or its setting). */
  label?: string;
  compareLabel?: string;
}

/** What sets a recipe run apart, from its summary: C, the penalty, the mask. */
function settingOf(run: RunData): string {
  const s = run.summary ?? {};
  const parts = [typeof s.num_llm_calls_available === "number" ? `C=${s.num_llm_calls_available}` : ""];
  if (s.execution_error_penalty === true) parts.push("penalty");
  if (s.mask_tool_output === false) parts.push("mask off");
  return parts.filter(Boolean).join(", ");
}

/**
 * The run and the compared run, each with a legend name that tells them apart: given names first,
 * else the run names, else their settings, else their directories.
 */
function loadRuns(runDir: string, options: ReportOptions): { run: RunData; compare?: RunData } {
  const run = loadRun(runDir);
  const compare = options.compareDir ? loadRun(options.compareDir) : undefined;
  if (compare && run.label === compare.label) {
    const [a, b] = [settingOf(run), settingOf(compare)];
    const [x, y] = a && b && a !== b ? [a, b] : [basename(resolve(run.dir)), basename(resolve(compare.dir))];
    run.label = x;
    compare.label = y;
  }
  if (options.label) run.label = options.label;
  if (compare && options.compareLabel) compare.label = options.compareLabel;
  return { run, compare };
}

/** Charts under a heading per group, in the order the groups first appear. */
export function chartGrid(charts: { group: string; svg: string }[]): string {
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
  const { run, compare } = loadRuns(runDir, options);
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
  const { run, compare } = loadRuns(runDir, options);
  const axis = options.axis === "wall" && hasWallClock(run.metrics) ? "wall" : "step";
  const charts = run.metrics.length ? reportCharts(run, compare, { axis, smoothing: options.smoothing }) : [];
  return chartsPng(
    `ToRL run ${run.label}${compare ? `  (dashed: ${compare.label})` : ""}`,
    charts,
    "no metrics.jsonl: no charts",
  );
}

/** SVG charts (420 x 260 each) laid out three to a row under a title, drawn with @napi-rs/canvas. */
export function chartsPng(title: string, charts: { svg: string }[], emptyNote: string): Buffer {
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
  ctx.fillText(title, gap + 4, 30);
  if (charts.length === 0) {
    ctx.font = "14px DejaVu Sans, sans-serif";
    ctx.fillText(emptyNote, gap + 4, top + 30);
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
