// The dashboard through the public API and a real browser: headless Chromium loads the page, which
// runs its script against the server, and the DOM it builds is read back with --dump-dom.

import { execFile, execFileSync } from "node:child_process";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import {
  clusterProcesses,
  clusterStatus,
  createActor,
  type Dashboard,
  init,
  kill,
  metricHistogram,
  put,
  setProcessActivity,
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

/** Chromium's path, or a failed test that says how to install it. */
function chromiumFor(t: ExecutionContext): string | undefined {
  const chromium = findChromium();
  if (!chromium)
    t.fail("chromium is not installed: run .ci/setup.d/chromium.sh (apt-get install -y chromium)");
  return chromium;
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

interface Family {
  type: string;
  samples: { name: string; labels: string; value: number }[];
}

/**
 * Prometheus text format 0.0.4: every sample belongs to the family declared by HELP and TYPE just
 * before it (a histogram's samples are its name with _bucket, _sum or _count; its buckets carry `le`,
 * grow with it, and end with +Inf equal to _count).
 */
function parsePrometheus(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  let help: string | undefined;
  let current: string | undefined;
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
      current = ty[1];
      continue;
    }
    const s =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? (\S+)$/.exec(line);
    if (!s) throw new Error(`line ${i + 1} is not a sample: ${line}`);
    const fam = current === undefined ? undefined : families.get(current);
    const suffix = s[1]!.slice(current?.length ?? 0);
    const ok =
      fam &&
      s[1]!.startsWith(current!) &&
      (suffix === ""
        ? fam.type !== "histogram"
        : fam.type === "histogram" && /^_(bucket|sum|count)$/.test(suffix));
    if (!ok)
      throw new Error(`line ${i + 1}: sample ${s[1]} is not of the family declared before it (${current})`);
    if ((suffix === "_bucket") !== /(^\{|,)le="/.test(s[2] ?? ""))
      throw new Error(`line ${i + 1}: le goes with _bucket samples only`);
    const value = Number(s[3] === "+Inf" ? Number.POSITIVE_INFINITY : s[3]);
    if (Number.isNaN(value) && s[3] !== "NaN") throw new Error(`line ${i + 1}: value ${s[3]}`);
    fam!.samples.push({ name: s[1]!, labels: s[2] ?? "", value });
  }
  for (const [name, fam] of families) {
    if (fam.type !== "histogram") continue;
    const series = new Map<string, { le: string; value: number }[]>();
    for (const x of fam.samples.filter((x) => x.name.endsWith("_bucket"))) {
      const le = /le="([^"]+)"/.exec(x.labels)![1]!;
      const key = x.labels.replace(/,?le="[^"]+"/, "");
      series.set(key, [...(series.get(key) ?? []), { le, value: x.value }]);
    }
    for (const [key, buckets] of series) {
      for (let i = 1; i < buckets.length; i++)
        if (
          !(Number(buckets[i]!.le) > Number(buckets[i - 1]!.le) || buckets[i]!.le === "+Inf") ||
          buckets[i]!.value < buckets[i - 1]!.value
        )
          throw new Error(`${name}${key}: buckets must grow with le`);
      const count = fam.samples.find(
        (x) => x.name === `${name}_count` && x.labels === (key === "{}" ? "" : key),
      )?.value;
      if (buckets.at(-1)?.le !== "+Inf" || buckets.at(-1)!.value !== count)
        throw new Error(`${name}${key}: the +Inf bucket must equal _count (${count})`);
    }
  }
  return families;
}

let dashboard: Dashboard;
let runDir: string;

test.before(async () => {
  await init({ numCpus: 2 });
  runDir = mkdtempSync(join(tmpdir(), "torl-dash-run-"));
  writeFileSync(join(runDir, "metrics.jsonl"), "");
  dashboard = await startDashboard({
    status: clusterStatus,
    processes: clusterProcesses,
    runDirs: [runDir],
    port: 0,
    refreshMs: 200,
  });
});

test.after.always(async () => {
  await dashboard?.close();
  await shutdown();
  rmSync(runDir, { recursive: true, force: true });
});

test.serial(
  "the page lists a started actor as ALIVE, then DEAD after a kill, and draws a run's curves as they grow",
  async (t) => {
    const chromium = chromiumFor(t);
    if (!chromium) return;
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
    // a trainer in this driver, in step 6 (what PhaseTracker publishes)
    setProcessActivity("trainer", {
      step: 6,
      phase: "update_actor",
      phaseSinceMs: Date.now() - 2000,
      phases: { gen: 2.5, reward: 0.25 },
    });
    dom = await dumpDom(chromium, dashboard.url);
    setProcessActivity("trainer", undefined);
    t.regex(
      dom,
      /<div class="run" data-trainer-step="6" data-phase-now="update_actor"><b>trainer in driver pid=\d+<\/b> step 6 · now update_actor for [\d.]+ s · phases done: gen 2\.5 s, reward 0\.25 s<\/div>/,
    );
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

test.serial(
  "the page shows the call each actor is running, since when, and the objects with owner, size and holders",
  async (t) => {
    const chromium = chromiumFor(t);
    if (!chromium) return;
    const counter = createActor<Counter>(FIXTURE, "Counter", [0], { name: "busy-counter" });
    await counter.inc();
    const id = (await clusterStatus()).actors.find((a) => a.name === "busy-counter")!.actorId;
    const big = put(new Float64Array(1 << 17)); // 1 MiB, owned by this driver
    t.is(await counter.hold([big]), 1); // the counter's worker holds a ref to it too
    const before = Date.now();
    const slow = counter.slowInc(1, 180_000); // still running when chromium (slow to start on a loaded machine) reads the page
    const queued = counter.inc(); // waits behind it (maxConcurrency 1)
    await new Promise((r) => setTimeout(r, 300));
    const dom = await dumpDom(chromium, dashboard.url);
    const row = new RegExp(`<tr data-actor-id="${id}" data-state="ALIVE">.*?</tr>`).exec(dom)?.[0] ?? "";
    const call =
      /data-current-call="slowInc" data-since-ms="(\d+)">slowInc for [\d.]+ s \(since [^)]+\) \(\+1 queued\)</.exec(
        row,
      );
    t.truthy(call, row);
    t.true(Number(call![1]) >= before - 1000 && Number(call![1]) <= Date.now());
    const obj = new RegExp(`<tr data-object-id="${big.id}" data-bytes="1048576">(.*?)</tr>`).exec(dom);
    t.truthy(obj, "the object's row");
    t.regex(
      obj![1]!,
      /<td>driver pid=\d+<\/td><td>1 MiB<\/td><td[^>]*>READY<\/td><td>driver pid=\d+, Counter 'busy-counter' pid=\d+<\/td>/,
    );
    kill(counter);
    await t.throwsAsync(slow);
    await t.throwsAsync(queued);
  },
);

test.serial(
  "a thread actor is listed with the call it runs, since when and its queue, in its process's report and on the page",
  async (t) => {
    const chromium = chromiumFor(t);
    if (!chromium) return;
    const counter = createActor<Counter>(FIXTURE, "Counter", [0], { thread: true });
    t.is(await counter.inc(), 1);
    const before = Date.now();
    const slow = counter.slowInc(1, 180_000);
    const queued = counter.inc(); // waits behind it (maxConcurrency 1)
    const mine = async () =>
      (await clusterProcesses()).processes
        .find((p) => p.pid === process.pid)!
        .threadActors.find((a) => a.actorId === counter.actorId);
    let report = await mine();
    for (let i = 0; i < 100 && report?.running.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      report = await mine();
    }
    t.like(report, { className: "Counter", state: "ALIVE", restarts: 0, queued: 1 });
    t.deepEqual(
      report!.running.map((c) => [c.name, c.kind]),
      [["slowInc", "actor_call"]],
    );
    t.true(report!.running[0]!.sinceMs >= before - 5 && report!.running[0]!.sinceMs <= Date.now());
    t.deepEqual(report!.calls, [{ method: "inc", total: 1, failed: 0 }]);

    const dom = await dumpDom(chromium, dashboard.url);
    const row =
      new RegExp(`<tr data-actor-id="${counter.actorId}" data-state="ALIVE" data-thread="">.*?</tr>`).exec(
        dom,
      )?.[0] ?? "";
    t.regex(
      row,
      new RegExp(`<td>Counter</td><td>-</td><td class="ALIVE">ALIVE</td><td>0</td><td>${process.pid}</td>`),
    );
    t.regex(row, /<td>thread in driver pid=\d+<\/td>/);
    t.regex(
      row,
      /data-current-call="slowInc" data-since-ms="\d+">slowInc for [\d.]+ s \(since [^)]+\) \(\+1 queued\)</,
    );
    kill(counter);
    await t.throwsAsync(slow);
    await t.throwsAsync(queued);
    const dead = await mine();
    t.like(dead, { state: "DEAD", running: [], queued: 0 });
    t.regex(dead!.cause!, /killed/);
  },
);

test.serial(
  "/metrics is Prometheus text: the cluster's families, every process's, and the run's last step",
  async (t) => {
    const counter = createActor<Counter>(FIXTURE, "Counter", [0], { name: "metrics-counter" });
    await counter.inc();
    await counter.inc();
    await t.throwsAsync(counter.fail("on purpose"));
    const id = (await clusterStatus()).actors.find((a) => a.name === "metrics-counter")!.actorId;
    const threadCounter = createActor<Counter>(FIXTURE, "Counter", [0], { thread: true });
    for (let i = 0; i < 3; i++) await threadCounter.inc();
    await t.throwsAsync(threadCounter.fail("on purpose"));

    const kept = put(new Float64Array(1 << 17));
    const waits = metricHistogram("torl_test_wait_seconds", "A histogram of the test's.", ["kind"]);
    for (const v of [0.003, 0.2, 7]) waits.observe({ kind: "a" }, v);
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
    // every process's own families, each sample labelled with its process
    const of = (family: string, ...labels: string[]) =>
      fams.get(family)?.samples.filter((s) => labels.every((l) => s.labels.includes(l))) ?? [];
    const actor = `actor_id="${id}"`;
    t.is(fams.get("torl_calls_total")!.type, "counter");
    t.deepEqual(
      of("torl_calls_total", actor, 'class="Counter"', 'method="inc"').map((s) => s.value),
      [2],
    );
    t.deepEqual(
      of("torl_calls_failed_total", actor, 'method="fail"').map((s) => s.value),
      [1],
    );
    t.deepEqual(of("torl_calls_failed_total", actor, 'method="inc"'), []);
    t.regex(of("torl_calls_total", actor)[0]!.labels, /pid="\d+",node_id="node-[^"]+",process="Counter"/);
    t.deepEqual(
      of("torl_calls_queued", actor).map((s) => s.value),
      [0],
    );
    t.true(of("torl_object_store_bytes", 'process="driver"')[0]!.value >= 8 << 17);
    t.is(fams.get("torl_processes_silent")!.samples[0]!.value, 0);
    // a thread actor's calls, counted by the process it lives in, labelled with its own id and class
    const thread = `actor_id="${threadCounter.actorId}"`;
    t.deepEqual(
      of(
        "torl_calls_total",
        thread,
        'class="Counter"',
        'method="inc"',
        `pid="${process.pid}"`,
        'process="Counter"',
      ).map((s) => s.value),
      [3],
    );
    t.deepEqual(
      of("torl_calls_failed_total", thread, 'method="fail"').map((s) => s.value),
      [1],
    );
    t.deepEqual(of("torl_calls_failed_total", thread, 'method="inc"'), []);
    t.deepEqual(
      of("torl_calls_running", thread).map((s) => s.value),
      [0],
    );
    t.deepEqual(
      of("torl_calls_queued", thread).map((s) => s.value),
      [0],
    );
    const hist = fams.get("torl_test_wait_seconds")!;
    t.is(hist.type, "histogram");
    const sample = (name: string, le?: string) =>
      hist.samples.find((s) => s.name === name && (le === undefined || s.labels.includes(`le="${le}"`)))!
        .value;
    t.is(sample("torl_test_wait_seconds_count"), 3);
    t.is(sample("torl_test_wait_seconds_sum"), 7.203);
    t.is(sample("torl_test_wait_seconds_bucket", "0.005"), 1);
    t.is(sample("torl_test_wait_seconds_bucket", "0.25"), 2);
    t.is(sample("torl_test_wait_seconds_bucket", "+Inf"), 3);
    t.is(kept.id.length > 0, true);
    kill(counter);
    kill(threadCounter);
  },
);

test("the exposition parser of these tests refuses what Prometheus would", (t) => {
  t.throws(() => parsePrometheus("x 1\n"), { message: /not of the family declared/ });
  t.throws(
    () =>
      parsePrometheus(
        '# HELP h a\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\n',
      ),
    {
      message: /grow/,
    },
  );
  t.throws(() => parsePrometheus('# HELP h a\n# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_count 3\n'), {
    message: /\+Inf bucket must equal _count/,
  });
  t.throws(() => parsePrometheus('# HELP g a\n# TYPE g gauge\ng{a="b} 1\n'), { message: /not a sample/ });
  t.is(parsePrometheus('# HELP g a\n# TYPE g gauge\ng{a="x\\"y"} 1.5\n').get("g")!.samples[0]!.value, 1.5);
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
