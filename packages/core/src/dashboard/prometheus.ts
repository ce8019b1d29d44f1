/**
 * The cluster, its processes and its training runs in Prometheus's text exposition format (version
 * 0.0.4): each family a `# HELP` and a `# TYPE` line, then its samples. The processes' own families
 * (calls, queues, object store, sandbox runs, trainer phases) are merged by name, each sample labelled
 * with its process. Names and units: docs/observability.md.
 */
import type { ClusterStatus } from "../cluster/messages.js";
import { CALL_FAMILIES } from "../observe/call-metrics.js";
import type { MetricType } from "../observe/metrics.js";
import type { ProcessesReport, ProcessReport } from "../observe/process-report.js";
import type { RunView } from "./runs.js";

const ACTOR_STATES = ["PENDING", "ALIVE", "RESTARTING", "DEAD"] as const;
const PG_STATES = ["PENDING", "CREATED", "REMOVED", "INFEASIBLE"] as const;

type Labels = Record<string, string>;

/** A label value with `\`, `"` and newlines escaped, as the format asks. */
function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function number(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Number.POSITIVE_INFINITY) return "+Inf";
  if (v === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(v);
}

class Exposition {
  private lines: string[] = [];

  /** A family; a sample's third element names it when it is not the family's name (a histogram's _bucket, _sum, _count). */
  family(name: string, type: MetricType, help: string, samples: [Labels, number, string?][]): void {
    this.lines.push(`# HELP ${name} ${help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}`);
    this.lines.push(`# TYPE ${name} ${type}`);
    for (const [labels, value, sampleName] of samples) {
      const keys = Object.keys(labels);
      const l = keys.length ? `{${keys.map((k) => `${k}="${escapeLabel(labels[k]!)}"`).join(",")}}` : "";
      this.lines.push(`${sampleName ?? name}${l} ${number(value)}`);
    }
  }

  text(): string {
    return `${this.lines.join("\n")}\n`;
  }
}

/** The labels that say which process a sample came from. */
function processLabels(p: ProcessReport): Labels {
  return {
    pid: String(p.pid),
    node_id: p.nodeId ?? "",
    process: p.role === "driver" ? "driver" : (p.className ?? "worker"),
    actor_id: p.actorId ?? "",
  };
}

/** Every process's families, merged by name (a name declared with two types keeps the first). */
function processFamilies(out: Exposition, report: ProcessesReport): void {
  out.family(
    "torl_processes_silent",
    "gauge",
    "Processes that did not answer the dashboard's last probe within its deadline (a blocked event loop, or a hung process).",
    [[{}, report.silent.length]],
  );
  const merged = new Map<string, { type: MetricType; help: string; samples: [Labels, number, string][] }>();
  for (const p of report.processes) {
    const who = processLabels(p);
    for (const f of p.metrics) {
      let m = merged.get(f.name);
      if (!m) merged.set(f.name, (m = { type: f.type, help: f.help, samples: [] }));
      if (m.type !== f.type) continue;
      for (const s of f.samples) m.samples.push([{ ...who, ...s.labels }, s.value, s.name]);
    }
  }
  // a thread actor's calls, counted by its process: labelled as a process actor's are by its worker
  const add = (fam: { name: string; help: string }, type: MetricType, labels: Labels, value: number) => {
    let m = merged.get(fam.name);
    if (!m) merged.set(fam.name, (m = { type, help: fam.help, samples: [] }));
    if (m.type === type) m.samples.push([labels, value, fam.name]);
  };
  for (const p of report.processes)
    for (const a of p.threadActors ?? []) {
      const who: Labels = { ...processLabels(p), process: a.className, actor_id: a.actorId };
      for (const c of a.calls) {
        const labels = { ...who, class: a.className, method: c.method };
        add(CALL_FAMILIES.total, "counter", labels, c.total);
        if (c.failed > 0) add(CALL_FAMILIES.failed, "counter", labels, c.failed);
      }
      if (a.state === "DEAD") continue;
      add(CALL_FAMILIES.running, "gauge", who, a.running.length);
      add(CALL_FAMILIES.queued, "gauge", who, a.queued);
    }
  for (const [name, m] of [...merged].sort(([a], [b]) => a.localeCompare(b)))
    out.family(name, m.type, m.help, m.samples);
}

/**
 * The exposition of one status (undefined: the head did not answer), the processes' reports
 * (undefined: not asked, or no answer) and the runs' last rows.
 */
export function prometheusText(
  status: ClusterStatus | undefined,
  runs: readonly RunView[],
  processes?: ProcessesReport,
): string {
  const out = new Exposition();
  out.family(
    "torl_head_up",
    "gauge",
    "1 when the head answered the dashboard's last status request, else 0.",
    [[{}, status ? 1 : 0]],
  );
  if (status) {
    out.family("torl_head_uptime_seconds", "gauge", "Seconds since the head started.", [
      [{}, status.uptimeS],
    ]);
    out.family("torl_head_clients", "gauge", "Drivers and workers connected to the head.", [
      [{}, status.clients],
    ]);
    out.family("torl_head_received_bytes_total", "counter", "Bytes the head has received.", [
      [{}, status.bytesReceived],
    ]);
    out.family(
      "torl_head_refused_connections_total",
      "counter",
      "Connections the head refused for lack of the cluster's keys.",
      [[{}, status.security?.refusedConnections ?? 0]],
    );
    out.family(
      "torl_node_alive",
      "gauge",
      "1 for a node whose heartbeats arrive, 0 for one declared dead.",
      status.nodes.map((n) => [{ node_id: n.nodeId, ip: n.ip }, n.alive ? 1 : 0]),
    );
    const resources = (pick: "total" | "available"): [Labels, number][] =>
      status.nodes.flatMap((n) =>
        Object.entries(n[pick]).map(([resource, v]): [Labels, number] => [
          { node_id: n.nodeId, resource },
          v,
        ]),
      );
    out.family(
      "torl_node_resource_total",
      "gauge",
      "A node's resources (CPU, GPU, memory bytes, custom).",
      resources("total"),
    );
    out.family(
      "torl_node_resource_available",
      "gauge",
      "A node's resources not held by actors or bundles.",
      resources("available"),
    );
    const counts = new Map<string, number>(ACTOR_STATES.map((s) => [s, 0]));
    for (const a of status.actors) counts.set(a.state, (counts.get(a.state) ?? 0) + 1);
    out.family(
      "torl_actors",
      "gauge",
      "Actors (task executors included) by state.",
      [...counts].map(([state, n]) => [{ state }, n]),
    );
    out.family(
      "torl_actor_restarts_total",
      "counter",
      "Times an actor was restarted after its process died.",
      status.actors
        .filter((a) => a.className !== "(task executor)")
        .map((a) => [
          { actor_id: a.actorId, class: a.className, name: a.name ?? "" },
          Math.max(0, a.restarts - 1),
        ]),
    );
    const pgs = new Map<string, number>(PG_STATES.map((s) => [s, 0]));
    for (const p of status.placementGroups) pgs.set(p.state, (pgs.get(p.state) ?? 0) + 1);
    out.family(
      "torl_placement_groups",
      "gauge",
      "Placement groups by state.",
      [...pgs].map(([state, n]) => [{ state }, n]),
    );
  }
  if (processes) processFamilies(out, processes);
  const withRows = runs.filter((r) => r.last !== undefined);
  out.family(
    "torl_trainer_step",
    "gauge",
    "The last step a training run wrote to its metrics.jsonl.",
    withRows.map((r) => [{ run: r.name }, r.last!.step]),
  );
  out.family(
    "torl_trainer_phase_seconds",
    "gauge",
    "Seconds each phase of the run's last step took (its timing_s/<phase> metrics).",
    withRows.flatMap((r) =>
      Object.entries(r.last!.values)
        .filter(([k]) => k.startsWith("timing_s/"))
        .map(([k, v]): [Labels, number] => [{ run: r.name, phase: k.slice("timing_s/".length) }, v]),
    ),
  );
  out.family(
    "torl_trainer_metric",
    "gauge",
    "Every other number of the run's last metrics.jsonl row, by its name there (docs/metrics.md).",
    withRows.flatMap((r) =>
      Object.entries(r.last!.values)
        .filter(([k]) => !k.startsWith("timing_s/"))
        .map(([k, v]): [Labels, number] => [{ run: r.name, metric: k }, v]),
    ),
  );
  return out.text();
}
