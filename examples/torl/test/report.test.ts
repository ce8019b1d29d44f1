import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createCanvas, loadImage } from "@napi-rs/canvas";
import test from "ava";
import {
  classifyResponse,
  findChromium,
  highlightResponse,
  lineChart,
  ReportInputError,
  reportCommand,
  screenshotHtml,
  type TrajectorySample,
  trajectoryFromTir,
  writeReport,
} from "../src/report.js";

/** A run directory in the trainer's real format: veRL metric names, val/* only every 2nd step. */
function fakeRun(
  dir: string,
  opts: { steps: number; codeFrom: number; codeTo: number; accTo: number },
): void {
  const lines: string[] = [];
  for (let step = 0; step <= opts.steps; step++) {
    const f = step / opts.steps;
    const code = opts.codeFrom + (opts.codeTo - opts.codeFrom) * f;
    const m: Record<string, number> = {
      step,
      "critic/score/mean": -0.6 + 1.1 * f,
      "critic/score/max": 1,
      "critic/rewards/mean": -0.6 + 1.1 * f,
      "critic/advantages/mean": 0,
      "response_length/mean": 80 + 40 * Math.sin(step),
      "response_length/clip_ratio": 0.05,
      "actor/pg_loss": -0.01 * step,
      "tool/code_ratio": code,
      "tool/pass_ratio": 0.5 + 0.4 * f,
      "tool/effective_code_ratio": 0.2 + 0.6 * f,
      "tool/calls_per_response": code,
      "timing_s/step": 12.5,
    };
    if (step % 2 === 0) {
      m["val/arith/acc"] = 0.1 + opts.accTo * f;
      m["val/arith/score"] = -0.8 + f;
      m["val/modular/acc"] = 0.05 + (opts.accTo - 0.1) * f;
      m["val/acc"] = (m["val/arith/acc"]! + m["val/modular/acc"]!) / 2;
      m["val/tool/code_ratio"] = code;
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
  // Charts: accuracy, reward, code, pass, effective code, response length.
  t.is(html.match(/<svg /g)?.length, 6);
  for (const title of [
    "Validation accuracy",
    "Reward",
    "Code ratio",
    "Code pass ratio",
    "Effective code ratio",
    "Response length",
  ])
    t.true(html.includes(`>${title}`), title);
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
  await screenshotHtml(out.html, shot, { width: 1360, height: 1500 });
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
