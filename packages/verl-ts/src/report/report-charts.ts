/**
 * The report's charts as standalone SVG strings (shared by report.html and report.png): line charts
 * with light smoothing over the raw series, and stacked area charts. No script: values show on hover
 * through SVG <title> elements (one hover band per x, listing every series' raw value there).
 *
 * A point whose y is not finite is a gap: the metric is undefined there (e.g. a pass ratio at a step
 * without tool calls) and the line breaks instead of drawing a value that was never measured.
 */

/** Escapes text for HTML and SVG element content and attribute values. */
export function escapeHtml(s: string): string {
  return s
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

export const PALETTE = [
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
export const FONT = "DejaVu Sans, Liberation Sans, Arial, sans-serif";

export interface Series {
  label: string;
  color: string;
  dashed?: boolean;
  /** [x, y]; a non-finite y is a gap (undefined there), not a value. */
  points: [number, number][];
  /** [x, low, high]: a shaded band around the line (e.g. the spread of several seeds); non-finite: none. */
  band?: [number, number, number][];
}

export interface ChartOptions {
  title: string;
  /** What the y axis measures, with its unit, e.g. "accuracy" or "seconds". */
  yLabel?: string;
  /** What the x axis measures; default "step". */
  xLabel?: string;
  width?: number;
  height?: number;
  /** Fix the y axis to [0, 1] (accuracies and ratios). */
  unit?: boolean;
  /** EMA weight in [0, 1) of the smoothed line drawn over the faint raw series; 0 draws the raw only. */
  smoothing?: number;
  /** A line under the title (e.g. why two metrics are drawn as one). */
  note?: string;
  /** The hover text's name for an x value; default `${xLabel} ${x}`. */
  describeX?: (x: number) => string;
}

const finite = ([x, y]: [number, number]) => Number.isFinite(x) && Number.isFinite(y);

function niceStep(span: number, ticks: number): number {
  const raw = span / Math.max(1, ticks);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
}

export function fmtNum(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return String(Number(v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 3)));
}

/**
 * TensorBoard's smoothing: an exponential moving average with its start-up bias removed, so the first
 * points are not pulled towards 0. Gaps stay gaps and do not reset the average.
 */
export function smoothSeries(points: [number, number][], weight: number): [number, number][] {
  let last = 0;
  let n = 0;
  return points.map(([x, y]) => {
    if (!Number.isFinite(y)) return [x, y];
    last = last * weight + (1 - weight) * y;
    n++;
    return [x, last / (1 - weight ** n)];
  });
}

/** Runs of consecutive points whose coordinates are all finite: a polyline (or band) each, so a gap
 * breaks the line. */
function segments<P extends number[]>(points: P[]): P[][] {
  const out: P[][] = [];
  let cur: P[] = [];
  for (const p of points) {
    if (p.every(Number.isFinite)) cur.push(p);
    else if (cur.length) {
      out.push(cur);
      cur = [];
    }
  }
  if (cur.length) out.push(cur);
  return out;
}

interface Frame {
  parts: string[];
  sx: (x: number) => number;
  sy: (y: number) => number;
  plot: { l: number; t: number; w: number; h: number };
}

/** The frame of a chart: title, note, axes with ticks and labels, legend; returns the scales. */
function frame(
  opts: ChartOptions,
  legendEntries: { label: string; color: string; dashed?: boolean; area?: boolean }[],
  xs: number[],
  ys: number[],
): Frame | string {
  const W = opts.width ?? 420;
  const H = opts.height ?? 260;
  const top = opts.note ? 40 : 28;
  const m = { l: opts.yLabel ? 58 : 48, r: 12, t: top, b: 34 };
  // Legend entries flow left to right and wrap (10 px text is ~5.8 px per character).
  const entryWidth = (label: string) => 28 + label.length * 5.8;
  const legend: { e: (typeof legendEntries)[number]; x: number; row: number }[] = [];
  let lx0 = 0;
  let row = 0;
  for (const e of legendEntries) {
    if (lx0 > 0 && lx0 + entryWidth(e.label) > W - m.l - m.r) {
      row++;
      lx0 = 0;
    }
    legend.push({ e, x: lx0, row });
    lx0 += entryWidth(e.label) + 8;
  }
  const legendRows = legendEntries.length ? row + 1 : 0;
  const plot = { l: m.l, t: m.t, w: W - m.l - m.r, h: H - m.t - m.b - legendRows * 15 };
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="${FONT}" role="img" aria-label="${escapeHtml(opts.title)}">`,
    `<title>${escapeHtml(opts.title)}</title>`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${m.l}" y="18" font-size="14" font-weight="bold" fill="#222">${escapeHtml(opts.title)}</text>`,
  ];
  if (opts.note)
    parts.push(`<text x="${m.l}" y="32" font-size="10" fill="#666">${escapeHtml(opts.note)}</text>`);
  if (xs.length === 0 || ys.length === 0) {
    parts.push(
      `<text x="${W / 2}" y="${plot.t + plot.h / 2}" font-size="12" fill="#888" text-anchor="middle">no data</text>`,
      "</svg>",
    );
    return parts.join("");
  }
  let x0 = Math.min(...xs);
  let x1 = Math.max(...xs);
  if (x0 === x1) {
    x0 -= 1;
    x1 += 1;
  }
  let y0 = opts.unit ? 0 : Math.min(...ys);
  let y1 = opts.unit ? 1 : Math.max(...ys);
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
  // Steps are integers: no tick between two steps.
  const xStep = xs.every(Number.isInteger) ? Math.max(1, niceStep(x1 - x0, 6)) : niceStep(x1 - x0, 6);
  const sx = (x: number) => plot.l + ((x - x0) / (x1 - x0)) * plot.w;
  const sy = (y: number) => plot.t + plot.h - ((y - y0) / (y1 - y0)) * plot.h;
  for (let y = Math.ceil(y0 / yStep) * yStep; y <= y1 + 1e-9; y += yStep) {
    const py = sy(y).toFixed(1);
    parts.push(
      `<line x1="${plot.l}" x2="${plot.l + plot.w}" y1="${py}" y2="${py}" stroke="#e5e5e5"/>`,
      `<text x="${plot.l - 5}" y="${py}" dy="4" font-size="10" fill="#555" text-anchor="end">${fmtNum(Math.abs(y) < yStep * 1e-6 ? 0 : y)}</text>`,
    );
  }
  for (let x = Math.ceil(x0 / xStep) * xStep; x <= x1 + 1e-9; x += xStep) {
    const px = sx(x).toFixed(1);
    parts.push(
      `<line x1="${px}" x2="${px}" y1="${plot.t + plot.h}" y2="${plot.t + plot.h + 4}" stroke="#888"/>`,
      `<text x="${px}" y="${plot.t + plot.h + 15}" font-size="10" fill="#555" text-anchor="middle">${fmtNum(x)}</text>`,
    );
  }
  parts.push(
    `<rect x="${plot.l}" y="${plot.t}" width="${plot.w}" height="${plot.h}" fill="none" stroke="#999"/>`,
    `<text x="${plot.l + plot.w / 2}" y="${plot.t + plot.h + 28}" font-size="10" fill="#555" text-anchor="middle">${escapeHtml(opts.xLabel ?? "step")}</text>`,
  );
  if (opts.yLabel) {
    const cx = 11;
    const cy = plot.t + plot.h / 2;
    parts.push(
      `<text class="ylabel" x="${cx}" y="${cy}" font-size="10" fill="#555" text-anchor="middle" transform="rotate(-90 ${cx} ${cy})">${escapeHtml(opts.yLabel)}</text>`,
    );
  }
  for (const { e, x, row } of legend) {
    const lx = plot.l + x;
    const ly = H - legendRows * 15 + row * 15 + 4;
    const dash = e.dashed ? ` stroke-dasharray="6 4"` : "";
    parts.push(
      e.area
        ? `<rect x="${lx + 3}" y="${ly - 5}" width="12" height="10" fill="${e.color}"/>`
        : `<line x1="${lx}" x2="${lx + 18}" y1="${ly}" y2="${ly}" stroke="${e.color}" stroke-width="2"${dash}/>`,
      `<text x="${lx + 22}" y="${ly}" dy="4" font-size="10" fill="#333">${escapeHtml(e.label)}</text>`,
    );
  }
  return { parts, sx, sy, plot };
}

/** Transparent bands, one per x, whose <title> lists every series' value there (the hover read-out). */
function hoverBands(
  f: Frame,
  xs: number[],
  rows: (x: number) => string[],
  describeX: (x: number) => string,
): string[] {
  const sorted = [...new Set(xs)].sort((a, b) => a - b);
  const out: string[] = [];
  sorted.forEach((x, i) => {
    const left = i === 0 ? f.plot.l : (f.sx(sorted[i - 1]!) + f.sx(x)) / 2;
    const right = i === sorted.length - 1 ? f.plot.l + f.plot.w : (f.sx(x) + f.sx(sorted[i + 1]!)) / 2;
    const text = [describeX(x), ...rows(x)].join("\n");
    out.push(
      `<rect class="hover" x="${left.toFixed(1)}" y="${f.plot.t}" width="${Math.max(0.5, right - left).toFixed(1)}" height="${f.plot.h}" fill="#000" fill-opacity="0"><title>${escapeHtml(text)}</title></rect>`,
    );
  });
  return out;
}

function describer(opts: ChartOptions): (x: number) => string {
  return opts.describeX ?? ((x) => `${opts.xLabel ?? "step"} ${fmtNum(x)}`);
}

/** A line chart as a standalone SVG string. */
export function lineChart(opts: ChartOptions & { series: Series[] }): string {
  // Series without a single point (a metric this run does not log) stay out of the chart and legend.
  const shown = opts.series.filter((s) => s.points.some(finite));
  const bandPoints = shown.flatMap((s) =>
    (s.band ?? []).flatMap(([x, lo, hi]): [number, number][] => [
      [x, lo],
      [x, hi],
    ]),
  );
  const all = [...shown.flatMap((s) => s.points), ...bandPoints].filter(finite);
  const f = frame(
    opts,
    shown,
    all.map((p) => p[0]),
    all.map((p) => p[1]),
  );
  if (typeof f === "string") return f;
  const { parts, sx, sy } = f;
  // Bands first, under every line.
  for (const s of shown)
    for (const seg of segments(s.band ?? []).filter((g) => g.length > 1)) {
      const upper = seg.map(([x, , hi]) => `${sx(x).toFixed(1)},${sy(hi).toFixed(1)}`);
      const lower = seg.map(([x, lo]) => `${sx(x).toFixed(1)},${sy(lo).toFixed(1)}`).reverse();
      parts.push(
        `<polygon class="band" points="${[...upper, ...lower].join(" ")}" fill="${s.color}" fill-opacity="0.15" stroke="none"/>`,
      );
    }
  const weight = opts.smoothing ?? 0;
  const poly = (pts: [number, number][], attrs: string) =>
    pts.length > 1
      ? `<polyline points="${pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ")}" fill="none" ${attrs}/>`
      : "";
  // Dashed (compared) series first, so the run itself is drawn on top.
  for (const s of [...shown].sort((a, b) => Number(!!b.dashed) - Number(!!a.dashed))) {
    const dash = s.dashed ? ` stroke-dasharray="6 4"` : "";
    const smooth = weight > 0 && s.points.filter(finite).length >= 5;
    for (const seg of segments(s.points)) {
      // The raw series stays visible under the smoothed one, faint.
      parts.push(
        poly(
          seg,
          smooth
            ? `class="raw" stroke="${s.color}" stroke-opacity="0.3" stroke-width="1"${dash}`
            : `stroke="${s.color}" stroke-width="2"${dash}`,
        ),
      );
      if (seg.length <= 40 && !smooth)
        for (const [x, y] of seg)
          parts.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="2.5" fill="${s.color}"/>`);
      if (seg.length === 1 && smooth)
        parts.push(
          `<circle cx="${sx(seg[0]![0]).toFixed(1)}" cy="${sy(seg[0]![1]).toFixed(1)}" r="2.5" fill="${s.color}"/>`,
        );
    }
    if (smooth)
      for (const seg of segments(smoothSeries(s.points, weight)))
        parts.push(poly(seg, `class="smoothed" stroke="${s.color}" stroke-width="2"${dash}`));
  }
  const at = (s: Series, x: number) => s.points.find((p) => p[0] === x);
  const spread = (s: Series, x: number) => {
    const b = s.band?.find((q) => q[0] === x);
    return b && Number.isFinite(b[1]) && Number.isFinite(b[2]) ? ` (${fmtNum(b[1])} to ${fmtNum(b[2])})` : "";
  };
  parts.push(
    ...hoverBands(
      f,
      // Steps where a series is undefined get a band too: the read-out says so.
      shown.flatMap((s) => s.points.map((p) => p[0])).filter(Number.isFinite),
      (x) =>
        shown.flatMap((s) => {
          const p = at(s, x);
          if (!p) return [];
          return [`${s.label}: ${Number.isFinite(p[1]) ? `${fmtNum(p[1])}${spread(s, x)}` : "undefined"}`];
        }),
      describer(opts),
    ),
    "</svg>",
  );
  return parts.join("");
}

/**
 * A stacked area chart: each layer's value at x sits on the sum of the layers before it (e.g. the
 * phases of a step, which add up to the step's time). A missing value counts as 0 in the stack and
 * is left out of the hover read-out.
 */
export function stackedChart(opts: ChartOptions & { layers: Series[] }): string {
  const shown = opts.layers.filter((s) => s.points.some(finite));
  const xs = [...new Set(shown.flatMap((s) => s.points.filter(finite).map((p) => p[0])))].sort(
    (a, b) => a - b,
  );
  const value = (s: Series, x: number) => {
    const p = s.points.find((q) => q[0] === x);
    return p && Number.isFinite(p[1]) ? p[1] : 0;
  };
  const totals = xs.map((x) => shown.reduce((a, s) => a + value(s, x), 0));
  const f = frame(
    opts,
    shown.map((s) => ({ ...s, area: true })),
    xs,
    totals.length ? [0, ...totals] : [],
  );
  if (typeof f === "string") return f;
  const { parts, sx, sy } = f;
  const base = xs.map(() => 0);
  for (const s of shown) {
    const top = xs.map((x, i) => base[i]! + value(s, x));
    const upper = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(top[i]!).toFixed(1)}`);
    const lower = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(base[i]!).toFixed(1)}`).reverse();
    parts.push(
      xs.length > 1
        ? `<polygon points="${[...upper, ...lower].join(" ")}" fill="${s.color}" fill-opacity="0.85" stroke="none"/>`
        : `<rect x="${(sx(xs[0]!) - 4).toFixed(1)}" y="${sy(top[0]!).toFixed(1)}" width="8" height="${Math.max(0, sy(base[0]!) - sy(top[0]!)).toFixed(1)}" fill="${s.color}"/>`,
    );
    top.forEach((v, i) => {
      base[i] = v;
    });
  }
  parts.push(
    ...hoverBands(
      f,
      xs,
      (x) => {
        const rows = shown.flatMap((s) => {
          const p = s.points.find((q) => q[0] === x);
          return p && Number.isFinite(p[1]) ? [`${s.label}: ${fmtNum(p[1])}`] : [];
        });
        return [...rows, `total: ${fmtNum(totals[xs.indexOf(x)]!)}`];
      },
      describer(opts),
    ),
    "</svg>",
  );
  return parts.join("");
}
