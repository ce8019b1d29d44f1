/**
 * Answer extraction: the content of the last `\boxed{...}` (also `\boxed {...}` and `\fbox{...}`), with
 * nested braces. A response without one has no answer. If the last box is never closed (the response
 * was cut off inside it) there is no answer either, as in veRL's `last_boxed_only_string`.
 * `\boxed 5` (a box around a single token, no braces) is read up to the next `$` or end of line.
 */

const BOX = /\\(?:boxed|fbox)(?![a-zA-Z])/g;

/** The content of the last \boxed{...} / \fbox{...} in `text`, or null when there is none. */
export function extractBoxedAnswer(text: string): string | null {
  let last = -1;
  let lastLen = 0;
  BOX.lastIndex = 0;
  for (let m = BOX.exec(text); m; m = BOX.exec(text)) {
    last = m.index;
    lastLen = m[0].length;
  }
  if (last < 0) return null;
  let i = last + lastLen;
  while (i < text.length && (text[i] === " " || text[i] === "\t")) i++;
  if (text[i] !== "{") {
    // `\boxed 5$` form: one token up to `$` or the end of the line.
    const rest = /^[^$\n]*/.exec(text.slice(i))![0].trim();
    return rest === "" ? null : rest;
  }
  const start = i + 1;
  let depth = 0;
  for (; i < text.length; i++) {
    const ch = text[i];
    if (ch === "\\") {
      i++; // an escaped brace (\{ or \}) does not count
      continue;
    }
    if (ch === "{") depth++;
    else if (ch === "}" && --depth === 0) {
      const inner = text.slice(start, i).trim();
      return inner === "" ? null : inner;
    }
  }
  return null;
}

/** A ground truth may itself be stored boxed; take its content then, else the text itself. */
export function groundTruthAnswer(groundTruth: string): string {
  return groundTruth.includes("\\boxed") || groundTruth.includes("\\fbox")
    ? (extractBoxedAnswer(groundTruth) ?? groundTruth.trim())
    : groundTruth.trim();
}
