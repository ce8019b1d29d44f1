/**
 * The baseline the benchmark measures against: string normalisation followed by string equality, the
 * approach of the MATH dataset's `is_equiv` that ToRL's released `compute_score` uses (strip spaces,
 * `\left`/`\right`, units after `\text{ `, degree marks, `\$`, `\%`; fix `\frac12` and `\sqrt2`; turn
 * `a/b` into `\frac{a}{b}` and `0.5` into `\frac{1}{2}`; drop a short `k =` prefix). Written here from
 * that description; it is only a yardstick, never used for rewards.
 */

function fixFracs(s: string): string {
  // \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2}
  return s.replace(/\\frac(\{[^{}]*\}|[^{\\\s])(\{[^{}]*\}|[^{\\\s])/g, (_m, a: string, b: string) => {
    const wrap = (x: string) => (x.startsWith("{") ? x : `{${x}}`);
    return `\\frac${wrap(a)}${wrap(b)}`;
  });
}

function fixSqrt(s: string): string {
  return s.replace(/\\sqrt([^{\\\s])/g, "\\sqrt{$1}");
}

export function baselineNormalize(answer: string): string {
  let s = answer.replace(/\n/g, "").replace(/\\!/g, "");
  s = s.replace(/\\\\/g, "\\");
  s = s.replace(/tfrac/g, "frac").replace(/dfrac/g, "frac");
  s = s.replace(/\\left/g, "").replace(/\\right/g, "");
  s = s.replace(/\^\{\\circ\}/g, "").replace(/\^\\circ/g, "");
  s = s.replace(/\\\$/g, "");
  const unit = s.indexOf("\\text{ ");
  if (unit > 0) s = s.slice(0, unit);
  s = s.replace(/\\%/g, "").replace(/%/g, "");
  s = s.replace(/ \./g, " 0.").replace(/\{\./g, "{0.");
  if (s.length === 0) return s;
  if (s[0] === ".") s = `0${s}`;
  const eq = s.split("=");
  if (eq.length === 2 && eq[0]!.length <= 2) s = eq[1]!;
  s = fixSqrt(s);
  s = s.replace(/ /g, "");
  s = fixFracs(s);
  if (s === "0.5") s = "\\frac{1}{2}";
  const slash = /^(-?\d+)\/(\d+)$/.exec(s);
  if (slash) s = `\\frac{${slash[1]}}{${slash[2]}}`;
  return s;
}

/** Baseline verdict: equal after normalisation. */
export function baselineEquivalent(given: string, truth: string): boolean {
  return baselineNormalize(given) === baselineNormalize(truth);
}
