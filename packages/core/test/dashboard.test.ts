// The dashboard through the public API and a real browser: headless Chromium loads the page, which
// runs its script against the server, and the DOM it builds is read back with --dump-dom.

import { execFile, execFileSync } from "node:child_process";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  clusterStatus,
  createActor,
  type Dashboard,
  init,
  kill,
  shutdown,
  startDashboard,
} from "../src/index.js";
import type { Counter } from "./fixtures/counter.js";

const FIXTURE = new URL("./fixtures/counter.ts", import.meta.url).href;

function findChromium(): string | undefined {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
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

/** The page's DOM after its script ran for a while (virtual time: the page's timers, not the wall clock). */
function dumpDom(chromium: string, url: string): Promise<string> {
  const profile = mkdtempSync(join(tmpdir(), "torl-dash-chromium-"));
  return new Promise((resolve, reject) => {
    execFile(
      chromium,
      [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        `--user-data-dir=${profile}`,
        "--virtual-time-budget=3000",
        "--dump-dom",
        url,
      ],
      { timeout: 120_000, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        rmSync(profile, { recursive: true, force: true });
        if (err) reject(new Error(`chromium failed: ${err.message}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string; type: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => {
        body += c;
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body, type: String(res.headers["content-type"]) }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

/** Prometheus text format 0.0.4: every sample belongs to a family declared by HELP and TYPE before it. */
function parsePrometheus(
  text: string,
): Map<string, { type: string; samples: { labels: string; value: number }[] }> {
  const families = new Map<string, { type: string; samples: { labels: string; value: number }[] }>();
  let help: string | undefined;
  for (const [i, line] of text.split("\n").entries()) {
    if (line === "") continue;
    const h = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$/.exec(line);
    if (h) {
      help = h[1];
      continue;
    }
    const ty = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter|histogram|summary|untyped)$/.exec(line);
    if (ty) {
      if (ty[1] !== help) throw new Error(`line ${i + 1}: TYPE of ${ty[1]} without its HELP`);
      if (families.has(ty[1]!)) throw new Error(`line ${i + 1}: family ${ty[1]} declared twice`);
      families.set(ty[1]!, { type: ty[2]!, samples: [] });
      continue;
    }
    const s =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? (\S+)$/.exec(line);
    if (!s) throw new Error(`line ${i + 1} is not a sample: ${line}`);
    const fam = families.get(s[1]!);
    if (!fam) throw new Error(`line ${i + 1}: sample of undeclared family ${s[1]}`);
    const value = Number(s[3] === "+Inf" ? Number.POSITIVE_INFINITY : s[3]);
    if (Number.isNaN(value) && s[3] !== "NaN") throw new Error(`line ${i + 1}: value ${s[3]}`);
    fam.samples.push({ labels: s[2] ?? "", value });
  }
  return families;
}

let dashboard: Dashboard;
let runDir: string;

test.before(async () => {
  await init({ numCpus: 2 });
  runDir = mkdtempSync(join(tmpdir(), "torl-dash-run-"));
  writeFileSync(join(runDir, "metrics.jsonl"), "");
  dashboard = await startDashboard({ status: clusterStatus, runDirs: [runDir], port: 0, refreshMs: 200 });
});

test.after.always(async () => {
  await dashboard?.close();
  await shutdown();
  rmSync(runDir, { recursive: true, force: true });
});

test.serial(
  "the page lists a started actor as ALIVE, then DEAD after a kill, and draws a run's curves as they grow",
  async (t) => {
    const chromium = findChromium();
    if (!chromium) {
      t.fail("chromium is not installed: run .ci/setup.d/chromium.sh (apt-get install -y chromium)");
      return;
    }
    const counter = createActor<Counter>(FIXTURE, "Counter", [0], { name: "dash-counter" });
    t.is(await counter.inc(), 1);
    const id = (await clusterStatus()).actors.find((a) => a.name === "dash-counter")!.actorId;
    let dom = await dumpDom(chromium, dashboard.url);
    t.regex(dom, new RegExp(`<tr data-actor-id="${id}" data-state="ALIVE">`));
    t.regex(dom, /<td>Counter<\/td><td>dash-counter<\/td>/);
    t.regex(dom, /data-node-id="[^"]+" data-state="ALIVE"/);
    t.regex(dom, /no data-points|<div class="charts"><\/div>|data-run=/);

    kill(counter);
    for (
      let i = 0;
      i < 100 && (await clusterStatus()).actors.find((a) => a.actorId === id)?.state !== "DEAD";
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    for (let step = 1; step <= 5; step++) {
      appendFileSync(
        join(runDir, "metrics.jsonl"),
        `${JSON.stringify({ step, "critic/score/mean": -1 + step / 5, "actor/entropy": 0.5 / step, "timing_s/gen": 2.5, "timing_s/update_actor": 1.25, "timing_s/step": 4 })}\n`,
      );
    }
    appendFileSync(join(runDir, "metrics.jsonl"), '{"step": 6, "critic/score/mean": 0.5'); // still being written
    dom = await dumpDom(chromium, dashboard.url);
    t.regex(dom, new RegExp(`<tr data-actor-id="${id}" data-state="DEAD">`));
    const score =
      /<svg class="chart"[^>]*data-metric="critic\/score\/mean" data-points="(\d+)"[^>]*>.*?<polyline points="([^"]+)"/.exec(
        dom,
      );
    t.truthy(score, "a chart of critic/score/mean");
    t.is(score![1], "5");
    t.is(score![2]!.split(" ").length, 5);
    // the score rises: the polyline's last point is higher on the screen (smaller y) than its first
    const ys = score![2]!.split(" ").map((p) => Number(p.split(",")[1]));
    t.true(ys[4]! < ys[0]!);
    t.regex(dom, /data-step="5"/);
    t.regex(dom, /data-phase="gen"/);
    t.regex(dom, /data-phase="update_actor"/);
  },
);

test.serial("/metrics is Prometheus text: the cluster's families and the run's last step", async (t) => {
  const metricsUrl = dashboard.url.replace(/\/$/, "/metrics");
  const res = await get(metricsUrl);
  t.is(res.status, 200);
  t.regex(res.type, /^text\/plain; version=0\.0\.4/);
  const fams = parsePrometheus(res.body);
  t.is(fams.get("torl_head_up")!.samples[0]!.value, 1);
  t.is(fams.get("torl_head_received_bytes_total")!.type, "counter");
  t.true(
    fams
      .get("torl_node_resource_total")!
      .samples.some((s) => /resource="CPU"/.test(s.labels) && s.value === 2),
  );
  t.true(fams.get("torl_actors")!.samples.some((s) => s.labels === '{state="DEAD"}' && s.value >= 1));
  t.deepEqual(
    fams.get("torl_trainer_step")!.samples.map((s) => s.value),
    [5],
  );
  const phases = fams.get("torl_trainer_phase_seconds")!.samples;
  t.true(phases.some((s) => /phase="gen"/.test(s.labels) && s.value === 2.5));
  t.true(
    fams
      .get("torl_trainer_metric")!
      .samples.some((s) => /metric="actor\/entropy"/.test(s.labels) && s.value === 0.1),
  );
});

test.serial(
  "a request naming another Host is refused (DNS rebinding), and so is anything but GET",
  async (t) => {
    const url = new URL(dashboard.url);
    t.is((await get(`${url.origin}/api/status`, { host: `evil.example:${url.port}` })).status, 403);
    t.is((await get(`${url.origin}/api/status`)).status, 200);
    t.is((await get(`${url.origin}/nope`)).status, 404);
  },
);

test.serial("beyond loopback every request needs the printed token", async (t) => {
  const open = await startDashboard({ status: clusterStatus, host: "0.0.0.0", port: 0 });
  try {
    t.truthy(open.token);
    t.regex(open.url, /\?token=[0-9a-f]{48}$/);
    const base = `http://127.0.0.1:${open.port}`;
    t.is((await get(`${base}/api/status`)).status, 403);
    t.is((await get(`${base}/metrics`, { authorization: "Bearer wrong" })).status, 403);
    t.is((await get(`${base}/metrics`, { authorization: `Bearer ${open.token}` })).status, 200);
    const s = JSON.parse((await get(`${base}/api/status?token=${open.token}`)).body);
    t.true(Array.isArray(s.status.nodes));
  } finally {
    await open.close();
  }
});

test.serial("a run directory that does not exist is refused by name; a port in use too", async (t) => {
  const err = await t.throwsAsync(
    startDashboard({ status: clusterStatus, runDirs: ["/no/such/run"], port: 0 }),
  );
  t.regex(err!.message, /run directory \/no\/such\/run does not exist/);
  const busy = await t.throwsAsync(startDashboard({ status: clusterStatus, port: dashboard.port }));
  t.regex(busy!.message, new RegExp(`port ${dashboard.port} on 127.0.0.1 is in use`));
});
