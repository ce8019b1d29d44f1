/**
 * Settings compared over seeds: `pnpm torl report --group NAME=DIR,DIR,... [--group ...] --out DIR`.
 * Each setting (e.g. the default recipe, C=0, the execution penalty on) was run with several seeds;
 * the report draws each setting's mean over its seeds with the seeds' spread as a band (min to max, or
 * mean ± one standard deviation) for held-out accuracy and the paper's Figure 4: (a) code ratio,
 * (b) code pass ratio, (c) the pass ratio of responses with a right answer against a wrong one,
 * (d) effective code ratio. A table gives, per setting, the mean ± standard deviation over seeds of the
 * final held-out accuracy, the accuracy at one step, and the tool ratios over the last steps.
 *
 * Writes into the output directory: report.html (self-contained), report.png (the charts), results.md
 * (the table, for a README) and results.json (every run's figures and each setting's statistics).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { UsageError } from "@torl-ts/core";
import { escapeHtml, fmtNum, lineChart, PALETTE, type Series, smoothSeries } from "./report-charts.js";
import { seriesOf, withMeanAccuracy } from "./report-curves.js";
import { CSS, chartGrid, chartsPng, displayPath } from "./report-page.js";
import { loadRun, ReportInputError, type RunData } from "./report-run.js";

/** One setting of a sweep: its name and its runs (one per seed). */
export interface RunGroup {
  name: string;
  dirs: string[];
}

/** The seeds' spread drawn around each mean: their range, or one standard deviation either side. */
export type Band = "minmax" | "std";

/** `NAME=DIR,DIR,...` (one --group flag) as a group; the name is what precedes the last "=" (so it may
 * read "C=0"; a directory cannot hold "="). */
export function parseGroupFlag(value: string): RunGroup {
  const eq = value.lastIndexOf("=");
  const name = eq > 0 ? value.slice(0, eq).trim() : "";
  const dirs =
    eq > 0
      ? value
          .slice(eq + 1)
          .split(",")
          .map((d) => d.trim())
      : [];
  if (!name || dirs.length === 0 || dirs.some((d) => !d))
    throw new UsageError(`--group expects NAME=DIR[,DIR...] (a setting and its runs), got '${value}'`);
  return { name, dirs };
}

/** Mean, sample standard deviation (n - 1; null below 2 values), range and count of the finite values. */
export interface Spread {
  mean: number;
  std: number | null;
  min: number;
  max: number;
  n: number;
}

export function spreadOf(values: readonly (number | null)[]): Spread | null {
  const xs = values.filter((v): v is number => v !== null && Number.isFinite(v));
  if (xs.length === 0) return null;
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const std = xs.length < 2 ? null : Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1));
  return { mean, std, min: Math.min(...xs), max: Math.max(...xs), n: xs.length };
}

/**
 * Several runs' curves as one: at each x any run logs, the mean of the runs defined there and the band
 * (their range, or mean ± std; a single run gives a band of zero width). An x where no run is defined
 * is a gap. `counts` says how many runs each point averages.
 */
export function acrossRuns(
  curves: readonly [number, number][][],
  band: Band,
): { points: [number, number][]; band: [number, number, number][]; counts: Map<number, number> } {
  const xs = [...new Set(curves.flatMap((c) => c.map((p) => p[0])))].sort((a, b) => a - b);
  const byX = curves.map((c) => new Map(c));
  const points: [number, number][] = [];
  const bands: [number, number, number][] = [];
  const counts = new Map<number, number>();
  for (const x of xs) {
    const s = spreadOf(byX.map((m) => m.get(x) ?? null));
    counts.set(x, s?.n ?? 0);
    if (!s) {
      points.push([x, Number.NaN]);
      bands.push([x, Number.NaN, Number.NaN]);
      continue;
    }
    points.push([x, s.mean]);
    const half = s.std ?? 0;
    bands.push(band === "minmax" ? [x, s.min, s.max] : [x, s.mean - half, s.mean + half]);
  }
  return { points, band: bands, counts };
}

/** The figures of one run in the table (fractions; null where the run has no value). */
export interface RunFigures {
  run: string;
  trainer_seed: number | null;
  data_seed: number | null;
  steps: number;
  /** The step of the last validation. */
  final_step: number | null;
  val_acc_final: number | null;
  val_acc_at_step: number | null;
  code_ratio: number | null;
  pass_ratio: number | null;
  effective_code_ratio: number | null;
  pass_ratio_correct: number | null;
  pass_ratio_wrong: number | null;
}

type FigureKey = Exclude<keyof RunFigures, "run" | "trainer_seed" | "data_seed" | "steps" | "final_step">;

/** The table's columns after the setting's name. */
const COLUMNS: { key: FigureKey; heading: (o: FigureOptions) => string }[] = [
  { key: "val_acc_final", heading: () => "held-out acc, final" },
  { key: "val_acc_at_step", heading: (o) => `held-out acc, step ${o.atStep}` },
  { key: "code_ratio", heading: () => "code ratio" },
  { key: "pass_ratio", heading: () => "pass ratio" },
  { key: "effective_code_ratio", heading: () => "effective code ratio" },
  { key: "pass_ratio_correct", heading: () => "pass ratio, right answers" },
  { key: "pass_ratio_wrong", heading: () => "pass ratio, wrong answers" },
];

export interface FigureOptions {
  /** The step whose held-out accuracy gets a column (default 10). */
  atStep: number;
  /** The tool ratios are each run's mean over its last `tail` training steps (default 10). */
  tail: number;
}

/** The mean of a run's metric over the last `tail` training steps, undefined steps left out. */
function tailMean(run: RunData, key: string, tail: number): number | null {
  const rows = run.metrics.filter((r) => typeof r["tool/code_ratio"] === "number").slice(-tail);
  const points = seriesOf({ ...run, metrics: rows }, key, key, "", false, "step").points;
  return spreadOf(points.map(([, y]) => y))?.mean ?? null;
}

/** One run's figures for the table. */
export function runFigures(run: RunData, o: FigureOptions): RunFigures {
  const vals = withMeanAccuracy(run.metrics).filter((r) => typeof r["val/acc"] === "number");
  const last = vals.at(-1);
  const seed = (k: string) => (typeof run.summary?.[k] === "number" ? (run.summary[k] as number) : null);
  return {
    run: displayPath(run.dir, run.dir),
    trainer_seed: seed("trainer_seed"),
    data_seed: seed("data_seed"),
    steps: run.metrics.at(-1)?.step ?? 0,
    final_step: last?.step ?? null,
    val_acc_final: last?.["val/acc"] ?? null,
    val_acc_at_step: vals.find((r) => r.step === o.atStep)?.["val/acc"] ?? null,
    code_ratio: tailMean(run, "tool/code_ratio", o.tail),
    pass_ratio: tailMean(run, "tool/pass_ratio", o.tail),
    effective_code_ratio: tailMean(run, "tool/effective_code_ratio", o.tail),
    pass_ratio_correct: tailMean(run, "tool/pass_ratio_correct", o.tail),
    pass_ratio_wrong: tailMean(run, "tool/pass_ratio_wrong", o.tail),
  };
}

/** One setting: its runs, their figures and the statistics of each column over the runs. */
export interface SettingResult {
  name: string;
  runs: RunData[];
  figures: RunFigures[];
  stats: Record<FigureKey, Spread | null>;
}

/** summary.json keys that say what a run's setting was: runs of one group must agree on them. */
const SETTING_KEYS = ["num_llm_calls_available", "execution_error_penalty", "mask_tool_output"];

/** Reads and checks every group's runs (finished, one setting per group, each seed once). */
export function loadGroups(groups: readonly RunGroup[], o: FigureOptions): SettingResult[] {
  if (groups.length === 0) throw new UsageError("give at least one --group NAME=DIR[,DIR...]");
  const names = new Set<string>();
  const seen = new Map<string, string>();
  for (const g of groups) {
    if (names.has(g.name)) throw new UsageError(`--group ${g.name} is given twice`);
    names.add(g.name);
    for (const d of g.dirs) {
      const abs = resolve(d);
      const other = seen.get(abs);
      if (other === g.name) throw new UsageError(`run ${d} is given twice in group ${g.name}`);
      if (other !== undefined) throw new UsageError(`run ${d} is in two groups (${other} and ${g.name})`);
      seen.set(abs, g.name);
    }
  }
  return groups.map((g) => {
    const runs = g.dirs.map((d) => {
      const run = loadRun(d);
      if (!run.summary)
        throw new ReportInputError(
          join(d, "summary.json"),
          "not found: the run did not finish (a finished run writes summary.json); rerun it or leave it out",
        );
      if (run.metrics.length === 0)
        throw new ReportInputError(
          join(d, "metrics.jsonl"),
          "not found: a group report needs every run's metrics",
        );
      return run;
    });
    for (const key of SETTING_KEYS) {
      const values = new Set(runs.map((r) => JSON.stringify(r.summary?.[key])));
      if (values.size > 1)
        throw new ReportInputError(
          g.dirs.join(", "),
          `group ${g.name} mixes settings: summary.json's ${key} is ${[...values].join(" vs ")}`,
        );
    }
    const lastSteps = new Set(runs.map((r) => r.metrics.at(-1)!.step));
    if (lastSteps.size > 1)
      throw new ReportInputError(
        g.dirs.join(", "),
        `group ${g.name}: the runs end at different steps (${[...lastSteps].join(", ")}); compare runs of one length`,
      );
    const figures = runs.map((r) => runFigures(r, o));
    const seeds = new Map<string, string>();
    for (const f of figures) {
      if (f.trainer_seed === null || f.data_seed === null) continue;
      const k = `${f.trainer_seed}/${f.data_seed}`;
      const twin = seeds.get(k);
      if (twin !== undefined)
        throw new ReportInputError(
          `${twin}, ${f.run}`,
          `group ${g.name}: two runs with the same seeds (trainer.seed ${f.trainer_seed}, data.seed ${f.data_seed})`,
        );
      seeds.set(k, f.run);
    }
    const stats = Object.fromEntries(
      COLUMNS.map(({ key }) => [key, spreadOf(figures.map((f) => f[key]))]),
    ) as Record<FigureKey, Spread | null>;
    return { name: g.name, runs, figures, stats };
  });
}

/** A cell of the table: percent, mean ± std over the seeds; the count when some run has no value. */
export function formatSpread(s: Spread | null, runs: number): string {
  if (!s) return "–";
  const pct = (v: number) => (v * 100).toFixed(1);
  const base = s.std === null ? pct(s.mean) : `${pct(s.mean)} ± ${pct(s.std)}`;
  return s.n < runs ? `${base} (n=${s.n})` : base;
}

/** The table as markdown (a README can include it as is). */
export function resultsMarkdown(results: readonly SettingResult[], o: FigureOptions): string {
  const head = ["setting", "seeds", ...COLUMNS.map((c) => c.heading(o))];
  const rows = results.map((r) => [
    r.name,
    String(r.runs.length),
    ...COLUMNS.map((c) => formatSpread(r.stats[c.key], r.runs.length)),
  ]);
  // columns padded to their widest cell, as a markdown formatter would leave them (the file is committed)
  const widths = head.map((h, i) => Math.max(3, h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  const rule = `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`;
  return [line(head), rule, ...rows.map(line), "", notes(results, o), ""].join("\n");
}

function notes(results: readonly SettingResult[], o: FigureOptions): string {
  const steps = [...new Set(results.flatMap((r) => r.figures.map((f) => f.final_step)))];
  return (
    "Percent, mean ± sample standard deviation (n - 1) over each setting's seeds; (n=k): only k runs have " +
    `a value. Final: the last validation (step ${steps.join("/")}). The ratios are each run's mean over its ` +
    `last ${o.tail} training steps (a step without any tool call has no pass ratio and is left out). ` +
    "Right / wrong answers: the pass ratio of the tool calls in responses whose answer was right / wrong."
  );
}

interface GroupChart {
  title: string;
  group: string;
  svg: string;
}

const BAND_NOTE: Record<Band, string> = {
  minmax: "band: min to max of the seeds",
  std: "band: mean ± 1 std of the seeds",
};

/** A metric's mean curve and band per setting (each run smoothed first, then averaged). */
function settingSeries(
  r: SettingResult,
  key: string,
  color: string,
  label: string,
  o: { band: Band; smoothing: number },
  dashed = false,
): Series {
  const curves = r.runs.map((run) => {
    const pts = seriesOf(
      { ...run, metrics: withMeanAccuracy(run.metrics) },
      key,
      label,
      color,
      false,
      "step",
    ).points;
    return o.smoothing > 0 && pts.filter(([, y]) => Number.isFinite(y)).length >= 5
      ? smoothSeries(pts, o.smoothing)
      : pts;
  });
  const across = acrossRuns(curves, o.band);
  return { label, color, dashed, points: across.points, band: across.band };
}

export interface GroupReportOptions {
  band?: Band;
  /** EMA weight each run's training curves are smoothed with before averaging (default 0.6; 0: raw). */
  smoothing?: number;
  atStep?: number;
  tail?: number;
}

function figureOptions(o: GroupReportOptions): FigureOptions {
  return { atStep: o.atStep ?? 10, tail: o.tail ?? 10 };
}

/** The charts: held-out accuracy, then Figure 4 (a), (b), (c) per setting, (d). */
export function groupCharts(results: readonly SettingResult[], o: GroupReportOptions = {}): GroupChart[] {
  const band = o.band ?? "minmax";
  const smoothing = o.smoothing ?? 0.6;
  const color = (i: number) => PALETTE[i % PALETTE.length]!;
  const note = `${BAND_NOTE[band]}${smoothing > 0 ? `; each run smoothed (EMA ${smoothing}) first` : ""}`;
  const chart = (title: string, group: string, yLabel: string, series: Series[], chartNote = note) => ({
    title,
    group,
    svg: lineChart({ title, yLabel, series, unit: true, note: chartNote }),
  });
  const perSetting = (key: string, smooth: number) =>
    results.map((r, i) =>
      settingSeries(r, key, color(i), `${r.name} (${r.runs.length})`, { band, smoothing: smooth }),
    );
  const charts: GroupChart[] = [
    chart(
      "Held-out accuracy",
      "Held-out accuracy",
      "accuracy (greedy)",
      perSetting("val/acc", 0),
      BAND_NOTE[band],
    ),
    chart(
      "(a) Code ratio",
      "Figure 4: code behaviour",
      "fraction of responses",
      perSetting("tool/code_ratio", smoothing),
    ),
    chart(
      "(b) Code pass ratio",
      "Figure 4: code behaviour",
      "fraction of tool calls",
      perSetting("tool/pass_ratio", smoothing),
    ),
  ];
  for (const [i, r] of results.entries()) {
    const series = [
      settingSeries(r, "tool/pass_ratio_correct", color(i), "right answer", { band, smoothing }),
      settingSeries(r, "tool/pass_ratio_wrong", "#555555", "wrong answer", { band, smoothing }, true),
    ];
    if (series.some((s) => s.points.some(([, y]) => Number.isFinite(y))))
      charts.push(
        chart(
          `(c) ${r.name}`,
          "Figure 4: code behaviour",
          "fraction of tool calls",
          series,
          `right answers (solid) vs wrong; ${BAND_NOTE[band]}`,
        ),
      );
  }
  charts.push(
    chart(
      "(d) Effective code ratio",
      "Figure 4: code behaviour",
      "fraction of responses with code",
      perSetting("tool/effective_code_ratio", smoothing),
    ),
  );
  return charts;
}

function resultsTableHtml(results: readonly SettingResult[], o: FigureOptions): string {
  const head = ["setting", "seeds", ...COLUMNS.map((c) => c.heading(o))];
  return [
    `<table class="summary">`,
    `<tr>${head.map((h) => `<th>${escapeHtml(h)}</th>`).join("")}</tr>`,
    ...results.map(
      (r) =>
        `<tr><td>${escapeHtml(r.name)}</td><td class="num">${r.runs.length}</td>${COLUMNS.map(
          (c) => `<td class="num">${escapeHtml(formatSpread(r.stats[c.key], r.runs.length))}</td>`,
        ).join("")}</tr>`,
    ),
    "</table>",
    `<p class="sub">${escapeHtml(notes(results, o))}</p>`,
  ].join("\n");
}

function runsTableHtml(results: readonly SettingResult[], o: FigureOptions): string {
  const head = ["setting", "run", "trainer.seed", "data.seed", "steps", ...COLUMNS.map((c) => c.heading(o))];
  const cell = (v: number | null) => (v === null ? "–" : fmtNum(v));
  return [
    `<table class="summary">`,
    `<tr>${head.map((h) => `<th>${escapeHtml(h)}</th>`).join("")}</tr>`,
    ...results.flatMap((r) =>
      r.figures.map(
        (f) =>
          `<tr><td>${escapeHtml(r.name)}</td><td>${escapeHtml(f.run)}</td><td class="num">${cell(f.trainer_seed)}</td>` +
          `<td class="num">${cell(f.data_seed)}</td><td class="num">${f.steps}</td>` +
          COLUMNS.map((c) => `<td class="num">${cell(f[c.key])}</td>`).join("") +
          "</tr>",
      ),
    ),
    "</table>",
  ].join("\n");
}

/** The group report page as a string. */
export function renderGroupHtml(results: readonly SettingResult[], o: GroupReportOptions = {}): string {
  const fo = figureOptions(o);
  const runs = results.reduce((a, r) => a + r.runs.length, 0);
  return [
    "<!DOCTYPE html>",
    `<html lang="en"><head><meta charset="utf-8">`,
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`,
    `<title>ToRL settings over seeds</title><style>${CSS}</style></head><body>`,
    "<h1>ToRL settings over seeds</h1>",
    `<div class="sub">${results.length} settings, ${runs} runs. Lines: each setting's mean over its seeds; ` +
      `${escapeHtml(BAND_NOTE[o.band ?? "minmax"])}. Hover a chart for the values at a step.</div>`,
    `<h2>Results</h2>${resultsTableHtml(results, fo)}`,
    `<h2>Curves</h2>${chartGrid(groupCharts(results, o))}`,
    `<h2>Runs</h2>${runsTableHtml(results, fo)}`,
    "</body></html>",
  ].join("\n");
}

/** About how tall the page is in a 1360-pixel-wide window (three charts a row), for a whole-page screenshot. */
function pageHeight(results: readonly SettingResult[], charts: readonly GroupChart[]): number {
  const groups = new Set(charts.map((c) => c.group));
  const rows = [...groups].reduce((a, g) => a + Math.ceil(charts.filter((c) => c.group === g).length / 3), 0);
  const runs = results.reduce((a, r) => a + r.runs.length, 0);
  return 320 + 32 * results.length + 60 * groups.size + 275 * rows + 120 + 45 * runs;
}

/**
 * Writes report.html, report.png, results.md and results.json into `outDir`; returns their paths and
 * the page's height for a screenshot.
 */
export function writeGroupReport(
  groups: readonly RunGroup[],
  outDir: string,
  o: GroupReportOptions = {},
): { html: string; png: string; markdown: string; json: string; pageHeight: number } {
  const fo = figureOptions(o);
  const results = loadGroups(groups, fo);
  mkdirSync(outDir, { recursive: true });
  const paths = {
    html: join(outDir, "report.html"),
    png: join(outDir, "report.png"),
    markdown: join(outDir, "results.md"),
    json: join(outDir, "results.json"),
  };
  const charts = groupCharts(results, o);
  writeFileSync(paths.html, renderGroupHtml(results, o));
  writeFileSync(paths.png, chartsPng("ToRL settings over seeds", charts, "no runs"));
  writeFileSync(paths.markdown, resultsMarkdown(results, fo));
  const json = {
    band: o.band ?? "minmax",
    at_step: fo.atStep,
    tail: fo.tail,
    settings: results.map((r) => ({ name: r.name, runs: r.figures, stats: r.stats })),
  };
  writeFileSync(paths.json, `${JSON.stringify(json, null, 2)}\n`);
  return { ...paths, pageHeight: pageHeight(results, charts) };
}
