/**
 * Exact rationals (BigInt) and complex floats: the two number kinds the answer comparator evaluates in.
 * Every exact operation is guarded by a size bound, so a pathological answer such as 9^{9^{9^9}} or
 * 100000! falls back to floats (or to "unknown") instead of stalling the caller.
 */

/** A reduced fraction n/d with d > 0. */
export interface Rational {
  n: bigint;
  d: bigint;
}

/** Largest operand size, in bits, that exact arithmetic will produce; beyond it the value is "not exact". */
const MAX_EXACT_BITS = 4096;

function bigAbs(a: bigint): bigint {
  return a < 0n ? -a : a;
}

function gcd(a: bigint, b: bigint): bigint {
  a = bigAbs(a);
  b = bigAbs(b);
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

function bitLength(a: bigint): number {
  return bigAbs(a).toString(16).length * 4;
}

export function rat(n: bigint, d = 1n): Rational | null {
  if (d === 0n) return null;
  if (d < 0n) {
    n = -n;
    d = -d;
  }
  const g = gcd(n, d);
  const r = g > 1n ? { n: n / g, d: d / g } : { n, d };
  if (bitLength(r.n) > MAX_EXACT_BITS || bitLength(r.d) > MAX_EXACT_BITS) return null;
  return r;
}

/** Parses a decimal literal ("12", "1.25", ".5", "3.") exactly. */
export function ratFromDecimal(text: string): Rational | null {
  const m = /^(\d*)(?:\.(\d*))?$/.exec(text);
  if (!m || (m[1] === "" && (m[2] ?? "") === "")) return null;
  const frac = m[2] ?? "";
  if (frac.length + m[1]!.length > 1000) return null;
  return rat(BigInt((m[1] || "0") + frac), 10n ** BigInt(frac.length));
}

export const ratAdd = (a: Rational, b: Rational) => rat(a.n * b.d + b.n * a.d, a.d * b.d);
export const ratSub = (a: Rational, b: Rational) => rat(a.n * b.d - b.n * a.d, a.d * b.d);
export const ratMul = (a: Rational, b: Rational) => rat(a.n * b.n, a.d * b.d);
export const ratDiv = (a: Rational, b: Rational) => (b.n === 0n ? null : rat(a.n * b.d, a.d * b.n));
export const ratNeg = (a: Rational): Rational => ({ n: -a.n, d: a.d });
export const ratEq = (a: Rational, b: Rational) => a.n === b.n && a.d === b.d;
export const ratIsInt = (a: Rational) => a.d === 1n;
export const ratToNumber = (a: Rational) => {
  const v = Number(a.n) / Number(a.d);
  if (Number.isFinite(v)) return v;
  // Both parts overflow doubles: scale down first.
  const shift = BigInt(Math.max(bitLength(a.n), bitLength(a.d)) - 1000);
  return Number(a.n >> shift) / Number(a.d >> shift);
};

/** a^k for an integer exponent, or null when the result would exceed the size bound. */
export function ratPowInt(a: Rational, k: bigint): Rational | null {
  if (k === 0n) return { n: 1n, d: 1n };
  if (a.n === 0n) return k > 0n ? a : null;
  const base = k < 0n ? ratDiv({ n: 1n, d: 1n }, a) : a;
  if (!base) return null;
  const e = bigAbs(k);
  const bits = Math.max(bitLength(base.n), bitLength(base.d));
  if (bits > 1 && BigInt(bits - 1) * e > BigInt(MAX_EXACT_BITS)) return null;
  if (e > 100000n) return (base.n === 1n || base.n === -1n) && base.d === 1n ? rat(base.n ** (e % 2n)) : null;
  return rat(base.n ** e, base.d ** e);
}

/** Exact integer square root when n is a perfect square, else null. */
function bigSqrtExact(n: bigint): bigint | null {
  if (n < 0n) return null;
  if (n < 2n) return n;
  let x = BigInt(Math.floor(Math.sqrt(Number(n))));
  // Newton steps fix the float estimate for large n.
  for (let i = 0; i < 200; i++) {
    const y = (x + n / x) >> 1n;
    if (y >= x && x * x <= n) break;
    x = y;
  }
  while (x * x > n) x--;
  while ((x + 1n) * (x + 1n) <= n) x++;
  return x * x === n ? x : null;
}

/** Exact k-th root of a rational when it is one (e.g. sqrt(9/4) = 3/2), else null. */
export function ratRoot(a: Rational, k: number): Rational | null {
  if (k === 2) {
    const n = bigSqrtExact(a.n);
    const d = bigSqrtExact(a.d);
    return n !== null && d !== null ? rat(n, d) : null;
  }
  if (k < 1 || k > 64) return null;
  const neg = a.n < 0n;
  if (neg && k % 2 === 0) return null;
  const rootOf = (v: bigint): bigint | null => {
    const guess = BigInt(Math.round(Math.abs(Number(v)) ** (1 / k)));
    for (const c of [guess - 1n, guess, guess + 1n]) if (c >= 0n && c ** BigInt(k) === bigAbs(v)) return c;
    return null;
  };
  const n = rootOf(a.n);
  const d = rootOf(a.d);
  if (n === null || d === null) return null;
  return rat(neg ? -n : n, d);
}

/** n! for small non-negative integers, else null. */
export function ratFactorial(a: Rational): Rational | null {
  if (a.d !== 1n || a.n < 0n || a.n > 300n) return null;
  let r = 1n;
  for (let i = 2n; i <= a.n; i++) r *= i;
  return rat(r);
}

/** C(n, k) for integers with n up to 10^6 and small k, else null. */
export function ratBinom(n: Rational, k: Rational): Rational | null {
  if (n.d !== 1n || k.d !== 1n || k.n < 0n) return null;
  if (n.n >= 0n && k.n > n.n) return { n: 0n, d: 1n };
  const kk = n.n >= 0n && n.n - k.n < k.n ? n.n - k.n : k.n;
  if (kk > 300n || bigAbs(n.n) > 1000000n) return null;
  let r = 1n;
  for (let i = 0n; i < kk; i++) r = (r * (n.n - i)) / (i + 1n);
  return rat(r);
}

/** A complex float. */
export interface Complex {
  re: number;
  im: number;
}

export const cx = (re: number, im = 0): Complex => ({ re, im });
export const cAdd = (a: Complex, b: Complex) => cx(a.re + b.re, a.im + b.im);
export const cSub = (a: Complex, b: Complex) => cx(a.re - b.re, a.im - b.im);
export const cNeg = (a: Complex) => cx(-a.re, -a.im);
export const cMul = (a: Complex, b: Complex) => {
  if (a.im === 0 && b.im === 0) return cx(a.re * b.re);
  return cx(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
};
export function cDiv(a: Complex, b: Complex): Complex {
  if (a.im === 0 && b.im === 0) return cx(a.re / b.re);
  const den = b.re * b.re + b.im * b.im;
  return cx((a.re * b.re + a.im * b.im) / den, (a.im * b.re - a.re * b.im) / den);
}
export const cAbs = (a: Complex) => Math.hypot(a.re, a.im);
export const cLog = (a: Complex) => cx(Math.log(cAbs(a)), Math.atan2(a.im, a.re));
export function cExp(a: Complex): Complex {
  const m = Math.exp(a.re);
  return a.im === 0 ? cx(m) : cx(m * Math.cos(a.im), m * Math.sin(a.im));
}
export function cSqrt(a: Complex): Complex {
  if (a.im === 0) return a.re >= 0 ? cx(Math.sqrt(a.re)) : cx(0, Math.sqrt(-a.re));
  const r = cAbs(a);
  const re = Math.sqrt((r + a.re) / 2);
  const im = Math.sqrt((r - a.re) / 2);
  return cx(re, a.im < 0 ? -im : im);
}
export function cPow(a: Complex, b: Complex): Complex {
  if (b.im === 0 && Number.isInteger(b.re) && Math.abs(b.re) <= 64) {
    let r = cx(1);
    for (let i = 0; i < Math.abs(b.re); i++) r = cMul(r, a);
    return b.re < 0 ? cDiv(cx(1), r) : r;
  }
  if (a.im === 0 && b.im === 0 && a.re >= 0) return cx(a.re ** b.re);
  if (a.re === 0 && a.im === 0) return b.re > 0 ? cx(0) : cx(Number.NaN);
  return cExp(cMul(b, cLog(a)));
}
/** Real k-th root for odd k and negative reals (so \sqrt[3]{-8} = -2), principal root otherwise. */
export function cRoot(a: Complex, k: Complex): Complex {
  if (a.im === 0 && k.im === 0 && a.re < 0 && Number.isInteger(k.re) && k.re % 2 !== 0) {
    return cx(-((-a.re) ** (1 / k.re)));
  }
  if (k.im === 0 && k.re === 2) return cSqrt(a);
  return cPow(a, cDiv(cx(1), k));
}
export const cSin = (a: Complex) => cx(Math.sin(a.re) * Math.cosh(a.im), Math.cos(a.re) * Math.sinh(a.im));
export const cCos = (a: Complex) => cx(Math.cos(a.re) * Math.cosh(a.im), -Math.sin(a.re) * Math.sinh(a.im));
const I = cx(0, 1);
/** asin z = -i log(iz + sqrt(1 - z^2)). */
export const cAsin = (z: Complex) => cMul(cNeg(I), cLog(cAdd(cMul(I, z), cSqrt(cSub(cx(1), cMul(z, z))))));
/** acos z = pi/2 - asin z. */
export const cAcos = (z: Complex) => cSub(cx(Math.PI / 2), cAsin(z));
/** atan z = (i/2) log((i + z)/(i - z)). */
export const cAtan = (z: Complex) => cMul(cx(0, 0.5), cLog(cDiv(cAdd(I, z), cSub(I, z))));

/** Gamma for reals (Lanczos, g=7); NaN for complex arguments and poles. */
export function gammaReal(x: number): number {
  if (x <= 0 && Number.isInteger(x)) return Number.NaN;
  if (x < 0.5) return Math.PI / (Math.sin(Math.PI * x) * gammaReal(1 - x));
  const g = 7;
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  x -= 1;
  let a = c[0]!;
  const t = x + g + 0.5;
  for (let i = 1; i < g + 2; i++) a += c[i]! / (x + i);
  return Math.sqrt(2 * Math.PI) * t ** (x + 0.5) * Math.exp(-t) * a;
}

export { mulberry32 as seededRandom } from "../random.js";
