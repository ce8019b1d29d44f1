/**
 * This process's counters, gauges and histograms, as Prometheus families. The head collects every
 * process's families (see ProcessReport) and the dashboard's /metrics serves them, each sample
 * labelled with the process it came from. Names and units: docs/observability.md.
 *
 * A family is declared once per process (`metricCounter`, `metricHistogram`, `metricGauge`, by
 * name: declaring the same name again returns the same family, and a different type or label set
 * under a known name is an error). Updating one is a Map lookup and an addition.
 */
import { InputError } from "../errors.js";

export type MetricType = "counter" | "gauge" | "histogram";

/** One sample of a family: its label values (in the family's label order) and its value. */
export interface MetricSample {
  /** Label name to value; histograms add `le` to their `_bucket` samples. */
  labels: Record<string, string>;
  /** The sample's name: the family's, or the family's with `_bucket`, `_sum` or `_count`. */
  name: string;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: MetricType;
  help: string;
  samples: MetricSample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

abstract class Family<L extends string> {
  protected readonly series = new Map<string, { labels: Record<string, string>; data: number[] }>();

  constructor(
    readonly name: string,
    readonly type: MetricType,
    readonly help: string,
    readonly labelNames: readonly L[],
  ) {}

  protected seriesOf(labels: Record<L, string>, width: number): number[] {
    let key = "";
    for (const l of this.labelNames) key += `${labels[l]}\u0000`;
    let s = this.series.get(key);
    if (!s) {
      const copy: Record<string, string> = {};
      for (const l of this.labelNames) copy[l] = String(labels[l]);
      s = { labels: copy, data: new Array<number>(width).fill(0) };
      this.series.set(key, s);
    }
    return s.data;
  }

  abstract samples(): MetricSample[];
}

export class CounterFamily<L extends string = never> extends Family<L> {
  /** Adds `n` (default 1, never negative) to the series of `labels`. */
  inc(labels: Record<L, string>, n = 1): void {
    if (!(n >= 0)) throw new InputError(`counter ${this.name}: increments are >= 0, got ${n}`);
    this.seriesOf(labels, 1)[0]! += n;
  }

  samples(): MetricSample[] {
    return [...this.series.values()].map((s) => ({ labels: s.labels, name: this.name, value: s.data[0]! }));
  }
}

export class GaugeFamily<L extends string = never> extends Family<L> {
  set(labels: Record<L, string>, v: number): void {
    this.seriesOf(labels, 1)[0] = v;
  }

  samples(): MetricSample[] {
    return [...this.series.values()].map((s) => ({ labels: s.labels, name: this.name, value: s.data[0]! }));
  }
}

export class HistogramFamily<L extends string = never> extends Family<L> {
  constructor(
    name: string,
    help: string,
    labelNames: readonly L[],
    /** Upper bounds, increasing; +Inf is implied. */
    readonly buckets: readonly number[],
  ) {
    super(name, "histogram", help, labelNames);
    for (let i = 1; i < buckets.length; i++)
      if (!(buckets[i]! > buckets[i - 1]!))
        throw new InputError(`histogram ${name}: bucket bounds must increase, got ${buckets.join(", ")}`);
  }

  /** One observation: counted in every bucket whose bound is >= v, and in _sum and _count. */
  observe(labels: Record<L, string>, v: number): void {
    // data: one count per bucket (non-cumulative), then sum, then count
    const d = this.seriesOf(labels, this.buckets.length + 2);
    let i = 0;
    while (i < this.buckets.length && v > this.buckets[i]!) i++;
    if (i < this.buckets.length) d[i]!++;
    d[this.buckets.length]! += v;
    d[this.buckets.length + 1]!++;
  }

  samples(): MetricSample[] {
    const out: MetricSample[] = [];
    const n = this.buckets.length;
    for (const s of this.series.values()) {
      let cumulative = 0;
      for (let i = 0; i < n; i++) {
        cumulative += s.data[i]!;
        out.push({
          labels: { ...s.labels, le: String(this.buckets[i]) },
          name: `${this.name}_bucket`,
          value: cumulative,
        });
      }
      out.push({ labels: { ...s.labels, le: "+Inf" }, name: `${this.name}_bucket`, value: s.data[n + 1]! });
      out.push({ labels: s.labels, name: `${this.name}_sum`, value: s.data[n]! });
      out.push({ labels: s.labels, name: `${this.name}_count`, value: s.data[n + 1]! });
    }
    return out;
  }
}

/** Latency buckets in seconds, 1 ms to 5 min. */
export const SECONDS_BUCKETS: readonly number[] = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
];

const families = new Map<string, Family<string>>();

function declare<F extends Family<string>>(
  name: string,
  labelNames: readonly string[],
  type: MetricType,
  make: () => F,
): F {
  if (!NAME.test(name)) throw new InputError(`metric name '${name}' is not a Prometheus name`);
  for (const l of labelNames)
    if (!LABEL.test(l) || l === "le" || l.startsWith("__"))
      throw new InputError(`metric ${name}: '${l}' cannot be a label name`);
  const known = families.get(name);
  if (known) {
    if (known.type !== type || known.labelNames.join() !== labelNames.join())
      throw new InputError(
        `metric ${name} is declared already as a ${known.type} with labels [${known.labelNames.join(", ")}]`,
      );
    return known as F;
  }
  const f = make();
  families.set(name, f);
  return f;
}

/** A counter of this process (a total that only grows), e.g. `torl_calls_total`. */
export function metricCounter<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): CounterFamily<L> {
  return declare(name, labelNames, "counter", () => new CounterFamily<L>(name, "counter", help, labelNames));
}

/** A gauge of this process (a value that goes up and down). */
export function metricGauge<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): GaugeFamily<L> {
  return declare(name, labelNames, "gauge", () => new GaugeFamily<L>(name, "gauge", help, labelNames));
}

/** A histogram of this process (default buckets: SECONDS_BUCKETS). */
export function metricHistogram<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
  buckets: readonly number[] = SECONDS_BUCKETS,
): HistogramFamily<L> {
  return declare(
    name,
    labelNames,
    "histogram",
    () => new HistogramFamily<L>(name, help, labelNames, buckets),
  );
}

/** Every family this process declared, with its samples now. */
export function metricFamilies(): MetricFamily[] {
  return [...families.values()].map((f) => ({
    name: f.name,
    type: f.type,
    help: f.help,
    samples: f.samples(),
  }));
}
