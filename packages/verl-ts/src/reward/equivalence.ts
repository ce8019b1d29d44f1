/**
 * Are two final answers the same? The comparator works in three layers, cheapest first:
 *  1. text: identical after normalisation (most matching pairs stop here);
 *  2. structure: lists, sets, tuples, intervals, unions, matrices, equations are compared part by part
 *     (sets and bare solution lists unordered, tuples ordered, interval ends exactly);
 *  3. scalars: exact rational arithmetic when both sides are rational, otherwise numeric evaluation in
 *     complex floats; a decimal numeral against an exact value follows decimal-precision.ts (0.333 is
 *     not 1/3, 0.3333333333 is); expressions with variables are compared at several seeded
 *     random complex points (polynomial identity testing: (x+1)^2 and x^2+2x+1 agree everywhere,
 *     distinct expressions disagree at random points with probability ~1).
 * Every step is linear in the (bounded) answer size; see README.md in this folder for why this was
 * chosen over a symbolic engine, with measurements.
 */
import {
  type DecimalNumeral,
  decimalMatchesRational,
  decimalMatchesReal,
  decimalNumeral,
  percentOf,
} from "./decimal-precision.js";
import { type MathNode, normalizeAnswerText, parseAnswer } from "./latex.js";
import {
  type Complex,
  cAbs,
  cAcos,
  cAdd,
  cAsin,
  cAtan,
  cCos,
  cDiv,
  cExp,
  cLog,
  cMul,
  cNeg,
  cPow,
  cRoot,
  cSin,
  cSqrt,
  cSub,
  cx,
  gammaReal,
  type Rational,
  ratAdd,
  ratBinom,
  ratDiv,
  ratEq,
  ratFactorial,
  ratFromDecimal,
  ratMul,
  ratNeg,
  ratPowInt,
  ratRoot,
  ratSub,
  ratToNumber,
  seededRandom,
} from "./numbers.js";

/** A parsed answer: math (with its percent flag), prose, or unreadable (raw compact text). */
export type ParsedAnswer =
  | { kind: "math"; node: MathNode; percent: boolean; text: string }
  | { kind: "text"; text: string };

const REL_TOL = 1e-9;
const NUM_POINTS = 4;
const MAX_PM_VARIANTS = 16;
const MAX_UNORDERED = 64;

function compactText(s: string): string {
  return s
    .toLowerCase()
    .replace(/\\text\{|\\textbf\{|\\mathrm\{/g, "")
    .replace(/[\s{}\\$.,;:!]/g, "");
}

function choiceLetter(s: string): string | null {
  const m = /^\(?\s*([A-Ea-e])\s*\)?$/.exec(s.trim());
  return m ? m[1]!.toUpperCase() : null;
}

const parseCache = new Map<string, ParsedAnswer>();
const PARSE_CACHE_SIZE = 4096;

/** Normalises and parses one answer; results are cached (ground truths repeat n times per prompt). */
export function parseMathAnswer(answer: string): ParsedAnswer {
  const hit = parseCache.get(answer);
  if (hit) return hit;
  let parsed: ParsedAnswer;
  const plain = PLAIN_NUMBER.exec(answer.trim());
  if (plain) {
    // Fast path for the most common answer, a plain number: no normalisation or parsing needed.
    const v = ratFromDecimal(plain[2]!)!;
    const digits = plain[2]!;
    const num: MathNode = digits.includes(".")
      ? { k: "num", v, lit: true, decimal: digits }
      : { k: "num", v, lit: true };
    const node: MathNode = plain[1] === "-" ? { k: "neg", a: num } : num;
    parsed = { kind: "math", node, percent: false, text: answer.trim() };
    remember(answer, parsed);
    return parsed;
  }
  const norm = normalizeAnswerText(answer);
  if (norm.isText) parsed = { kind: "text", text: compactText(norm.text) };
  else {
    try {
      parsed = { kind: "math", node: parseAnswer(norm.text, answer), percent: norm.percent, text: norm.text };
    } catch {
      parsed = { kind: "text", text: compactText(norm.text) };
    }
  }
  remember(answer, parsed);
  return parsed;
}

const PLAIN_NUMBER = /^([-+]?)(\d{1,300}(?:\.\d{1,300})?)$/;

function remember(answer: string, parsed: ParsedAnswer): void {
  if (parseCache.size >= PARSE_CACHE_SIZE) parseCache.delete(parseCache.keys().next().value!);
  parseCache.set(answer, parsed);
}

/** Empties the parse cache (benchmarks use it so every pass pays for parsing). */
export function clearAnswerParseCache(): void {
  parseCache.clear();
}

/**
 * Replaces the numeric stage for scalars that are not both rational (used by the benchmark to measure
 * symbolic engines on the same parser and structure rules). Returns the verdict.
 */
export type ScalarStage = (a: MathNode, b: MathNode) => boolean;

/**
 * True when `given` is an acceptable final answer for `truth` (both are answer strings, not whole
 * responses: see extractBoxedAnswer). Symmetric in its arguments up to the percent rule.
 */
export function isEquivalentAnswer(given: string, truth: string, scalarStage?: ScalarStage): boolean {
  const a = given.trim();
  const b = truth.trim();
  if (a === b) return a !== "";
  if (a === "" || b === "") return false;
  const la = choiceLetter(a.replace(/\\text(?:bf)?\{([^{}]*)\}/g, "$1"));
  const lb = choiceLetter(b.replace(/\\text(?:bf)?\{([^{}]*)\}/g, "$1"));
  if (la && lb) return la === lb;
  // "(A) 12" against "A": the option letter decides.
  if (la || lb) {
    const other = (la ? b : a).replace(/\\text(?:bf)?\{([^{}]*)\}/g, "$1").trim();
    // Only one option: "(C) and (D)" gets nothing.
    const m = /^\(([A-E])\)\s*([^()\s][^()]*)$/.exec(other);
    if (m) return m[1] === (la ?? lb) && !/(?<![a-zA-Z\\])[A-E](?![a-zA-Z])/.test(m[2]!);
  }
  const pa = parseMathAnswer(a);
  const pb = parseMathAnswer(b);
  if (pa.kind === "text" || pb.kind === "text") {
    const ta = pa.kind === "text" ? pa.text : compactText(pa.text);
    const tb = pb.kind === "text" ? pb.text : compactText(pb.text);
    return ta === tb && ta !== "";
  }
  if (pa.text === pb.text) return true;
  try {
    return new Comparator(pa.percent, pb.percent, scalarStage).equal(pa.node, pb.node);
  } catch (error) {
    // A comparator bug must not stop a training run: count it (the reward manager reports the count
    // as reward/verifier_errors), keep the first message, and grade the pair as unequal.
    verifierErrors.count++;
    verifierErrors.first ??= `${(error as Error).message} (comparing ${JSON.stringify(a)} with ${JSON.stringify(b)})`;
    return false;
  }
}

/** Unexpected comparator failures since start (each graded as unequal) and the first one's message. */
export const verifierErrors: { count: number; first: string | null } = { count: 0, first: null };

/** The infinity sign of a node (+1, -1), or 0 when it is not ±∞. */
function infSign(n: MathNode): number {
  if (n.k === "const" && n.name === "inf") return 1;
  if (n.k === "neg") return -infSign(n.a);
  return 0;
}

function containsPm(n: MathNode): boolean {
  switch (n.k) {
    case "pm":
      return true;
    case "add":
    case "sub":
    case "mul":
    case "div":
    case "pow":
      return containsPm(n.a) || containsPm(n.b);
    case "neg":
      return containsPm(n.a);
    case "fn":
      return n.args.some(containsPm);
    default:
      return false;
  }
}

/** All sign choices of a ± expression, "+" first (1 ± √2 -> [1 + √2, 1 - √2]). */
function expandPm(n: MathNode): MathNode[] {
  switch (n.k) {
    case "pm": {
      const out: MathNode[] = [];
      for (const b of expandPm(n.b)) {
        const plus: MathNode = n.a ? { k: "add", a: n.a, b } : b;
        const minus: MathNode = n.a ? { k: "sub", a: n.a, b } : { k: "neg", a: b };
        for (const a of n.a ? expandPm(n.a) : [null]) {
          const p = a ? ({ ...plus, a } as MathNode) : plus;
          const m = a ? ({ ...minus, a } as MathNode) : minus;
          out.push(...(n.minusFirst ? [m, p] : [p, m]));
        }
      }
      return out.slice(0, MAX_PM_VARIANTS);
    }
    case "add":
    case "sub":
    case "mul":
    case "pow":
    case "div": {
      const out: MathNode[] = [];
      for (const a of expandPm(n.a)) for (const b of expandPm(n.b)) out.push({ ...n, a, b } as MathNode);
      return out.slice(0, MAX_PM_VARIANTS);
    }
    case "neg":
      return expandPm(n.a).map((a) => ({ k: "neg", a }));
    case "fn": {
      let variants: MathNode[][] = [[]];
      for (const arg of n.args) {
        const next: MathNode[][] = [];
        for (const v of variants) for (const e of expandPm(arg)) next.push([...v, e]);
        variants = next.slice(0, MAX_PM_VARIANTS);
      }
      return variants.map((args) => ({ k: "fn", name: n.name, args }));
    }
    default:
      return [n];
  }
}

/** An equation side that names the unknown (x, y_1, \theta, (a, b), f(x), f^{-1}(x)): "x = 5" answers "5". */
function isUnknownName(n: MathNode): boolean {
  if (n.k === "sym") return true;
  // (a, b, c) = (6, 31, -1)
  if (n.k === "group") return n.items.length > 0 && n.items.every((x) => x.k === "sym");
  if (n.k === "mul") {
    const fn = n.a.k === "sym" || (n.a.k === "pow" && n.a.a.k === "sym");
    return fn && (n.b.k === "sym" || (n.b.k === "group" && n.b.open === "(" && isUnknownName(n.b)));
  }
  return false;
}

/** Strips "x = " from "x = 5"; null when the node is not such an assignment. */
function assignedValue(n: MathNode): MathNode | null {
  if (n.k !== "rel" || n.ops.length !== 1 || n.ops[0] !== "=") return null;
  if (isUnknownName(n.parts[0]!)) return n.parts[1]!;
  return isUnknownName(n.parts[1]!) ? n.parts[0]! : null;
}

/** The items of a collection and how they compare. */
interface Elements {
  items: MathNode[];
  unordered: boolean;
  set: boolean;
  /** A matrix's row lengths joined by commas ("2,2", "1,1,1"); null when not a matrix. */
  matrixShape: string | null;
  /** A matrix of one row or one column. */
  vector: boolean;
}

interface IntervalShape {
  lo: MathNode;
  hi: MathNode;
  loClosed: boolean;
  hiClosed: boolean;
}

const NEG_INF: MathNode = { k: "neg", a: { k: "const", name: "inf" } };
const POS_INF: MathNode = { k: "const", name: "inf" };

/** The interval a node denotes: [a,b), (a,b) (also a pair), or a one-variable inequality "x > 5". */
function asInterval(n: MathNode): IntervalShape | null {
  if (n.k === "group" && n.items.length === 2 && "([".includes(n.open) && ")]".includes(n.close)) {
    return { lo: n.items[0]!, hi: n.items[1]!, loClosed: n.open === "[", hiClosed: n.close === "]" };
  }
  if (n.k !== "rel" || n.ops.some((o) => o === "=" || o === "!=")) return null;
  const symIdx = n.parts.findIndex((p) => p.k === "sym");
  if (symIdx < 0) return null;
  if (n.parts.length === 2) {
    // x op a  or  a op x
    let op = n.ops[0]!;
    const other = n.parts[1 - symIdx]!;
    if (symIdx === 1) op = op.replace("<", "#").replace(">", "<").replace("#", ">");
    if (op.startsWith(">")) return { lo: other, hi: POS_INF, loClosed: op === ">=", hiClosed: false };
    return { lo: NEG_INF, hi: other, loClosed: false, hiClosed: op === "<=" };
  }
  if (n.parts.length === 3 && symIdx === 1 && n.ops[0]![0] === n.ops[1]![0]) {
    const lt = n.ops[0]![0] === "<";
    const [lo, hi] = lt ? [n.parts[0]!, n.parts[2]!] : [n.parts[2]!, n.parts[0]!];
    const [loOp, hiOp] = lt ? [n.ops[0]!, n.ops[1]!] : [n.ops[1]!, n.ops[0]!];
    return { lo, hi, loClosed: loOp.endsWith("="), hiClosed: hiOp.endsWith("=") };
  }
  return null;
}

function isIntervalLike(n: MathNode): boolean {
  if (n.k === "group") return n.items.length === 2 && (n.open === "[" || n.close === "]");
  return n.k === "rel" && asInterval(n) !== null;
}

function collectSymbols(n: MathNode, out: Set<string>): Set<string> {
  switch (n.k) {
    case "sym":
      out.add(n.name);
      break;
    case "add":
    case "sub":
    case "mul":
    case "div":
    case "pow":
      collectSymbols(n.a, out);
      collectSymbols(n.b, out);
      break;
    case "neg":
      collectSymbols(n.a, out);
      break;
    case "fn":
      for (const a of n.args) collectSymbols(a, out);
      break;
    case "group":
    case "list":
      for (const a of n.items) collectSymbols(a, out);
      break;
    case "rel":
    case "union":
      for (const a of n.parts) collectSymbols(a, out);
      break;
    case "matrix":
      for (const r of n.rows) for (const a of r) collectSymbols(a, out);
      break;
    default:
      break;
  }
  return out;
}

/** Exact value of a rational-valued expression, or null (irrational, symbolic, too big). */
export function exactValue(n: MathNode): Rational | null {
  switch (n.k) {
    case "num":
      return n.v;
    case "neg": {
      const a = exactValue(n.a);
      return a && ratNeg(a);
    }
    case "add":
    case "sub":
    case "mul":
    case "div": {
      const a = exactValue(n.a);
      if (!a) return null;
      const b = exactValue(n.b);
      if (!b) return null;
      return n.k === "add"
        ? ratAdd(a, b)
        : n.k === "sub"
          ? ratSub(a, b)
          : n.k === "mul"
            ? ratMul(a, b)
            : ratDiv(a, b);
    }
    case "pow": {
      const a = exactValue(n.a);
      if (!a) return null;
      const b = exactValue(n.b);
      if (!b) return null;
      if (b.d === 1n) return ratPowInt(a, b.n);
      if (b.d > 64n) return null;
      const root = ratRoot(a, Number(b.d));
      return root && ratPowInt(root, b.n);
    }
    case "fn": {
      if (n.name === "sqrt" || n.name === "root") {
        const a = exactValue(n.args[0]!);
        if (!a) return null;
        let k = 2;
        if (n.name === "root") {
          const idx = exactValue(n.args[1]!);
          if (idx?.d !== 1n || idx.n < 1n || idx.n > 64n) return null;
          k = Number(idx.n);
        }
        return ratRoot(a, k);
      }
      if (n.name === "fact") {
        const a = exactValue(n.args[0]!);
        return a && ratFactorial(a);
      }
      if (n.name === "binom") {
        const a = exactValue(n.args[0]!);
        const b = exactValue(n.args[1]!);
        return a && b && ratBinom(a, b);
      }
      if (n.name === "abs") {
        const a = exactValue(n.args[0]!);
        return a && (a.n < 0n ? ratNeg(a) : a);
      }
      return null;
    }
    default:
      return null;
  }
}

const NAN = cx(Number.NaN);

/** Numeric value in complex floats with symbols bound by `env`; NaN when not a scalar. */
export function numericValue(n: MathNode, env: Map<string, Complex>): Complex {
  switch (n.k) {
    case "num":
      return cx(ratToNumber(n.v));
    case "sym":
      return env.get(n.name) ?? NAN;
    case "const":
      return n.name === "pi"
        ? cx(Math.PI)
        : n.name === "e"
          ? cx(Math.E)
          : n.name === "i"
            ? cx(0, 1)
            : cx(Number.POSITIVE_INFINITY);
    case "neg":
      return cNeg(numericValue(n.a, env));
    case "add":
      return cAdd(numericValue(n.a, env), numericValue(n.b, env));
    case "sub":
      return cSub(numericValue(n.a, env), numericValue(n.b, env));
    case "mul":
      return cMul(numericValue(n.a, env), numericValue(n.b, env));
    case "div":
      return cDiv(numericValue(n.a, env), numericValue(n.b, env));
    case "pow":
      return cPow(numericValue(n.a, env), numericValue(n.b, env));
    case "group":
      return n.items.length === 1 ? numericValue(n.items[0]!, env) : NAN;
    case "fn":
      return applyFunction(
        n.name,
        n.args.map((a) => numericValue(a, env)),
      );
    default:
      return NAN;
  }
}

function applyFunction(name: string, args: Complex[]): Complex {
  const x = args[0] ?? NAN;
  switch (name) {
    case "sqrt":
      return cSqrt(x);
    case "root":
      return cRoot(x, args[1] ?? NAN);
    case "sin":
      return cSin(x);
    case "cos":
      return cCos(x);
    case "tan":
      return cDiv(cSin(x), cCos(x));
    case "sec":
      return cDiv(cx(1), cCos(x));
    case "csc":
      return cDiv(cx(1), cSin(x));
    case "cot":
      return cDiv(cCos(x), cSin(x));
    case "arcsin":
      return cAsin(x);
    case "arccos":
      return cAcos(x);
    case "arctan":
      return cAtan(x);
    case "sinh":
      return cMul(cx(0.5), cSub(cExp(x), cExp(cNeg(x))));
    case "cosh":
      return cMul(cx(0.5), cAdd(cExp(x), cExp(cNeg(x))));
    case "tanh": {
      const a = cExp(x);
      const b = cExp(cNeg(x));
      return cDiv(cSub(a, b), cAdd(a, b));
    }
    case "exp":
      return cExp(x);
    case "ln":
    case "log":
      return cLog(x);
    case "logb":
      return cDiv(cLog(x), cLog(args[1] ?? NAN));
    case "abs":
      return cx(cAbs(x));
    case "fact":
      return x.im === 0 ? cx(gammaReal(x.re + 1)) : NAN;
    case "binom": {
      const k = args[1] ?? NAN;
      if (x.im !== 0 || k.im !== 0) return NAN;
      return cx(gammaReal(x.re + 1) / (gammaReal(k.re + 1) * gammaReal(x.re - k.re + 1)));
    }
    case "floor":
      return x.im === 0 ? cx(Math.floor(x.re)) : NAN;
    case "ceil":
      return x.im === 0 ? cx(Math.ceil(x.re)) : NAN;
    default:
      return NAN;
  }
}

function finite(z: Complex): boolean {
  return Number.isFinite(z.re) && Number.isFinite(z.im);
}

/** Relative tolerance 1e-9, with an absolute floor of 1e-15 so that \sin\pi = 0 but \pi 10^{-10} ≠ 0. */
function close(a: Complex, b: Complex): boolean {
  const scale = Math.max(1e-6, cAbs(a), cAbs(b));
  return cAbs(cSub(a, b)) <= REL_TOL * scale;
}

function hashName(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

/** Seeded random complex points per variable: the same symbol always gets the same values. */
function environments(symbols: Set<string>): Map<string, Complex>[] {
  const envs: Map<string, Complex>[] = [];
  for (let p = 0; p < NUM_POINTS; p++) envs.push(new Map());
  for (const s of symbols) {
    const rnd = seededRandom(hashName(s));
    for (const env of envs) env.set(s, cx(0.3 + 1.4 * rnd(), 0.15 + 0.7 * rnd()));
  }
  return envs;
}

class Comparator {
  constructor(
    private readonly percentA: boolean,
    private readonly percentB: boolean,
    private readonly scalarStage?: ScalarStage,
  ) {}

  equal(a: MathNode, b: MathNode): boolean {
    if (a.k === "list" && a.items.length === 1) return this.equal(a.items[0]!, b);
    if (b.k === "list" && b.items.length === 1) return this.equal(a, b.items[0]!);

    // ± answers are the list of their sign choices.
    if (containsPm(a)) return this.equal({ k: "list", items: expandPm(a) }, b);
    if (containsPm(b)) return this.equal(a, { k: "list", items: expandPm(b) });

    // Equations: "x = 5" against "5", or two equations.
    const va = assignedValue(a);
    const vb = assignedValue(b);
    if (va && !vb && b.k !== "rel") return this.equal(va, b);
    if (vb && !va && a.k !== "rel") return this.equal(a, vb);
    if (a.k === "rel" && b.k === "rel") return this.relationsEqual(a, b);

    // Intervals (also one-variable inequalities) and unions of them.
    if (
      isIntervalLike(a) ||
      isIntervalLike(b) ||
      (a.k === "rel" && asInterval(a)) ||
      (b.k === "rel" && asInterval(b))
    ) {
      const ia = asInterval(a);
      const ib = asInterval(b);
      if (!ia || !ib) return false;
      return (
        ia.loClosed === ib.loClosed &&
        ia.hiClosed === ib.hiClosed &&
        this.equal(ia.lo, ib.lo) &&
        this.equal(ia.hi, ib.hi)
      );
    }
    if (a.k === "union" || b.k === "union") {
      // A union against another union, or against a list of intervals ("x < 2 or x > 3").
      const parts = (n: MathNode) =>
        n.k === "union" ? n.parts : n.k === "list" && n.items.every((x) => asInterval(x)) ? n.items : null;
      const pa = parts(a);
      const pb = parts(b);
      return !!pa && !!pb && this.unorderedEqual(pa, pb);
    }

    // Collections: bare lists and sets are unordered; tuples ordered; vectors compare with tuples.
    const ea = this.elements(a);
    const eb = this.elements(b);
    // A set written with a repeated element is the same set: {1, 2, 2} = {1, 2}. Against a set, a bare
    // list is read as a set too; two bare lists (solutions with multiplicity) keep their repeats.
    if ((ea?.set && (eb?.unordered ?? true)) || (eb?.set && (ea?.unordered ?? true))) {
      if (ea) ea.items = this.distinct(ea.items);
      if (eb) eb.items = this.distinct(eb.items);
    }
    if (ea || eb) {
      if (!ea || !eb) {
        // A one-element set or list against a scalar.
        const single = ea ?? eb!;
        return single.items.length === 1 && this.equal(single.items[0]!, ea ? b : a);
      }
      if (ea.items.length !== eb.items.length) return false;
      // Two matrices need the same shape: a row vector is not the column vector with the same entries.
      // A tuple names no orientation, so it compares with a vector either way; with no other matrix.
      if (ea.matrixShape !== null && eb.matrixShape !== null) {
        if (ea.matrixShape !== eb.matrixShape) return false;
        return this.orderedEqual(ea.items, eb.items);
      }
      if ((ea.matrixShape !== null && !ea.vector) || (eb.matrixShape !== null && !eb.vector)) return false;
      const unordered =
        (ea.unordered && eb.unordered) || (ea.set && eb.unordered) || (eb.set && ea.unordered);
      if (ea.set !== eb.set && !(ea.unordered && eb.unordered)) return false;
      return unordered ? this.unorderedEqual(ea.items, eb.items) : this.orderedEqual(ea.items, eb.items);
    }
    return this.scalarEqual(a, b);
  }

  /** The items of a collection node and how to compare them; null for scalars. */
  private elements(n: MathNode): Elements | null {
    if (n.k === "matrix") {
      return {
        items: n.rows.flat(),
        unordered: false,
        set: false,
        // the length of every row: "2,2" is 2x2, "3" a row of three, "1,1,1" a column of three
        matrixShape: n.rows.map((r) => r.length).join(","),
        vector: n.rows.length === 1 || n.rows.every((r) => r.length === 1),
      };
    }
    if (n.k === "list") {
      const items = n.items.flatMap((x) => (containsPm(x) ? expandPm(x) : [assignedValue(x) ?? x]));
      return { items, unordered: true, set: false, matrixShape: null, vector: false };
    }
    if (n.k === "group" && n.open === "\\{") {
      const items = n.items.flatMap((x) => (containsPm(x) ? expandPm(x) : [x]));
      return { items, unordered: true, set: true, matrixShape: null, vector: false };
    }
    if (n.k === "group")
      return { items: n.items, unordered: false, set: false, matrixShape: null, vector: false };
    return null;
  }

  /** The items without repeats (first occurrence kept); at most MAX_UNORDERED items are compared. */
  private distinct(items: MathNode[]): MathNode[] {
    if (items.length > MAX_UNORDERED) return items;
    const out: MathNode[] = [];
    for (const x of items) if (!out.some((y) => this.equal(x, y))) out.push(x);
    return out;
  }

  private orderedEqual(a: MathNode[], b: MathNode[]): boolean {
    return a.length === b.length && a.every((x, i) => this.equal(x, b[i]!));
  }

  private unorderedEqual(a: MathNode[], b: MathNode[]): boolean {
    if (a.length !== b.length) return false;
    if (a.length > MAX_UNORDERED) return this.orderedEqual(a, b);
    const used = new Array<boolean>(b.length).fill(false);
    outer: for (const x of a) {
      for (let j = 0; j < b.length; j++) {
        if (!used[j] && this.equal(x, b[j]!)) {
          used[j] = true;
          continue outer;
        }
      }
      return false;
    }
    return true;
  }

  private relationsEqual(a: Extract<MathNode, { k: "rel" }>, b: Extract<MathNode, { k: "rel" }>): boolean {
    const ia = asInterval(a);
    const ib = asInterval(b);
    if (ia && ib) return this.equal(intervalNode(ia), intervalNode(ib));
    if (a.parts.length !== b.parts.length) return false;
    const sameOps = a.ops.join() === b.ops.join();
    const flipped = a.ops.map(flipOp).reverse().join() === b.ops.join();
    if (sameOps && this.orderedEqual(a.parts, b.parts)) return true;
    if (flipped && this.orderedEqual(a.parts, [...b.parts].reverse())) return true;
    // Two equations with the same solutions: (L1 - R1) is a constant multiple of (L2 - R2).
    if (a.parts.length === 2 && a.ops[0] === "=" && b.ops[0] === "=") {
      return this.proportional(
        { k: "sub", a: a.parts[0]!, b: a.parts[1]! },
        { k: "sub", a: b.parts[0]!, b: b.parts[1]! },
      );
    }
    return false;
  }

  private proportional(a: MathNode, b: MathNode): boolean {
    const symbols = collectSymbols(b, collectSymbols(a, new Set()));
    if (symbols.size === 0) return false;
    let ratio: Complex | null = null;
    let valid = 0;
    for (const env of environments(symbols)) {
      const x = numericValue(a, env);
      const y = numericValue(b, env);
      if (!finite(x) || !finite(y) || cAbs(y) < 1e-12) continue;
      const r = cDiv(x, y);
      if (cAbs(r) < 1e-12) return false;
      if (ratio && !close(ratio, r)) return false;
      ratio = r;
      valid++;
    }
    return valid >= 2;
  }

  /**
   * One side a decimal numeral, the other an exact value without variables: the decimal-precision rule
   * (decimal-precision.ts). Null when it does not apply. A `%` on one side only is read with and
   * without it, as everywhere in the comparator (50% = 0.5 = 50).
   */
  private decimalVerdict(a: MathNode, b: MathNode): boolean | null {
    const da = decimalNumeral(a);
    const db = decimalNumeral(b);
    if ((da === null) === (db === null)) return null;
    const exact = da ? b : a;
    if (collectSymbols(exact, new Set()).size > 0) return null;
    const dec = (da ?? db)!;
    const decPercent = da ? this.percentA : this.percentB;
    const exactPercent = da ? this.percentB : this.percentA;
    const readings: { dec: DecimalNumeral; divide: boolean }[] = [{ dec, divide: false }];
    if (decPercent && !exactPercent) readings.push({ dec: percentOf(dec), divide: false });
    if (exactPercent && !decPercent) readings.push({ dec, divide: true });
    const r = exactValue(exact);
    if (r) {
      return readings.some((x) => {
        const v = x.divide ? ratDiv(r, { n: 100n, d: 1n }) : r;
        return !!v && decimalMatchesRational(x.dec, v);
      });
    }
    const v = numericValue(exact, new Map());
    if (Math.abs(v.im) > 1e-12 * Math.max(1, cAbs(v))) return false;
    return readings.some((x) => decimalMatchesReal(x.dec, x.divide ? v.re / 100 : v.re));
  }

  private scalarEqual(a: MathNode, b: MathNode): boolean {
    const sa = infSign(a);
    const sb = infSign(b);
    if (sa !== 0 || sb !== 0) return sa === sb;
    const decimal = this.decimalVerdict(a, b);
    if (decimal !== null) return decimal;
    const ra = exactValue(a);
    const rb = exactValue(b);
    if (ra && rb) {
      if (ratEq(ra, rb)) return true;
      const hundred = { n: 100n, d: 1n };
      if (this.percentA && !this.percentB) {
        const r = ratDiv(ra, hundred);
        return !!r && ratEq(r, rb);
      }
      if (this.percentB && !this.percentA) {
        const r = ratDiv(rb, hundred);
        return !!r && ratEq(ra, r);
      }
      return false;
    }
    if (this.scalarStage) return this.scalarStage(a, b);
    const symbols = collectSymbols(b, collectSymbols(a, new Set()));
    if (symbols.size === 0) {
      const x = numericValue(a, new Map());
      const y = numericValue(b, new Map());
      if (!finite(x) || !finite(y)) return false;
      if (close(x, y)) return true;
      if (this.percentA !== this.percentB) {
        return this.percentA ? close(cDiv(x, cx(100)), y) : close(x, cDiv(y, cx(100)));
      }
      return false;
    }
    let valid = 0;
    for (const env of environments(symbols)) {
      const x = numericValue(a, env);
      const y = numericValue(b, env);
      const fx = finite(x);
      const fy = finite(y);
      if (!fx && !fy) continue;
      if (fx !== fy || !close(x, y)) return false;
      valid++;
    }
    return valid >= 2;
  }
}

function flipOp(op: string): string {
  return op.replace("<", "#").replace(">", "<").replace("#", ">");
}

function intervalNode(i: IntervalShape): MathNode {
  return { k: "group", open: i.loClosed ? "[" : "(", close: i.hiClosed ? "]" : ")", items: [i.lo, i.hi] };
}
