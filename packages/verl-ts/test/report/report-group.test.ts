import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createCanvas, loadImage } from "@napi-rs/canvas";
import test from "ava";
import { findChromium, reportCommand, writeReport } from "../../src/report/report.js";
import { acrossRuns, parseGroupFlag, spreadOf, writeGroupReport } from "../../src/report/report-group.js";

interface FakeRun {
  seed: number;
  /** Held-out accuracy at steps 0, 10 and 20. */
  acc: [number, number, number];
  /** Code ratio of every training step (0: no tool call, so no pass ratio). */
  code: number;
  pass: number;
  right: number;
  wrong: number;
  calls?: number;
}

/** A finished run in the trainer's format: 20 steps, validation every 10, tool metrics per step. */
function fakeRun(dir: string, r: FakeRun, setting: { calls: number; steps?: number } = { calls: 1 }): void {
  mkdirSync(dir, { recursive: true });
  const steps = setting.steps ?? 20;
  const lines: string[] = [];
  for (let step = 0; step <= steps; step++) {
    const m: Record<string, number> = { step };
    if (step > 0) {
      // the first steps differ from the last ten, which the table averages
      const early = step <= steps - 10;
      m["tool/code_ratio"] = early ? r.code / 2 : r.code;
      m["tool/pass_ratio"] = r.code === 0 ? 0 : early ? 0.1 : r.pass;
      m["tool/effective_code_ratio"] = r.code === 0 ? 0 : 0.5;
      if (r.code > 0) {
        m["tool/pass_ratio_correct"] = r.right;
        // a step where no wrong response called the tool: absent, as the trainer logs it
        if (step !== steps) m["tool/pass_ratio_wrong"] = r.wrong;
      }
    }
    if (step % 10 === 0) m["val/acc"] = r.acc[step / 10]!;
    lines.push(JSON.stringify(m));
  }
  writeFileSync(join(dir, "metrics.jsonl"), `${lines.join("\n")}\n`);
  writeFileSync(
    join(dir, "summary.json"),
    JSON.stringify({
      steps,
      num_llm_calls_available: setting.calls,
      execution_error_penalty: false,
      mask_tool_output: true,
      trainer_seed: r.seed,
      data_seed: r.seed,
      split_seed: 1,
      val_acc_final: r.acc[2],
    }),
  );
}

function makeSweep(t: { teardown: (f: () => void) => void }) {
  const root = mkdtempSync(join(tmpdir(), "torl-group-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const tool = [1, 2, 3].map((seed) => join(root, `default-s${seed}`));
  const none = [1, 2, 3].map((seed) => join(root, `c0-s${seed}`));
  const accs: [number, number, number][] = [
    [0.1, 0.5, 0.7],
    [0.1, 0.6, 0.8],
    [0.1, 0.7, 0.9],
  ];
  tool.forEach((d, i) => {
    fakeRun(d, {
      seed: i + 1,
      acc: accs[i]!,
      code: 0.8 + 0.1 * i,
      pass: 0.9,
      right: 0.95,
      wrong: 0.6 - 0.1 * i,
    });
  });
  none.forEach((d, i) => {
    fakeRun(
      d,
      { seed: i + 1, acc: [0.1, 0.1, 0.12 + 0.01 * i], code: 0, pass: 0, right: 0, wrong: 0 },
      { calls: 0 },
    );
  });
  return { root, tool, none, groups: [`default=${tool.join(",")}`, `C=0=${none.join(",")}`] };
}

test("spread and acrossRuns: mean, sample std, range; a step no run defines is a gap", (t) => {
  const s = spreadOf([0.7, 0.8, 0.9, null])!;
  t.is(s.n, 3);
  t.is(Number(s.mean.toFixed(12)), 0.8);
  t.is(Number(s.std!.toFixed(12)), 0.1, "sample standard deviation (n - 1)");
  t.is(spreadOf([0.5])!.std, null);
  t.is(spreadOf([null, Number.NaN]), null);
  const a = acrossRuns(
    [
      [
        [0, 1],
        [1, 3],
        [2, Number.NaN],
      ],
      [
        [0, 3],
        [1, Number.NaN],
      ],
    ],
    "minmax",
  );
  t.deepEqual(a.points.slice(0, 2), [
    [0, 2],
    [1, 3],
  ]);
  t.true(Number.isNaN(a.points[2]![1]));
  t.deepEqual(a.band[0], [0, 1, 3]);
  t.deepEqual(a.band[1], [1, 3, 3]);
  t.deepEqual(
    [...a.counts],
    [
      [0, 2],
      [1, 1],
      [2, 0],
    ],
  );
  const std = acrossRuns([[[0, 1]], [[0, 3]]], "std");
  t.deepEqual(std.band[0], [0, 2 - Math.SQRT2, 2 + Math.SQRT2]);
});

test("group report: the table's mean ± std per setting, from each run's metrics", (t) => {
  const { root, groups } = makeSweep(t);
  const out = join(root, "out");
  const paths = writeGroupReport(groups.map(parseGroupFlag), out);
  const md = readFileSync(paths.markdown, "utf8");
  const lines = md.split("\n");
  const cells = (line: string) =>
    line
      .split("|")
      .slice(1, -1)
      .map((c) => c.trim());
  t.deepEqual(cells(lines[0]!), [
    "setting",
    "seeds",
    "held-out acc, final",
    "held-out acc, step 10",
    "code ratio",
    "pass ratio",
    "effective code ratio",
    "pass ratio, right answers",
    "pass ratio, wrong answers",
  ]);
  // final 0.7/0.8/0.9; step 10 0.5/0.6/0.7; code (last 10 steps) 0.8/0.9/1.0; pass 0.9 each; wrong
  // 0.6/0.5/0.4 on the 9 steps that log it
  t.deepEqual(cells(lines[2]!), [
    "default",
    "3",
    "80.0 ± 10.0",
    "60.0 ± 10.0",
    "90.0 ± 10.0",
    "90.0 ± 0.0",
    "50.0 ± 0.0",
    "95.0 ± 0.0",
    "50.0 ± 10.0",
  ]);
  // C=0: no tool call anywhere: no pass ratio (not 0)
  t.deepEqual(cells(lines[3]!), ["C=0", "3", "13.0 ± 1.0", "10.0 ± 0.0", "0.0 ± 0.0", "–", "–", "–", "–"]);
  // columns padded as a markdown formatter leaves them: every line of the table as long as the heading
  t.true(/^\| -+ (\| -+ )+\|$/.test(lines[1]!), lines[1]);
  for (const line of lines.slice(0, 4)) t.is(line.length, lines[0]!.length, line);
  t.regex(md, /mean ± sample standard deviation/);
  const json = JSON.parse(readFileSync(paths.json, "utf8"));
  t.is(json.settings[0].runs.length, 3);
  t.like(json.settings[0].runs[1], {
    trainer_seed: 2,
    data_seed: 2,
    steps: 20,
    final_step: 20,
    val_acc_at_step: 0.6,
  });
  t.is(Number(json.settings[0].stats.code_ratio.mean.toFixed(9)), 0.9);
  t.false(readFileSync(paths.json, "utf8").includes(root), "no absolute paths in the committed results");
  t.false(readFileSync(paths.html, "utf8").includes(root));
  t.true(statSync(paths.png).size > 10_000);
});

test("group report page: accuracy and Figure 4 (a)-(d) with a band per setting; undefined is a gap", (t) => {
  const { root, groups } = makeSweep(t);
  const html = readFileSync(writeGroupReport(groups.map(parseGroupFlag), join(root, "out")).html, "utf8");
  for (const title of [
    "Held-out accuracy",
    "(a) Code ratio",
    "(b) Code pass ratio",
    "(c) default",
    "(d) Effective code ratio",
  ])
    t.true(html.includes(`aria-label="${title}"`), title);
  t.false(html.includes('aria-label="(c) C=0"'), "C=0 has no tool calls to split");
  const chart = (title: string) => {
    const at = html.indexOf(`aria-label="${title}"`);
    return html.slice(html.lastIndexOf("<svg ", at), html.indexOf("</svg>", at));
  };
  const acc = chart("Held-out accuracy");
  t.is(acc.match(/<polygon class="band"/g)?.length, 2, "one band per setting");
  // step 10: default 0.5..0.7 around 0.6
  t.regex(
    acc,
    /<title>step 10\ndefault \(3\): 0\.6 \(0\.5 to 0\.7\)\nC=0 \(3\): 0\.1 \(0\.1 to 0\.1\)<\/title>/,
  );
  t.true(acc.includes("band: min to max of the seeds"));
  const c = chart("(c) default");
  t.true(c.includes(">right answer</text>") && c.includes(">wrong answer</text>"));
  // the last step logs no wrong-answer pass ratio in any run: a gap, said so on hover
  t.regex(c, /<title>step 20\nright answer: 0\.95 \(0\.95 to 0\.95\)\nwrong answer: undefined<\/title>/);
  const b = chart("(b) Code pass ratio");
  t.true(b.includes(">default (3)</text>"));
  t.false(b.includes(">C=0 (3)</text>"), "C=0 never has a pass ratio: not drawn (nor as 0)");
});

test("group report renders in headless Chromium: table, charts and bands on screen", async (t) => {
  const chromium = findChromium();
  if (!chromium) {
    t.fail("chromium is not installed: run .ci/setup.d/chromium.sh (apt-get install -y chromium)");
    return;
  }
  const { root, groups } = makeSweep(t);
  const out = join(root, "out");
  const shot = join(root, "page.png");
  t.is(
    await reportCommand.run([...groups.flatMap((g) => ["--group", g]), "--out", out, "--screenshot", shot]),
    0,
  );
  const img = await loadImage(readFileSync(shot));
  const c = createCanvas(img.width, img.height);
  const ctx = c.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, img.width, img.height).data;
  const near = (rgb: number[]) => {
    for (let i = 0; i < data.length; i += 4)
      if (
        Math.abs(data[i]! - rgb[0]!) + Math.abs(data[i + 1]! - rgb[1]!) + Math.abs(data[i + 2]! - rgb[2]!) <
        12
      )
        return true;
    return false;
  };
  t.true(statSync(shot).size > 30_000, `screenshot is ${statSync(shot).size} bytes`);
  t.true(near([0x1f, 0x77, 0xb4]), "the first setting's line");
  // #1f77b4 at 15% over white: the band
  t.true(near([221, 235, 244]), "its band");
  t.true(near([0xf0, 0xf0, 0xf0]), "the table's header cells");
});

test("bad groups are refused, naming what is wrong", async (t) => {
  const { root, tool, none, groups } = makeSweep(t);
  const out = join(root, "out");
  t.deepEqual(parseGroupFlag("C=0=runs/a,runs/b"), { name: "C=0", dirs: ["runs/a", "runs/b"] });
  t.throws(() => parseGroupFlag("default"), { message: /--group expects NAME=DIR\[,DIR\.\.\.\]/ });
  t.throws(() => parseGroupFlag("x=a,,b"), { name: "UsageError" });
  // a setting's runs must share the setting, and each seed once
  t.throws(() => writeGroupReport([parseGroupFlag(`mixed=${tool[0]},${none[1]}`)], out), {
    message: /group mixed mixes settings: summary\.json's num_llm_calls_available is 1 vs 0/,
  });
  t.throws(() => writeGroupReport([parseGroupFlag(`twice=${tool[0]},${tool[0]}`)], out), {
    message: /default-s1 is given twice in group twice/,
  });
  const copy = join(root, "copy-of-s1");
  cpSync(tool[0]!, copy, { recursive: true });
  t.throws(() => writeGroupReport([parseGroupFlag(`same=${tool[0]},${copy}`)], out), {
    message: /group same: two runs with the same seeds \(trainer\.seed 1, data\.seed 1\)/,
  });
  t.throws(() => writeGroupReport([parseGroupFlag(`a=${tool[0]}`), parseGroupFlag(`b=${tool[0]}`)], out), {
    message: /is in two groups \(a and b\)/,
  });
  // an unfinished run (no summary.json) and a shorter run
  const partial = join(root, "partial");
  fakeRun(partial, { seed: 9, acc: [0.1, 0.2, 0.3], code: 1, pass: 1, right: 1, wrong: 1 });
  rmSync(join(partial, "summary.json"));
  t.throws(() => writeGroupReport([parseGroupFlag(`p=${tool[0]},${partial}`)], out), {
    message: /partial\/summary\.json: not found: the run did not finish/,
  });
  const short = join(root, "short");
  fakeRun(
    short,
    { seed: 8, acc: [0.1, 0.2, 0.3], code: 1, pass: 1, right: 1, wrong: 1 },
    { calls: 1, steps: 12 },
  );
  t.throws(() => writeGroupReport([parseGroupFlag(`s=${tool[0]},${short}`)], out), {
    message: /the runs end at different steps \(20, 12\)/,
  });
  await t.throwsAsync(reportCommand.run(["--group", groups[0]!]), { message: /--group needs --out DIR/ });
  await t.throwsAsync(reportCommand.run([tool[0]!, "--group", groups[0]!, "--out", out]), {
    message: /takes no RUN_DIR/,
  });
  await t.throwsAsync(reportCommand.run([tool[0]!, "--tail", "3"]), { message: "--tail go with --group" });
});

test("the run report draws the pass ratio of right vs wrong answers, a gap where one kind made no call", async (t) => {
  const { tool, none } = makeSweep(t);
  const html = readFileSync((await writeReport(tool[0]!, { noPng: true, smoothing: 0 })).html, "utf8");
  const at = html.indexOf('aria-label="Code pass ratio: right vs wrong answers"');
  t.true(at > 0);
  const svg = html.slice(html.lastIndexOf("<svg ", at), html.indexOf("</svg>", at));
  t.true(
    svg.includes(">responses with the right answer</text>") && svg.includes(">with a wrong answer</text>"),
  );
  t.regex(
    svg,
    /<title>step 20\nresponses with the right answer: 0\.95\nwith a wrong answer: undefined<\/title>/,
  );
  // a run that never logs them (C=0, or a run from before the metric) has no such chart
  const c0 = readFileSync((await writeReport(none[0]!, { noPng: true })).html, "utf8");
  t.false(c0.includes('aria-label="Code pass ratio: right vs wrong answers"'));
});
