/** `pnpm torl report`: a run's report.html and report.png, or settings compared over seeds (../report/). */
import { defineCommand, UsageError } from "@torl-ts/core";
import { writeReport } from "../report/report-page.js";
import { screenshotHtml } from "../report/report-screenshot.js";

export const reportCommand = defineCommand({
  summary: "write report.html and report.png for a run directory, or compare settings over seeds (--group)",
  usage: [
    "usage: pnpm torl report RUN_DIR [--compare OTHER_RUN_DIR] [--samples N] [--x step|wall]",
    "                        [--smoothing W] [--screenshot FILE.png] [--label NAME] [--compare-label NAME]",
    "       pnpm torl report --group NAME=DIR[,DIR...] [--group ...] --out DIR [--band minmax|std]",
    "                        [--at-step S] [--tail N] [--smoothing W] [--screenshot FILE.png]",
    "",
    "Reads RUN_DIR/metrics.jsonl, summary.json and samples.jsonl; writes RUN_DIR/report.html (self-contained)",
    "and RUN_DIR/report.png (the charts). --compare overlays a second run, dashed (e.g. the C=0 control).",
    "--x wall: seconds of training (the sum of timing_s/step) on the x axis of report.png and first in the",
    "page (the page switches between both). --smoothing W: EMA weight in [0, 1) of the smoothed lines drawn",
    "over the raw values (default 0.6; 0: raw only). --samples N: trajectories shown (default 8).",
    "--screenshot also renders the HTML page with headless Chromium into FILE.png. Legends name each run by",
    "--label / --compare-label, else its name, else (two runs of one name) its setting or its directory.",
    "",
    "--group: one setting run with several seeds (finished runs: each has summary.json and metrics.jsonl),",
    "repeated per setting. Writes into --out: report.html and report.png (each setting's mean over its seeds",
    "with a band: --band minmax, the default, or std, mean +- one standard deviation; held-out accuracy and",
    "Figure 4: code ratio, pass ratio, pass ratio of right vs wrong answers, effective code ratio), results.md",
    "(mean +- std per setting of the final held-out accuracy, the accuracy at step S (default 10) and the tool",
    "ratios averaged over each run's last N training steps (default 10)) and results.json (every run's figures).",
    "--smoothing W here smooths each run's training curves before they are averaged.",
  ].join("\n"),
  flags: {
    compare: { type: "string" },
    label: { type: "string" },
    "compare-label": { type: "string" },
    samples: { type: "integer", min: 0 },
    x: { type: "string", choices: ["step", "wall"] },
    smoothing: { type: "number", min: 0, max: 0.999 },
    screenshot: { type: "string" },
    group: { type: "strings" },
    out: { type: "string" },
    band: { type: "string", choices: ["minmax", "std"] },
    "at-step": { type: "integer", min: 0 },
    tail: { type: "integer", min: 1 },
  },
  positionals: true,
  async run(flags, positionals) {
    if (flags.group) {
      const runOnly = (["compare", "samples", "x", "label", "compare-label"] as const).filter(
        (f) => flags[f] !== undefined,
      );
      if (positionals.length || runOnly.length)
        throw new UsageError(
          `--group compares settings: it takes no RUN_DIR${runOnly.length ? ` and no --${runOnly.join(", --")}` : ""}`,
        );
      if (!flags.out) throw new UsageError("--group needs --out DIR (where the report and the table go)");
      const { parseGroupFlag, writeGroupReport } = await import("../report/report-group.js");
      const out = writeGroupReport(flags.group.map(parseGroupFlag), flags.out, {
        band: flags.band as "minmax" | "std" | undefined,
        smoothing: flags.smoothing,
        atStep: flags["at-step"],
        tail: flags.tail,
      });
      for (const f of [out.html, out.png, out.markdown, out.json]) console.log(`wrote ${f}`);
      if (flags.screenshot) {
        await screenshotHtml(out.html, flags.screenshot, { height: out.pageHeight });
        console.log(`wrote ${flags.screenshot}`);
      }
      return 0;
    }
    const groupOnly = (["out", "band", "at-step", "tail"] as const).filter((f) => flags[f] !== undefined);
    if (groupOnly.length) throw new UsageError(`--${groupOnly.join(", --")} go with --group`);
    const [dir, ...extra] = positionals;
    if (!dir) throw new UsageError("RUN_DIR is required (or --group NAME=DIR[,DIR...] --out DIR)");
    if (extra.length) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const maxSamples = flags.samples;
    const out = await writeReport(dir, {
      compareDir: flags.compare,
      label: flags.label,
      compareLabel: flags["compare-label"],
      maxSamples,
      axis: flags.x,
      smoothing: flags.smoothing,
    });
    console.log(`wrote ${out.html}`);
    if (out.png) console.log(`wrote ${out.png}`);
    if (flags.screenshot) {
      await screenshotHtml(out.html, flags.screenshot);
      console.log(`wrote ${flags.screenshot}`);
    }
  },
});
