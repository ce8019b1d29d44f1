/**
 * The run report's charts, as SVG strings shared by report.html and report.png: which metrics each
 * chart draws (with y labels, merged twins, gaps where a ratio is undefined), per step or per second of
 * training, a compared run dashed, and each step's time by phase stacked. report-charts.ts draws them.
 */
import { fmtNum, lineChart, PALETTE, type Series, stackedChart } from "./report-charts.js";
import type { Row, RunData } from "./report-run.js";

/** Colours of the overlaid (compared) run's series. */
const COMPARE_COLORS = ["#555555", "#aaaaaa", "#777777"];

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

/**
 * Ratios the trainer leaves out at a step where they have no value (the pass ratio of right or of wrong
 * responses when none of them called the tool). Key -> the metric every step of that kind logs: a row
 * with it and without the key is a gap.
 */
const UNDEFINED_WHEN_ABSENT: Record<string, string> = {
  "tool/pass_ratio_correct": "tool/code_ratio",
  "tool/pass_ratio_wrong": "tool/code_ratio",
  "val/tool/pass_ratio_correct": "val/tool/code_ratio",
  "val/tool/pass_ratio_wrong": "val/tool/code_ratio",
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

export function hasWallClock(metrics: Row[]): boolean {
  return metrics.some((r) => typeof r["timing_s/step"] === "number");
}

export function xOf(run: RunData, axis: ReportAxis): (r: Row) => number {
  if (axis === "step") return (r) => r.step;
  const wall = wallClock(run.metrics);
  return (r) => wall.get(r.step)!;
}

export function seriesOf(
  run: RunData,
  key: string,
  label: string,
  color: string,
  dashed: boolean,
  axis: ReportAxis,
): Series {
  const x = xOf(run, axis);
  const denominator = UNDEFINED_WHEN_ZERO[key];
  // (a run that never logs the key, e.g. one made before it existed, has no such series at all)
  const loggedWith = run.metrics.some((r) => typeof r[key] === "number")
    ? UNDEFINED_WHEN_ABSENT[key]
    : undefined;
  return {
    label,
    color,
    dashed,
    points: run.metrics
      .filter(
        (r) => typeof r[key] === "number" || (loggedWith !== undefined && typeof r[loggedWith] === "number"),
      )
      .map((r) => [
        x(r),
        typeof r[key] !== "number" || (denominator !== undefined && r[denominator] === 0)
          ? Number.NaN
          : r[key],
      ]),
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
export function withMeanAccuracy(metrics: Row[]): Row[] {
  const sources = validationSources(metrics);
  return metrics.map((r) => {
    if (typeof r["val/acc"] === "number") return r;
    const vals = sources.map((s) => r[`val/${s}/acc`]).filter((v): v is number => typeof v === "number");
    return vals.length ? { ...r, "val/acc": vals.reduce((a, b) => a + b, 0) / vals.length } : r;
  });
}

/** The throughput the trainer logged (perf/throughput), else veRL's formula from what it logs:
 * tokens per worker (global_seqlen/mean) over the step's seconds. */
export function withThroughput(metrics: Row[]): Row[] {
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
    title: "Code pass ratio: right vs wrong answers",
    group: "Tool use",
    yLabel: "fraction of tool calls",
    keys: [
      ["tool/pass_ratio_correct", "responses with the right answer"],
      ["tool/pass_ratio_wrong", "with a wrong answer"],
    ],
    unit: true,
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

export function describeX(run: RunData, axis: ReportAxis): (x: number) => string {
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
