/**
 * The run report: `runs/<name>/report.html` (self-contained: inline CSS and SVG, no scripts, nothing
 * fetched) and `runs/<name>/report.png` (the same SVG charts composed with @napi-rs/canvas), from
 * the run's metrics.jsonl, summary.json and samples.jsonl.
 *
 * Charts (report-charts.ts draws them), per step or per second of training (a switch in the page):
 * validation accuracy per data source and the mean; training accuracy, score and reward (one line when
 * they are equal), no-answer rate, response length and its clip ratio; code, pass and effective code
 * ratios (gaps where undefined); policy loss, entropy, KL, gradient norm, learning rate, clip fractions,
 * advantages and returns, the critic's figures; throughput and the time of each step by phase, stacked.
 * Lines are lightly smoothed over the faint raw values; hovering shows the values at a step. A second
 * run (e.g. the C=0 control) can be overlaid, dashed. Then the summary, and sample trajectories with the
 * model's code and the tool's observations highlighted.
 *
 * `pnpm torl report runs/<name> [--compare runs/<other>]` (../cli/report.ts); the trainer calls
 * `writeReport(runDir)`.
 *
 * The pieces: report-run.ts reads the run's files, report-curves.ts picks and draws the charts
 * (report-charts.ts holds the SVG primitives), report-samples.ts the trajectories, report-page.ts the
 * page and the PNG, report-screenshot.ts headless Chromium; report-group.ts compares settings run with
 * several seeds.
 */
export { reportCommand } from "../cli/report.js";
export { escapeHtml, lineChart, type Series, smoothSeries, stackedChart } from "./report-charts.js";
export {
  type ChartRenderOptions,
  type ReportAxis,
  reportCharts,
  validationSources,
  wallClock,
} from "./report-curves.js";
export {
  displayPath,
  type ReportOptions,
  renderReportHtml,
  renderReportPng,
  writeReport,
} from "./report-page.js";
export { ReportInputError, readRunMetrics } from "./report-run.js";
export { classifyResponse, highlightResponse, pickSamples } from "./report-samples.js";
export { ChromiumError, findChromium, screenshotHtml } from "./report-screenshot.js";
