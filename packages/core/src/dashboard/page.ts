/**
 * The dashboard's one page: plain HTML, CSS and a script, nothing loaded from elsewhere. It asks
 * /api/status (the head's status and every process's report) and /api/runs every __REFRESH_MS__ ms
 * and redraws. Every value from the cluster goes in
 * through textContent or an SVG attribute, never as markup: actor names and causes are user text.
 */
export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>torl dashboard</title>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #1d2329; background: #f6f7f9; }
  header { background: #1d2329; color: #fff; padding: 10px 18px; display: flex; gap: 18px; align-items: baseline; }
  header h1 { font-size: 16px; margin: 0; }
  #head.down { color: #ff8a80; }
  main { padding: 8px 18px 24px; }
  h2 { font-size: 14px; margin: 18px 0 6px; }
  table { border-collapse: collapse; background: #fff; width: 100%; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #e3e6ea; white-space: nowrap; }
  th { background: #eef0f3; font-weight: 600; }
  td.cause { white-space: normal; color: #8a1c1c; }
  .ALIVE, .CREATED { color: #1b7f3b; font-weight: 600; }
  .DEAD, .INFEASIBLE, .REMOVED { color: #b3261e; font-weight: 600; }
  .PENDING, .RESTARTING { color: #a15c00; font-weight: 600; }
  .empty { color: #7a828a; font-style: italic; }
  .run { background: #fff; padding: 8px 10px; margin-bottom: 12px; }
  .charts { display: flex; flex-wrap: wrap; gap: 10px; }
  .chart { border: 1px solid #e3e6ea; }
  .chart text { font-size: 10px; fill: #4a525a; }
  .phase-bar { fill: #3b6fb6; }
  .bad { color: #b3261e; }
  .busy { color: #a15c00; }
  .idle { color: #7a828a; }
</style>
</head>
<body>
<header><h1>torl</h1><span id="head">connecting…</span><span id="updated"></span></header>
<main>
  <h2>Nodes</h2><div id="nodes"></div>
  <h2>Actors</h2><div id="actors"></div>
  <h2>Placement groups</h2><div id="pgs"></div>
  <h2>Objects</h2><div id="objects"></div>
  <h2>Training runs</h2><div id="trainers"></div><div id="runs"></div>
</main>
<script>
const REFRESH_MS = __REFRESH_MS__;
const token = new URLSearchParams(location.search).get("token");
const api = (path) =>
  fetch(path + (token ? "?token=" + encodeURIComponent(token) : ""), { cache: "no-store" }).then((r) => r.json());

function el(tag, attrs, ...kids) {
  const svg = ["svg", "polyline", "line", "text", "rect", "g", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined) node.setAttribute(k, String(v));
  for (const kid of kids) node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return node;
}

function table(headers, rows) {
  if (rows.length === 0) return el("p", { class: "empty" }, "none");
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows),
  );
}

const round = (x) => (Math.abs(x) >= 100 ? x.toFixed(0) : Number(x.toPrecision(4)).toString());
const bytes = (n) => n >= 1 << 30 ? round(n / (1 << 30)) + " GiB" : n >= 1 << 20 ? round(n / (1 << 20)) + " MiB" :
  n >= 1024 ? round(n / 1024) + " KiB" : n + " B";
const seconds = (ms) => round(Math.max(0, ms) / 1000) + " s";
/** A process as the page names it: "Counter 'c1' pid=12", "driver pid=3". */
const who = (p) => p.role === "driver" ? "driver pid=" + p.pid :
  (p.className === "(task)" ? "task executor" : p.className || "worker") + (p.actorName ? " '" + p.actorName + "'" : "") + " pid=" + p.pid;

/** The cell of an actor's current call: what it runs and since when, or that its process did not answer. */
function currentCall(a, procs) {
  if (a.state !== "ALIVE" || !procs) return el("td", {}, "-");
  if (procs.silent.some((x) => x.actorId === a.actorId))
    return el("td", { class: "busy", "data-current-call": "(no answer)" }, "no answer: event loop blocked, or hung");
  const p = procs.processes.find((x) => x.actorId === a.actorId);
  return p ? callsCell(p) : el("td", {}, "-");
}

/** The calls a process's actor (or a thread actor) runs, since when, and how many wait behind them. */
function callsCell(p) {
  const queued = p.queued > 0 ? " (+" + p.queued + " queued)" : "";
  if (p.running.length === 0) return el("td", { class: "idle", "data-current-call": "" }, "idle" + queued);
  const now = Date.now();
  return el("td", { "data-current-call": p.running[0].name, "data-since-ms": p.running[0].sinceMs },
    p.running.map((c) => c.name + " for " + seconds(now - c.sinceMs) + " (since " + new Date(c.sinceMs).toLocaleTimeString() + ")").join("; ") + queued);
}

function drawObjects(procs, error) {
  const box = document.getElementById("objects");
  if (!procs) {
    box.replaceChildren(el("p", { class: error ? "bad" : "empty" }, error ? "no reports from the processes: " + error : "not reported"));
    return;
  }
  const holders = new Map();
  for (const p of procs.processes) for (const id of p.borrowed) holders.set(id, [...(holders.get(id) || []), who(p)]);
  const all = procs.processes.flatMap((p) => p.objects.map((o) => ({ ...o, owner: who(p) })));
  all.sort((a, b) => b.bytes - a.bytes);
  const total = procs.processes.reduce((n, p) => n + p.objectBytes, 0);
  const count = procs.processes.reduce((n, p) => n + p.objectCount, 0);
  box.replaceChildren(
    el("p", {}, count + " objects, " + bytes(total) + ", owned by " + procs.processes.filter((p) => p.objectCount > 0).length + " processes" +
      (procs.silent.length ? "; " + procs.silent.length + " process(es) did not answer (pids " + procs.silent.map((x) => x.pid).join(", ") + ")" : "")),
    table(["object", "owner", "size", "state", "held by"],
      all.slice(0, 50).map((o) => el("tr", { "data-object-id": o.id, "data-bytes": o.bytes },
        el("td", {}, o.id), el("td", {}, o.owner), el("td", {}, bytes(o.bytes)), el("td", { class: o.state === "READY" ? "" : o.state === "FAILED" ? "DEAD" : "PENDING" }, o.state),
        el("td", {}, [...(o.localRefs > 0 ? [o.owner] : []), ...(holders.get(o.id) || [])].join(", ") +
          (o.copiesOut > 0 && !holders.has(o.id) ? (o.localRefs > 0 ? ", " : "") + o.copiesOut + " ref(s) sent elsewhere" : ""))))),
  );
}

function drawTrainers(procs) {
  const live = (procs ? procs.processes : []).filter((p) => p.activity && p.activity.trainer);
  const now = Date.now();
  document.getElementById("trainers").replaceChildren(...live.map((p) => {
    const tr = p.activity.trainer;
    const done = Object.entries(tr.phases || {}).map(([k, v]) => k + " " + round(v) + " s").join(", ");
    return el("div", { class: "run", "data-trainer-step": tr.step, "data-phase-now": tr.phase || "" },
      el("b", {}, "trainer in " + who(p)), " step " + tr.step +
      (tr.phase ? " · now " + tr.phase + " for " + seconds(now - tr.phaseSinceMs) : "") +
      " · phases done: " + (done || "none yet"));
  }));
}

const resources = (r) => Object.entries(r || {}).filter(([, v]) => v > 0).map(([k, v]) => k + " " + round(v)).join(", ");

function drawStatus(s) {
  const head = document.getElementById("head");
  if (!s.status) {
    head.textContent = "head unreachable: " + s.error;
    head.className = "down";
    return;
  }
  const st = s.status;
  head.className = "";
  head.textContent = "head " + st.address + " · up " + st.uptimeS + " s · " + st.clients + " clients · " +
    (st.security && st.security.mode === "curve" ? "authenticated (CURVE)" : "not authenticated");
  document.getElementById("nodes").replaceChildren(table(
    ["node", "ip", "state", "pid", "used / total"],
    st.nodes.map((n) => el("tr", { "data-node-id": n.nodeId, "data-state": n.alive ? "ALIVE" : "DEAD" },
      el("td", {}, n.nodeId), el("td", {}, n.ip), el("td", { class: n.alive ? "ALIVE" : "DEAD" }, n.alive ? "ALIVE" : "DEAD"),
      el("td", {}, n.pid),
      el("td", {}, Object.entries(n.total).filter(([, t]) => t > 0)
        .map(([k, t]) => k + " " + round(t - (n.available[k] || 0)) + "/" + round(t)).join(", ")))),
  ));
  const actors = st.actors.filter((a) => a.className !== "(task executor)");
  const executors = st.actors.length - actors.length;
  // thread actors live in a thread of the process that made them: its report lists them
  const threads = s.processes ? s.processes.processes.flatMap((p) => (p.threadActors || []).map((a) => [p, a])) : [];
  document.getElementById("actors").replaceChildren(
    table(
      ["actor", "class", "name", "state", "restarts", "pid", "node", "resources", "current call", "cause of death"],
      actors.map((a) => el("tr", { "data-actor-id": a.actorId, "data-state": a.state },
        el("td", {}, a.actorId), el("td", {}, a.className), el("td", {}, a.name || "-"),
        el("td", { class: a.state }, a.state), el("td", {}, Math.max(0, a.restarts - 1)),
        el("td", {}, a.pid ?? "-"), el("td", {}, a.nodeId ?? "-"), el("td", {}, resources(a.resources)),
        currentCall(a, s.processes),
        el("td", { class: "cause" }, a.state === "DEAD" && a.cause ? a.cause.split("\\n")[0] : ""))).concat(
      threads.map(([p, a]) => el("tr", { "data-actor-id": a.actorId, "data-state": a.state, "data-thread": "" },
        el("td", {}, a.actorId), el("td", {}, a.className), el("td", {}, "-"),
        el("td", { class: a.state }, a.state), el("td", {}, a.restarts),
        el("td", {}, p.pid), el("td", {}, p.nodeId || "-"), el("td", {}, "thread in " + who(p)),
        a.state === "DEAD" ? el("td", {}, "-") : callsCell(a),
        el("td", { class: "cause" }, a.state === "DEAD" && a.cause ? a.cause.split("\\n")[0] : "")))),
    ),
    el("p", { class: "empty" }, executors + " task executor process(es) not listed"),
  );
  document.getElementById("pgs").replaceChildren(table(
    ["group", "name", "strategy", "state", "bundles", "nodes"],
    st.placementGroups.map((p) => el("tr", { "data-pg-id": p.pgId, "data-state": p.state },
      el("td", {}, p.pgId), el("td", {}, p.name || "-"), el("td", {}, p.strategy),
      el("td", { class: p.state }, p.state), el("td", {}, p.bundles.map(resources).join(" | ")),
      el("td", {}, (p.bundleNodes || []).join(" | ")))),
  ));
  drawObjects(s.processes, s.processesError);
  drawTrainers(s.processes);
}

const CHARTS = [
  ["critic/score/mean", "score"],
  ["val/acc", "held-out accuracy"],
  ["tool/code_ratio", "code ratio"],
  ["tool/pass_ratio", "pass ratio"],
  ["actor/entropy", "entropy"],
  ["response_length/mean", "response length"],
  ["actor/pg_loss", "policy loss"],
  ["actor/grad_norm", "grad norm"],
  ["timing_s/step", "seconds per step"],
];

function chart(rows, key, title) {
  const pts = rows.filter((r) => key in r.values).map((r) => [r.step, r.values[key]]);
  if (pts.length === 0) return null;
  const W = 260, H = 130, L = 40, B = 18, T = 16;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => L + (x1 === x0 ? (W - L - 6) / 2 : ((x - x0) / (x1 - x0)) * (W - L - 6));
  const sy = (y) => T + (y1 === y0 ? (H - T - B) / 2 : (1 - (y - y0) / (y1 - y0)) * (H - T - B));
  return el("svg", { class: "chart", width: W, height: H, "data-metric": key, "data-points": pts.length },
    el("text", { x: L, y: 11 }, title + " (" + key + ")"),
    el("text", { x: 2, y: T + 8 }, round(y1)), el("text", { x: 2, y: H - B }, round(y0)),
    el("text", { x: L, y: H - 4 }, "step " + x0), el("text", { x: W - 50, y: H - 4 }, "step " + x1),
    el("line", { x1: L, y1: H - B, x2: W - 6, y2: H - B, stroke: "#c5cad0" }),
    el("polyline", { points: pts.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "),
      fill: "none", stroke: "#3b6fb6", "stroke-width": 1.5 }));
}

function phases(last) {
  const entries = Object.entries(last.values).filter(([k]) => k.startsWith("timing_s/") && k !== "timing_s/step");
  if (entries.length === 0) return null;
  const max = Math.max(...entries.map(([, v]) => v)) || 1;
  const W = 420, row = 16;
  return el("svg", { class: "chart phases", width: W, height: row * entries.length + 18, "data-step": last.step },
    el("text", { x: 4, y: 11 }, "phases of step " + last.step + " (seconds)"),
    ...entries.map(([k, v], i) => el("g", { "data-phase": k.slice(9) },
      el("text", { x: 4, y: 18 + i * row + 11 }, k.slice(9)),
      el("rect", { class: "phase-bar", x: 110, y: 18 + i * row + 2, height: row - 5, width: Math.max(1, (v / max) * (W - 170)) }),
      el("text", { x: 114 + (v / max) * (W - 170), y: 18 + i * row + 11 }, round(v)))));
}

function drawRuns(runs) {
  const box = document.getElementById("runs");
  if (runs.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "no run directory given (torl dashboard --run DIR)"));
    return;
  }
  box.replaceChildren(...runs.map((r) => el("div", { class: "run", "data-run": r.name },
    el("b", {}, r.name), " ", el("span", {}, r.dir + " · " + r.rows.length + " rows" + (r.last ? " · step " + r.last.step : "")),
    ...r.badLines.map((b) => el("div", { class: "bad" }, "metrics.jsonl line " + b.line + ": " + b.reason)),
    el("div", { class: "charts" }, ...CHARTS.map(([k, t]) => chart(r.rows, k, t)).filter(Boolean),
      ...(r.last ? [phases(r.last)].filter(Boolean) : [])))));
}

async function tick() {
  try {
    const [s, runs] = await Promise.all([api("/api/status"), api("/api/runs")]);
    drawStatus(s);
    drawRuns(runs);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    const head = document.getElementById("head");
    head.textContent = "dashboard unreachable: " + e;
    head.className = "down";
  } finally {
    setTimeout(tick, REFRESH_MS);
  }
}
tick();
</script>
</body>
</html>
`;
