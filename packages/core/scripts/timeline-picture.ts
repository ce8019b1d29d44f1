/**
 * Writes docs/pictures/timeline.png: the timeline of a small known workload (an actor method that
 * sleeps 200 ms and then calls another actor's 50 ms method, a task, a thread actor's three naps in
 * its two slots, a 8 MiB object fetched from the worker that owns it, all inside a user span; the
 * cluster of the timeline tests), recorded across the cluster, drawn as an SVG the
 * way Perfetto lays a trace out (one row per process, its lanes below it, a bar per span) and
 * screenshotted in headless Chromium. Also writes the trace itself next to the picture's source.
 * Usage: pnpm tsx packages/core/scripts/timeline-picture.ts [OUT.png] [TRACE.json]
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { type ChromeTrace, get, shutdown, submitTask, TimelineWriter, traceSpan } from "../src/index.js";
import { startTimelineCluster, WORKLOAD } from "../test/fixtures/timeline-cluster.js";
import { chromium } from "./headless-chromium.js";

const [
  out = "docs/pictures/timeline.png",
  tracePath = join(mkdtempSync(join(tmpdir(), "torl-tl-")), "trace.json"),
] = process.argv.slice(2);

const { napper, boss, sleeper } = await startTimelineCluster();
const writer = await TimelineWriter.open(tracePath);
await traceSpan("step", async () => {
  await Promise.all([
    boss.work(napper),
    submitTask<number>(WORKLOAD, "square", [7]),
    napper.nap(120),
    sleeper.nap(150),
    sleeper.nap(100),
    sleeper.nap(80),
  ]);
  const [inner] = await napper.stash(1 << 20);
  await get(inner);
});
await writer.close();
await shutdown();

const trace = JSON.parse(readFileSync(tracePath, "utf8")) as ChromeTrace;

const COLORS: Record<string, string> = {
  actor_call: "#3b6fb6",
  task: "#7a4fb0",
  call: "#9db7dc",
  transfer: "#d98b2b",
  collective: "#2f9c8f",
  trainer: "#1b7f3b",
  sandbox: "#b3261e",
  user: "#5d6670",
};

/** The trace as Perfetto lays it out: a header per process row, a line per lane, a bar per span. */
function page(t: ChromeTrace): string {
  const spans = t.traceEvents.filter((e) => e.ph === "X");
  const t0 = Math.min(...spans.map((e) => e.ts!));
  const t1 = Math.max(...spans.map((e) => e.ts! + e.dur!));
  const names = new Map(
    t.traceEvents.filter((e) => e.name === "process_name").map((e) => [e.pid, String(e.args?.name)]),
  );
  const pids = [...new Set(spans.map((e) => e.pid))].sort(
    (a, b) =>
      Number(!names.get(a)!.startsWith("driver")) - Number(!names.get(b)!.startsWith("driver")) || a - b,
  );
  const W = 1200;
  const L = 250;
  const LANE = 22;
  const x = (us: number) => L + ((us - t0) / (t1 - t0)) * (W - L - 20);
  const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const parts: string[] = [];
  let y = 34;
  // a time axis in ms
  const spanMs = (t1 - t0) / 1000;
  const stepMs = spanMs > 2000 ? 250 : spanMs > 800 ? 100 : 50;
  for (let ms = 0; ms <= (t1 - t0) / 1000; ms += stepMs) {
    const px = x(t0 + ms * 1000);
    parts.push(`<line x1="${px}" y1="22" x2="${px}" y2="2000" stroke="#e3e6ea"/>`);
    parts.push(`<text x="${px + 2}" y="16" class="axis">${ms} ms</text>`);
  }
  for (const pid of pids) {
    const rows = spans.filter((e) => e.pid === pid);
    const lanes = [...new Set(rows.map((e) => e.tid))].sort((a, b) => a - b);
    parts.push(`<rect x="0" y="${y}" width="${W}" height="20" fill="#eef0f3"/>`);
    parts.push(`<text x="6" y="${y + 14}" class="proc">${esc(names.get(pid) ?? String(pid))}</text>`);
    y += 22;
    for (const tid of lanes) {
      parts.push(`<text x="16" y="${y + 15}" class="lane">lane ${tid}</text>`);
      // a span nested in others on its lane goes below them, one level per depth (as Perfetto stacks slices)
      const lane = rows.filter((e) => e.tid === tid);
      let deepest = 0;
      for (const e of lane) {
        const depth = lane.filter(
          (p) => p !== e && p.ts! <= e.ts! && p.ts! + p.dur! >= e.ts! + e.dur!,
        ).length;
        deepest = Math.max(deepest, depth);
        const by = y + depth * LANE;
        const bx = x(e.ts!);
        const bw = Math.max(2, x(e.ts! + e.dur!) - bx);
        const label = `${e.name} ${(e.dur! / 1000).toFixed(e.dur! < 10_000 ? 1 : 0)} ms`;
        const fill = COLORS[e.cat ?? "user"];
        parts.push(
          `<rect x="${bx}" y="${by + 2}" width="${bw}" height="${LANE - 4}" rx="2" fill="${fill}"/>`,
        );
        const fits = Math.floor((bw - 6) / 6.2);
        const text = label.length <= fits ? label : e.name.slice(0, fits);
        if (fits >= 3) parts.push(`<text x="${bx + 4}" y="${by + 15}" class="bar">${esc(text)}</text>`);
      }
      y += (deepest + 1) * LANE;
    }
    y += 6;
  }
  const legend = Object.entries(COLORS)
    .filter(([c]) => spans.some((e) => e.cat === c))
    .map(
      ([c, col], i) =>
        `<rect x="${L + i * 120}" y="${y + 8}" width="12" height="12" fill="${col}"/><text x="${L + i * 120 + 16}" y="${y + 18}" class="lane">${c}</text>`,
    )
    .join("");
  const H = y + 30;
  return `<!doctype html><html><head><meta charset="utf-8"><style>
body { margin: 0; background: #fff; font: 12px system-ui, sans-serif; }
.proc { font-weight: 600; fill: #1d2329; } .lane { fill: #4a525a; } .axis { fill: #7a828a; font-size: 10px; }
.bar { fill: #fff; font-size: 11px; } .small { font-size: 10px; }
</style></head><body><svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}">${parts.join("")}${legend}</svg></body></html>`;
}

const html = page(trace);
writeFileSync(join(tmpdir(), "torl-timeline.html"), html);
const height = Number(/height="(\d+)"/.exec(html)![1]);
await chromium([
  `--screenshot=${resolve(out)}`,
  `--window-size=1200,${height}`,
  pathToFileURL(join(tmpdir(), "torl-timeline.html")).href,
]);
console.log(`${out} (trace: ${tracePath})`);
