/**
 * When does a decimal stand for an exact answer? The rule, in the words of `verify --help` and the
 * reward README:
 *  - two exact answers (integers, fractions, radicals, π, e, logs, repeating decimals such as
 *    `0.\overline{3}`) are equal when their values are (rationals in exact arithmetic, others to 1e-9
 *    relative); two decimals are equal when they are the same number (2.50 = 2.5, 3.14 ≠ 3.1416);
 *  - a decimal against an exact value that is itself a terminating decimal (5/4, 7, cos π/3) matches only
 *    that decimal: 1.25 and 1.250 are 5/4, 1.2 and 1.3 are not;
 *  - a decimal against an exact value without a terminating expansion (1/3, 2/7, √2, π, ln 2) matches
 *    when it has at least MIN_SIGNIFICANT_DIGITS significant digits and is the value rounded or
 *    truncated at the decimal's own number of places; beyond CHECKED_DIGITS significant digits the
 *    decimal only has to agree to that many (a printed double carries 15-17 digits, the last ones noise).
 * Eight digits because a rounding a question asks for ("to the nearest hundredth", "to four decimal
 * places") stays below that, so it never passes for the exact answer, while a value the code tool
 * prints (Python: 16-17 digits) or a 10-digit calculator does. A question that asks for a decimal has
 * that decimal as its ground truth, and then the second point applies (π does not match 3.14).
 * Only an answer that is a single decimal numeral (signed, or one element of a tuple, set or interval)
 * is an approximation; a decimal inside an expression (`0.5\pi`, `1.5 \times 10^{-3}`) is exact.
 * A `%` on one side only is read with and without it (33.333333% stands for 1/3).
 */
import type { MathNode } from "./latex.js";
import { type Rational, ratFromDecimal, ratSub } from "./numbers.js";

/** The fewest significant digits a decimal needs to stand for a value without a terminating expansion. */
export const MIN_SIGNIFICANT_DIGITS = 8;
/** Significant digits checked at most: a longer decimal agrees to 1 part in 10^12 or more. */
export const CHECKED_DIGITS = 12;
const CHECKED_REL = 10 ** -CHECKED_DIGITS;

/** A signed decimal numeral as written: `digits` holds its point ("0.333", ".75", "2.50"). */
export interface DecimalNumeral {
  negative: boolean;
  digits: string;
}

/** The numeral when `n` is a (signed) decimal literal written with a point, else null. */
export function decimalNumeral(n: MathNode): DecimalNumeral | null {
  if (n.k === "neg") {
    const inner = decimalNumeral(n.a);
    return inner && { negative: !inner.negative, digits: inner.digits };
  }
  return n.k === "num" && n.decimal !== undefined ? { negative: false, digits: n.decimal } : null;
}

/** The numeral divided by 100, as written: 33.333333 (a percentage) is 0.33333333. */
export function percentOf(d: DecimalNumeral): DecimalNumeral {
  const [int = "", frac = ""] = d.digits.split(".");
  const whole = int.padStart(3, "0");
  return {
    negative: d.negative,
    digits: `${whole.slice(0, -2).replace(/^0+(?=\d)/, "")}.${whole.slice(-2)}${frac}`,
  };
}

/** Places after the point, significant digits (leading zeros not counted), and the digits as one integer. */
function shape(d: DecimalNumeral): { places: number; significant: number; scaled: bigint } {
  const point = d.digits.indexOf(".");
  const all = d.digits.replace(".", "");
  return {
    places: d.digits.length - point - 1,
    significant: all.replace(/^0+/, "").length,
    scaled: BigInt(all === "" ? "0" : all),
  };
}

function isTerminating(v: Rational): boolean {
  let d = v.d;
  while (d % 2n === 0n) d /= 2n;
  while (d % 5n === 0n) d /= 5n;
  return d === 1n;
}

/** Does the decimal `d` stand for the exact rational `v`? (exact arithmetic throughout) */
export function decimalMatchesRational(d: DecimalNumeral, v: Rational): boolean {
  const magnitude = ratFromDecimal(d.digits);
  if (!magnitude) return false;
  const value: Rational = d.negative ? { n: -magnitude.n, d: magnitude.d } : magnitude;
  const diff = ratSub(value, v);
  if (diff && diff.n === 0n) return true;
  if (isTerminating(v)) return false;
  const { places, significant, scaled } = shape(d);
  if (significant < MIN_SIGNIFICANT_DIGITS || d.negative !== v.n < 0n) return false;
  const num = (v.n < 0n ? -v.n : v.n) * 10n ** BigInt(places);
  const truncated = num / v.d;
  const rounded = (2n * num + v.d) / (2n * v.d);
  if (scaled === truncated || scaled === rounded) return true;
  // |d - v| <= |v| / 10^12, cross-multiplied.
  if (!diff) return false;
  const absDiff = diff.n < 0n ? -diff.n : diff.n;
  const absV = v.n < 0n ? -v.n : v.n;
  return absDiff * v.d * 10n ** BigInt(CHECKED_DIGITS) <= absV * diff.d;
}

/** Does the decimal `d` stand for `v`, an exact value known only as a double (√2, π, cos π/3)? */
export function decimalMatchesReal(d: DecimalNumeral, v: number): boolean {
  if (!Number.isFinite(v)) return false;
  const x = (d.negative ? -1 : 1) * Number(d.digits);
  const gap = Math.abs(x - v);
  // Equal up to the double's own noise: v is this decimal (cos π/3 and 0.5), whatever its length.
  if (gap <= CHECKED_REL * Math.max(Math.abs(v), 1e-3)) return true;
  const { places, significant, scaled } = shape(d);
  if (significant < MIN_SIGNIFICANT_DIGITS || significant > CHECKED_DIGITS) return false;
  if (d.negative !== v < 0) return false;
  const target = Math.abs(v) * 10 ** places;
  const nearest = Math.round(target);
  // v terminates at this many places (within noise): only that decimal, accepted above, matches.
  if (Math.abs(target - nearest) <= CHECKED_REL * target) return false;
  const digits = Number(scaled);
  return digits === Math.floor(target) || digits === Math.floor(target + 0.5);
}
