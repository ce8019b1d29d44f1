/**
 * Answer extraction: the last box the response gives as an answer. A box is `\boxed{...}` (also
 * `\boxed {...}` and `\fbox{...}`) with nested braces, or the brace-less `\boxed 5`, read up to the next
 * `$` or the end of the line (without trailing punctuation). `\boxed` named in prose after the answer
 * ("we use \boxed to mark it", "put it in \boxed{}") is not a box: an empty box, or brace-less text
 * holding a word (two letters in a row outside a command), is skipped and the box before it counts. A response without a box has no answer. If the last `\boxed{` is never closed
 * (the response was cut off inside it) there is no answer either, as in veRL's `last_boxed_only_string`.
 */

const BOX = /\\(?:boxed|fbox)(?![a-zA-Z])/g;

/** A word of prose: two letters in a row that are not part of a command (`\pi`, `\frac`). */
const PROSE_WORD = /(?<![\\A-Za-z])[A-Za-z]{2,}/;

type Box = { answer: string } | { cutOff: true } | null;

/** Reads the box whose command ends at `i`: its answer, cut off (unclosed brace), or null (not a box). */
function readBox(text: string, i: number): Box {
  while (i < text.length && (text[i] === " " || text[i] === "\t")) i++;
  if (text[i] !== "{") {
    const rest = /^[^$\n]*/
      .exec(text.slice(i))![0]
      .trim()
      .replace(/[.,;:!?)]+$/, "");
    return rest === "" || PROSE_WORD.test(rest) ? null : { answer: rest };
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
      return inner === "" ? null : { answer: inner };
    }
  }
  return { cutOff: true };
}

/** The content of the last box given as an answer in `text`, or null when there is none. */
export function extractBoxedAnswer(text: string): string | null {
  const ends: number[] = [];
  BOX.lastIndex = 0;
  for (let m = BOX.exec(text); m; m = BOX.exec(text)) ends.push(m.index + m[0].length);
  for (let k = ends.length - 1; k >= 0; k--) {
    const box = readBox(text, ends[k]!);
    if (box === null) continue;
    return "answer" in box ? box.answer : null;
  }
  return null;
}

/** A ground truth may itself be stored boxed; take its content then, else the text itself. */
export function groundTruthAnswer(groundTruth: string): string {
  return groundTruth.includes("\\boxed") || groundTruth.includes("\\fbox")
    ? (extractBoxedAnswer(groundTruth) ?? groundTruth.trim())
    : groundTruth.trim();
}
