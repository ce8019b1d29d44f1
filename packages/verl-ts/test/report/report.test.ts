import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createCanvas, loadImage } from "@napi-rs/canvas";
import { type TrajectorySample, trajectoryFromTir } from "@torl-ts/verl";
import test from "ava";
import {
  classifyResponse,
  escapeHtml,
  findChromium,
  highlightResponse,
  lineChart,
  ReportInputError,
  reportCommand,
  screenshotHtml,
  smoothSeries,
  writeReport,
} from "../../src/report/report.js";

/** A run directory in the trainer's real format: veRL metric names, val/* only every 2nd step. */
function fakeRun(
  dir: string,
  opts: { steps: number; codeFrom: number; codeTo: number; accTo: number; klPenalty?: number },
): void {
  const lines: string[] = [];
  for (let step = 0; step <= opts.steps; step++) {
    const f = step / opts.steps;
    const code = opts.codeFrom + (opts.codeTo - opts.codeFrom) * f;
    const m: Record<string, number> = {
      step,
      "critic/score/mean": -0.6 + 1.1 * f,
      "critic/score/max": 1,
      "critic/rewards/mean": -0.6 + 1.1 * f - (opts.klPenalty ?? 0),
      "critic/advantages/mean": 0,
      "critic/advantages/max": 1.5,
      "critic/advantages/min": -1.5,
      "critic/returns/mean": 0,
      "critic/returns/max": 1.5,
      "critic/returns/min": -1.5,
      "response_length/mean": 80 + 40 * Math.sin(step),
      "response_length/max": 160,
      "response_length/clip_ratio": 0.05,
      "actor/pg_loss": -0.01 * step,
      "actor/entropy": 0.6 - 0.02 * step,
      "actor/ppo_kl": 0.001 * step,
      "actor/grad_norm": 0.3 + 0.01 * step,
      "actor/lr": 1e-5,
      "actor/pg_clipfrac": 0.01,
      "actor/pg_clipfrac_lower": 0,
      "reward/acc": 0.2 + 0.5 * f,
      "reward/no_answer_rate": 0.3 - 0.2 * f,
      "tool/code_ratio": code,
      // As the trainer logs it: 0 when there was no tool call.
      "tool/pass_ratio": code === 0 ? 0 : 0.5 + 0.4 * f,
      "tool/effective_code_ratio": code === 0 ? 0 : 0.2 + 0.6 * f,
      "tool/calls_per_response": code,
      "global_seqlen/mean": 4000,
      ...(step > 0 ? { "timing_s/gen": 6, "timing_s/old_log_prob": 1.5, "timing_s/update_actor": 3 } : {}),
    };
    // As the trainer logs it: step 0 (validation before training) is not timed.
    if (step > 0) m["timing_s/step"] = step % 2 === 0 ? 13 : 11;
    if (step % 2 === 0) {
      m["val/arith/acc"] = 0.1 + opts.accTo * f;
      m["val/arith/score"] = -0.8 + f;
      m["val/modular/acc"] = 0.05 + (opts.accTo - 0.1) * f;
      m["val/acc"] = (m["val/arith/acc"]! + m["val/modular/acc"]!) / 2;
      m["val/tool/code_ratio"] = code;
      if (step > 0) m["timing_s/testing"] = 2;
    }
    lines.push(JSON.stringify(m));
  }
  writeFileSync(join(dir, "metrics.jsonl"), `${lines.join("\n")}\n`);
  writeFileSync(
    join(dir, "summary.json"),
    JSON.stringify({
      steps: opts.steps,
      wall_seconds: 321.5,
      num_llm_calls_available: 1,
      val_acc_initial: 0.075,
      val_acc_final: 0.6,
      code_ratio_initial: opts.codeFrom,
      code_ratio_final: opts.codeTo,
      pass_ratio_final: 0.9,
      run_dir: resolve(dir),
      report: join(resolve(dir), "report.html"),
      val_acc_by_source_final: { "tiny/gcd": 0.92, "tiny/lcm": 0.89, "tiny/modpow": 1, "tiny/product": 0.73 },
    }),
  );
}

const EVIL_CODE = 'x = "<script>alert(1)</script></pre>&amp;"\nprint(12 * 34)\n';

function sampleWithCode(step: number, correct: boolean): TrajectorySample {
  const before = "Let me compute it.\n```python\n" + EVIL_CODE + "```\n";
  const obs = "```output\n408\n```\n";
  const response = `${before}${obs}So the answer is \\boxed{${correct ? 408 : 407}}.`;
  return {
    step,
    split: "val",
    data_source: "arith",
    prompt: "A conversation between User and Assistant.\nUser: What is 12 * 34 <b>?</b>\nAssistant:\n",
    response,
    ground_truth: "408",
    extracted: correct ? "408" : "407",
    correct,
    score: correct ? 1 : -1,
    observation_ranges: [[before.length, before.length + obs.length]],
    tool_calls: [
      {
        code: EVIL_CODE,
        observation: "408",
        success: true,
        range: [before.length, before.length + obs.length],
      },
    ],
  };
}

async function pixelStats(
  png: Buffer,
): Promise<{ width: number; height: number; distinct: number; has: (rgb: number[]) => boolean }> {
  const img = await loadImage(png);
  const c = createCanvas(img.width, img.height);
  const ctx = c.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, img.width, img.height).data;
  const colors = new Set<number>();
  for (let i = 0; i < data.length; i += 4 * 7)
    colors.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!);
  const has = (rgb: number[]) => {
    for (let i = 0; i < data.length; i += 4)
      if (
        Math.abs(data[i]! - rgb[0]!) + Math.abs(data[i + 1]! - rgb[1]!) + Math.abs(data[i + 2]! - rgb[2]!) <
        30
      )
        return true;
    return false;
  };
  return { width: img.width, height: img.height, distinct: colors.size, has };
}

/** TORL_REPORT_KEEP=DIR keeps the files for a look. */
function keep(run: string, names: string[]): void {
  const dir = process.env.TORL_REPORT_KEEP;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  for (const n of names) copyFileSync(join(run, n), join(dir, n));
}

function makeRuns(t: { teardown: (f: () => void) => void }) {
  const root = mkdtempSync(join(tmpdir(), "torl-report-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const run = join(root, "tiny-c1");
  const control = join(root, "tiny-c0");
  for (const d of [run, control]) mkdirSync(d);
  fakeRun(run, { steps: 12, codeFrom: 0.4, codeTo: 0.8, accTo: 0.6 });
  fakeRun(control, { steps: 12, codeFrom: 0, codeTo: 0, accTo: 0.3 });
  const samples = [
    sampleWithCode(0, false),
    { step: 0, prompt: "p", response: "No code here, just \\boxed{3} <i>", score: -1, correct: false },
    sampleWithCode(12, true),
  ];
  writeFileSync(join(run, "samples.jsonl"), `${samples.map((s) => JSON.stringify(s)).join("\n")}\n`);
  return { root, run, control };
}

test("the report HTML is self-contained, escapes code and observations, and draws every chart", async (t) => {
  const { run, control } = makeRuns(t);
  const out = await writeReport(run, { compareDir: control });
  const html = readFileSync(out.html, "utf8");
  // Self-contained: no scripts, no external URLs.
  t.false(/<script/i.test(html), "no <script> element (the sample's code must be escaped)");
  t.false(/(src|href)\s*=\s*["']?(https?:)?\/\//i.test(html), "nothing loaded from the network");
  t.true(html.includes("&lt;script&gt;alert(1)&lt;/script&gt;&lt;/pre&gt;&amp;amp;"));
  t.true(html.includes("What is 12 * 34 &lt;b&gt;?&lt;/b&gt;"));
  for (const title of [
    "Validation accuracy",
    "Training accuracy",
    "Score and reward",
    "No-answer rate",
    "Response length",
    "Response length clip ratio",
    "Code ratio",
    "Code pass ratio",
    "Effective code ratio",
    "Policy loss",
    "Entropy",
    "KL",
    "Gradient norm",
    "Learning rate",
    "Clip fractions",
    "Advantages and returns",
    "Throughput",
    "Time per step",
  ])
    t.true(html.includes(`aria-label="${title}"`), title);
  for (const label of ["arith", "modular", "mean (tiny-c1)", "mean (tiny-c0)"])
    t.true(html.includes(`>${label}</text>`), label);
  t.true(html.includes('stroke-dasharray="6 4"'), "the compared run is dashed");
  // Code and observation highlighted.
  t.true(html.includes('<span class="obs">```output\n408\n```\n</span>'));
  t.regex(html, /<span class="code">```python\nx = &quot;&lt;script&gt;/);
  t.true(html.includes("tiny-c0"));
});

test("report.png is drawn with canvas: the charts' size and colours, not a blank image", async (t) => {
  const { run } = makeRuns(t);
  const out = await writeReport(run);
  keep(run, ["report.png", "report.html"]);
  const png = readFileSync(out.png!);
  t.true(png.subarray(1, 4).toString() === "PNG");
  const s = await pixelStats(png);
  t.is(s.width, 3 * 420 + 4 * 10);
  t.true(s.height > 500);
  t.true(s.distinct > 20, `distinct colours ${s.distinct}`);
  t.true(s.has([0x1f, 0x77, 0xb4]), "a blue series line is drawn");
});

test("the HTML renders in headless Chromium: a non-trivial screenshot with the charts and the highlights", async (t) => {
  const chromium = findChromium();
  if (!chromium) {
    t.fail("chromium is not installed: run .ci/setup.d/chromium.sh (apt-get install -y chromium)");
    return;
  }
  const { run, control } = makeRuns(t);
  const out = await writeReport(run, { compareDir: control, noPng: true });
  const shot = join(run, "screenshot.png");
  await screenshotHtml(out.html, shot, { width: 1360, height: 4200 });
  keep(run, ["report.html", "screenshot.png"]);
  t.true(statSync(shot).size > 30_000, `screenshot is ${statSync(shot).size} bytes`);
  const s = await pixelStats(readFileSync(shot));
  t.is(s.width, 1360);
  t.true(s.distinct > 50, `distinct colours ${s.distinct}`);
  t.true(s.has([0x1f, 0x77, 0xb4]), "chart lines rendered");
  t.true(s.has([0xff, 0xf3, 0xcd]), "the observation highlight rendered");
});

test("response highlighting: ranges win over fences, and fences are found without ranges", (t) => {
  const s = sampleWithCode(1, true);
  const cls = classifyResponse(s);
  const [a, b] = s.observation_ranges![0]!;
  t.true(cls.slice(a, b).every((c) => c === 2));
  t.is(cls[a - 1], 1);
  t.is(cls[0], 0);
  const noRanges = { ...s, observation_ranges: undefined, tool_calls: undefined };
  t.deepEqual(classifyResponse(noRanges), cls);
  t.false(highlightResponse(s).includes("<script"));
});

test("charts: a series without points stays out of the legend; a chart with no data says so", (t) => {
  const svg = lineChart({
    title: "Reward",
    series: [
      {
        label: "score",
        color: "#1f77b4",
        points: [
          [1, -0.5],
          [2, -0.2],
        ],
      },
      { label: "reward", color: "#d62728", points: [] },
    ],
  });
  t.true(svg.includes(">score</text>"));
  t.false(svg.includes(">reward</text>"));
  t.true(lineChart({ title: "Empty", series: [] }).includes(">no data</text>"));
});

test("trajectoryFromTir turns a TIR sample's calls into ranges and tool calls", (t) => {
  const rec = trajectoryFromTir(
    {
      text: "```python\nprint(1)\n```\n```output\n1\n```\n\\boxed{1}",
      calls: [
        { call: { arguments: { code: "print(1)\n" } }, observation: "1", success: true, textRange: [23, 40] },
      ],
    },
    { step: 3, prompt: "q", score: 1, correct: true },
  );
  t.deepEqual(rec.observation_ranges, [[23, 40]]);
  t.deepEqual(rec.tool_calls, [{ code: "print(1)\n", observation: "1", success: true, range: [23, 40] }]);
});

test("bad inputs name the file: a missing run, a broken line in the middle", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "torl-report-bad-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  await t.throwsAsync(writeReport(join(root, "nope")), {
    instanceOf: ReportInputError,
    message: /metrics\.jsonl.*not found/,
  });
  writeFileSync(join(root, "metrics.jsonl"), '{"step": 0}\n{oops\n{"step": 1}\n');
  await t.throwsAsync(writeReport(root), { instanceOf: ReportInputError, message: /metrics\.jsonl:2/ });
  // A torn last line (a killed run) is skipped.
  writeFileSync(join(root, "metrics.jsonl"), '{"step": 0, "tool/code_ratio": 0.5}\n{"step": 1, "tool/co');
  await t.notThrowsAsync(writeReport(root, { noPng: true }));
  await t.throwsAsync(reportCommand.run([]), { name: "UsageError" });
});

/** The SVG of one chart in the step-axis (or wall-clock) block of the page. */
function chartSvg(html: string, title: string, axis: "step" | "wall" = "step"): string {
  const block =
    axis === "step"
      ? html.slice(html.indexOf('<div class="by-step">'), html.indexOf('<div class="by-wall">'))
      : html.slice(html.indexOf('<div class="by-wall">'));
  const at = block.indexOf(`aria-label="${escapeHtml(title)}"`);
  if (at < 0) return "";
  const start = block.lastIndexOf("<svg ", at);
  return block.slice(start, block.indexOf("</svg>", at) + 6);
}

test("every chart has a y-axis label; the page shows no absolute path; the summary is a readable table", async (t) => {
  const { root, run, control } = makeRuns(t);
  const html = readFileSync((await writeReport(run, { compareDir: control, noPng: true })).html, "utf8");
  const svgs = html.match(/<svg [\s\S]*?<\/svg>/g)!;
  t.true(svgs.length >= 2 * 18, `${svgs.length} charts (step and wall-clock)`);
  for (const svg of svgs) t.regex(svg, /class="ylabel"[^>]*>[^<]+<\/text>/, svg.slice(0, 200));
  t.regex(chartSvg(html, "Time per step"), /class="ylabel"[^>]*>seconds</);
  t.false(html.includes(root), "no absolute path of the machine that made it");
  // Objects are a nested key/value table, not a line of JSON pushing cells off screen; paths are short.
  t.false(html.includes('{"tiny/gcd"'));
  t.regex(html, /<table class="kv"><tr><td>tiny\/gcd<\/td><td>0\.92<\/td><\/tr>/);
  t.regex(html, /<tr><td>run_dir<\/td><td>tiny-c1<\/td><td>tiny-c0<\/td><\/tr>/);
  t.regex(html, /<tr><td>report<\/td><td>tiny-c1\/report\.html<\/td>/);
  t.regex(html, /td,th\{[^}]*text-align:left/);
});

test("score and reward: one line with a note when equal, two lines when a KL penalty separates them", async (t) => {
  const { root, run } = makeRuns(t);
  const equal = chartSvg(
    readFileSync((await writeReport(run, { noPng: true })).html, "utf8"),
    "Score and reward",
  );
  t.true(equal.includes(">score</text>"));
  t.false(equal.includes(">reward</text>"), "reward = score is not drawn on top of it");
  t.true(equal.includes("reward = score (no KL penalty in the reward)"));
  const kl = join(root, "with-kl");
  mkdirSync(kl);
  fakeRun(kl, { steps: 6, codeFrom: 0.4, codeTo: 0.8, accTo: 0.6, klPenalty: 0.05 });
  const both = chartSvg(
    readFileSync((await writeReport(kl, { noPng: true })).html, "utf8"),
    "Score and reward",
  );
  t.true(both.includes(">score</text>") && both.includes(">reward</text>"));
  t.false(both.includes("reward = score"));
});

test("a ratio undefined at a step (no tool call) is a gap, not 0: the line breaks, hover says undefined", async (t) => {
  const { root, control } = makeRuns(t);
  const html0 = readFileSync((await writeReport(control, { noPng: true })).html, "utf8");
  t.true(chartSvg(html0, "Code pass ratio").includes(">no data</text>"), "C=0: never defined, nothing drawn");
  // Code at every step but one: the pass ratio breaks there.
  const gap = join(root, "gap");
  mkdirSync(gap);
  fakeRun(gap, { steps: 8, codeFrom: 0.4, codeTo: 0.8, accTo: 0.6 });
  const rows = readFileSync(join(gap, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  Object.assign(rows[4], { "tool/code_ratio": 0, "tool/pass_ratio": 0, "tool/effective_code_ratio": 0 });
  writeFileSync(join(gap, "metrics.jsonl"), `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
  const svg = chartSvg(
    readFileSync((await writeReport(gap, { noPng: true, smoothing: 0 })).html, "utf8"),
    "Code pass ratio",
  );
  t.is(svg.match(/<polyline /g)?.length, 2, "two segments around the gap");
  t.true(svg.includes("gaps: undefined, no tool call at that step"));
  t.regex(svg, /<title>step 4 \(48 s\)\npass ratio: undefined<\/title>/);
});

test("smoothing: the smoothed line is drawn over the faint raw one; EMA debiased; 0 draws raw only", async (t) => {
  t.deepEqual(
    smoothSeries(
      [
        [0, 2],
        [1, 2],
        [2, Number.NaN],
        [3, 2],
      ],
      0.6,
    ).map(([, y]) => (Number.isNaN(y) ? "gap" : Number(y.toFixed(9)))),
    [2, 2, "gap", 2],
    "a constant stays constant from the first point (no pull towards 0); gaps stay gaps",
  );
  const s = smoothSeries(
    [
      [0, 0],
      [1, 1],
    ],
    0.5,
  );
  t.is(s[1]![1], (0.5 * 0.5 * 0 + 0.5 * 1) / (1 - 0.25));
  const { run } = makeRuns(t);
  const smooth = chartSvg(readFileSync((await writeReport(run, { noPng: true })).html, "utf8"), "Entropy");
  t.regex(smooth, /<polyline [^>]*class="raw" stroke="#1f77b4" stroke-opacity="0.3"/);
  t.regex(smooth, /<polyline [^>]*class="smoothed" stroke="#1f77b4" stroke-width="2"/);
  const raw = chartSvg(
    readFileSync((await writeReport(run, { noPng: true, smoothing: 0 })).html, "utf8"),
    "Entropy",
  );
  t.false(raw.includes('class="smoothed"'));
});

test("values on hover: a band per step whose title lists each series' value", async (t) => {
  const { run } = makeRuns(t);
  const svg = chartSvg(
    readFileSync((await writeReport(run, { noPng: true })).html, "utf8"),
    "Response length",
  );
  t.is(svg.match(/<rect class="hover"/g)?.length, 13, "steps 0..12");
  t.regex(svg, /<title>step 1 \(11 s\)\nmean: 114\nmax: 160<\/title><\/rect>/);
});

test("time per step: the phases stacked (other = step minus the phases), throughput from tokens over seconds", async (t) => {
  const { run } = makeRuns(t);
  const html = readFileSync((await writeReport(run, { noPng: true })).html, "utf8");
  const time = chartSvg(html, "Time per step");
  t.is(time.match(/<polygon /g)?.length, 5, "gen, old_log_prob, update_actor, testing, other");
  for (const l of ["gen", "old_log_prob", "update_actor", "testing", "other"])
    t.true(time.includes(`>${l}</text>`), l);
  // Step 2 validates: 6 + 1.5 + 3 + 2 = 12.5 of 13 s, so 0.5 s other; step 1: 10.5 of 11 s.
  t.regex(
    time,
    /<title>step 2 \(24 s\)\ngen: 6\nold_log_prob: 1\.5\nupdate_actor: 3\ntesting: 2\nother: 0\.5\ntotal: 13<\/title>/,
  );
  t.regex(chartSvg(html, "Throughput"), /<title>step 1 \(11 s\)\nthroughput: 364<\/title>/);
});

test("wall-clock axis: both axes in the page behind a switch (no script); --x wall puts it first and in the PNG", async (t) => {
  const { run } = makeRuns(t);
  const html = readFileSync((await writeReport(run, { noPng: true })).html, "utf8");
  t.regex(
    html,
    /<input type="radio" name="xaxis" id="x-step" checked><input type="radio" name="xaxis" id="x-wall">/,
  );
  t.regex(html, /#x-wall:checked ~ \.by-wall\{display:block\}/);
  const wall = chartSvg(html, "Code ratio", "wall");
  t.true(wall.includes(">wall-clock (s, sum of timing_s/step)</text>"));
  t.regex(wall, /<title>144 s \(step 12\)\ncode ratio: 0\.8<\/title>/);
  t.is(await reportCommand.run([run, "--x=wall", "--smoothing", "0.3"]), 0);
  const again = readFileSync(join(run, "report.html"), "utf8");
  t.regex(again, /id="x-wall" checked>/);
  t.true(again.includes("EMA 0.3"));
  await t.throwsAsync(reportCommand.run([run, "--x", "time"]), {
    message: "--x must be one of step, wall; got 'time'",
  });
});

test("a run known only by its summary.json gets the summary table and says why there are no charts", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "torl-report-summary-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  writeFileSync(join(root, "summary.json"), JSON.stringify({ steps: 100, val_acc_final: 0.795 }));
  const out = await writeReport(root);
  const html = readFileSync(out.html, "utf8");
  t.true(html.includes("no metrics.jsonl in this directory"));
  t.regex(html, /<tr><td>val_acc_final<\/td><td class="num">0\.795<\/td><\/tr>/);
  t.true(readFileSync(out.png!).length > 1000);
});

test("two runs of one name: the legends name their settings, or --label / --compare-label", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "torl-report-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  // runs/<name>-<date>-<time>: both are "tiny" once the time stamp is dropped
  const run = join(root, "a", "tiny-20260101-000000");
  const control = join(root, "b", "tiny-20260101-000000");
  for (const d of [run, control]) mkdirSync(d, { recursive: true });
  fakeRun(run, { steps: 4, codeFrom: 0.4, codeTo: 0.8, accTo: 0.6 });
  fakeRun(control, { steps: 4, codeFrom: 0, codeTo: 0, accTo: 0.3 });
  const summary = JSON.parse(readFileSync(join(control, "summary.json"), "utf8"));
  writeFileSync(join(control, "summary.json"), JSON.stringify({ ...summary, num_llm_calls_available: 0 }));
  const legends = (html: string) => [...html.matchAll(/code ratio \(([^)]*)\)/g)].map((m) => m[1]);
  const bySetting = readFileSync((await writeReport(run, { compareDir: control, noPng: true })).html, "utf8");
  t.true(legends(bySetting).includes("C=1"));
  t.true(legends(bySetting).includes("C=0"));
  const named = readFileSync(
    (await writeReport(run, { compareDir: control, noPng: true, label: "tool", compareLabel: "no tool" }))
      .html,
    "utf8",
  );
  t.deepEqual([...new Set(legends(named))].sort(), ["no tool", "tool"]);
});
