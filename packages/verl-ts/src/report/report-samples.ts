/**
 * The report's sample trajectories: each response escaped, with the model's code and the tool's
 * observations highlighted; a few picked from the first and the last step.
 */

import type { TrajectorySample } from "../evaluation/index.js";
import { escapeHtml, fmtNum } from "./report-charts.js";

type Span = 0 | 1 | 2; // plain, code, observation

/** Classifies each character of a response: code (```python blocks) and tool observations. */
export function classifyResponse(s: TrajectorySample): Span[] {
  const text = s.response;
  const cls: Span[] = new Array(text.length).fill(0);
  const mark = (a: number, b: number, c: Span) => {
    for (let i = Math.max(0, a); i < Math.min(text.length, b); i++) cls[i] = c;
  };
  for (const m of text.matchAll(/```python[^\n]*\n[\s\S]*?(?:```\n?|$)/g))
    mark(m.index!, m.index! + m[0].length, 1);
  const ranges = s.observation_ranges ?? s.tool_calls?.flatMap((c) => (c.range ? [c.range] : [])) ?? [];
  if (ranges.length) for (const [a, b] of ranges) mark(a, b, 2);
  else
    for (const m of text.matchAll(/```output\n[\s\S]*?(?:\n```\n?|$)/g))
      mark(m.index!, m.index! + m[0].length, 2);
  return cls;
}

/** The response as HTML: escaped, code and observations in highlighted spans. */
export function highlightResponse(s: TrajectorySample): string {
  const cls = classifyResponse(s);
  const text = s.response;
  let out = "";
  let i = 0;
  while (i < text.length) {
    let j = i;
    while (j < text.length && cls[j] === cls[i]) j++;
    const chunk = escapeHtml(text.slice(i, j));
    out +=
      cls[i] === 1
        ? `<span class="code">${chunk}</span>`
        : cls[i] === 2
          ? `<span class="obs">${chunk}</span>`
          : chunk;
    i = j;
  }
  return out;
}

/** Picks up to `max` samples: from the first and the last step, those with tool calls first. */
export function pickSamples(samples: TrajectorySample[], max: number): TrajectorySample[] {
  if (samples.length <= max) return samples;
  const steps = [...new Set(samples.map((s) => s.step))].sort((a, b) => a - b);
  const hasCode = (s: TrajectorySample) => (s.tool_calls?.length ?? 0) > 0 || /```python/.test(s.response);
  const from = (step: number, k: number) => {
    const at = samples.filter((s) => s.step === step);
    const ordered = [
      ...at.filter((s) => hasCode(s) && s.correct),
      ...at.filter((s) => hasCode(s) && !s.correct),
      ...at.filter((s) => !hasCode(s)),
    ];
    return ordered.slice(0, k);
  };
  if (steps.length === 1) return from(steps[0]!, max);
  const first = from(steps[0]!, Math.floor(max / 2));
  return [...first, ...from(steps[steps.length - 1]!, max - first.length)];
}

export function sampleHtml(s: TrajectorySample): string {
  const calls = s.tool_calls?.length ?? 0;
  const passed = s.tool_calls?.filter((c) => c.success).length ?? 0;
  const verdict = s.correct === undefined ? "" : s.correct ? "correct" : "wrong";
  const facts = [
    `step ${s.step}`,
    s.split ?? "train",
    s.data_source,
    `score ${fmtNum(s.score)}`,
    verdict,
    s.ground_truth !== undefined ? `answer ${s.ground_truth}` : undefined,
    s.extracted !== undefined ? `extracted ${s.extracted ?? "none"}` : undefined,
    s.tool_calls ? `${calls} call${calls === 1 ? "" : "s"}, ${passed} passed` : undefined,
  ].filter((x): x is string => !!x);
  return [
    `<div class="sample ${verdict}">`,
    `<div class="facts">${facts.map((f) => `<span>${escapeHtml(f)}</span>`).join("")}</div>`,
    `<details><summary>prompt</summary><pre>${escapeHtml(s.prompt)}</pre></details>`,
    `<pre class="response">${highlightResponse(s)}</pre>`,
    "</div>",
  ].join("\n");
}
