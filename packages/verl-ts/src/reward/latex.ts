/**
 * From a LaTeX answer string to a small math AST. Two steps:
 *  1. `normalizeAnswerText` drops what a grader ignores: `$`, `\left`/`\right`, spacing commands, degree
 *     marks, `%` (remembered), `\text{...}` units, trailing unit words, thousands separators.
 *  2. `parseAnswer` reads the rest with a recursive-descent parser into `MathNode`s: numbers (exact),
 *     symbols, + - * / ^, \frac (also the malformed \frac12), mixed numbers (1\frac45), \sqrt[n]{},
 *     \binom, !, functions, ±, relations, tuples/intervals/sets, unions, matrices.
 * Inputs are bounded (length, token count, nesting depth) so parsing is linear and cannot stall.
 */
import { type Rational, ratFromDecimal } from "./numbers.js";

/** Thrown when an answer cannot be read as math; the comparator then falls back to text comparison. */
export class AnswerParseError extends Error {
  override name = "AnswerParseError";
  constructor(
    message: string,
    readonly answer: string,
  ) {
    super(
      `${message} in answer ${JSON.stringify(answer.length > 80 ? `${answer.slice(0, 80)}...` : answer)}`,
    );
  }
}

export type MathNode =
  /** `decimal`: the literal as written when it has a point ("0.333"), for the decimal-precision rule. */
  | { k: "num"; v: Rational; lit: boolean; decimal?: string }
  | { k: "sym"; name: string }
  | { k: "const"; name: "pi" | "e" | "i" | "inf" }
  | { k: "add" | "sub" | "mul" | "pow"; a: MathNode; b: MathNode }
  | { k: "div"; a: MathNode; b: MathNode; frac: boolean }
  | { k: "neg"; a: MathNode }
  | { k: "pm"; a: MathNode | null; b: MathNode; minusFirst: boolean }
  | { k: "fn"; name: string; args: MathNode[] }
  | { k: "group"; open: string; close: string; items: MathNode[] }
  | { k: "matrix"; rows: MathNode[][] }
  | { k: "rel"; ops: string[]; parts: MathNode[] }
  | { k: "union"; parts: MathNode[] }
  | { k: "list"; items: MathNode[] };

export interface NormalizedAnswer {
  text: string;
  /** The answer carried a percent sign (50\% may mean 50 or 0.5). */
  percent: boolean;
  /** The whole answer was prose (\text{...} only, or words): compare as text. */
  isText: boolean;
}

const MAX_ANSWER_CHARS = 2000;
const MAX_TOKENS = 1500;
const MAX_DEPTH = 120;

const FUNCTION_WORDS = [
  "arcsin",
  "arccos",
  "arctan",
  "sinh",
  "cosh",
  "tanh",
  "sin",
  "cos",
  "tan",
  "sec",
  "csc",
  "cot",
  "log",
  "ln",
  "exp",
  "sqrt",
  "pi",
  "gcd",
  "lcm",
  "max",
  "min",
  "det",
];
const FUNCTION_RE = new RegExp(`^(?:${FUNCTION_WORDS.join("|")})`);
const FUNCTION_WORDS_G = new RegExp(FUNCTION_WORDS.join("|"), "g");
/** Two-letter unit words dropped after a number (longer words are dropped by the generic rule). */
const SHORT_UNITS = new Set([
  "cm",
  "mm",
  "km",
  "kg",
  "mg",
  "ft",
  "yd",
  "mi",
  "hr",
  "ml",
  "mL",
  "oz",
  "lb",
  "sq",
  "in",
]);

const GREEK = new Set(
  "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Upsilon Phi Psi Omega".split(
    " ",
  ),
);

/** Replaces `\cmd{...}` (balanced braces) with what `fn` returns for its content. */
function replaceBraced(s: string, cmd: RegExp, fn: (content: string) => string): string {
  let out = "";
  let i = 0;
  cmd.lastIndex = 0;
  for (let m = cmd.exec(s); m; m = cmd.exec(s)) {
    let j = m.index + m[0].length;
    while (s[j] === " ") j++;
    if (s[j] !== "{") continue;
    let depth = 0;
    let k = j;
    for (; k < s.length; k++) {
      if (s[k] === "\\") {
        k++;
        continue;
      }
      if (s[k] === "{") depth++;
      else if (s[k] === "}" && --depth === 0) break;
    }
    if (k >= s.length) break;
    out += s.slice(i, m.index) + fn(s.slice(j + 1, k));
    i = k + 1;
    cmd.lastIndex = i;
  }
  return out + s.slice(i);
}

const TEXT_CMD = /\\(?:text|textbf|textit|textrm|textnormal|textsf|mbox|hbox)(?![a-zA-Z])/g;
const UNWRAP_CMD =
  /\\(?:mathrm|mathbf|mathit|mathsf|boldsymbol|bm|operatorname|mathnormal|displaystyle)(?![a-zA-Z])/g;
const TEXT_MARK = "\u0001";

/** Step 1: the answer text with presentation-only parts removed. Pure string work, linear time. */
export function normalizeAnswerText(raw: string): NormalizedAnswer {
  let s = raw.length > MAX_ANSWER_CHARS ? raw.slice(0, MAX_ANSWER_CHARS) : raw;
  s = s
    .replace(/[−–]/g, "-")
    .replace(/×/g, "\\times ")
    .replace(/[·⋅]/g, "\\cdot ")
    .replace(/÷/g, "\\div ")
    .replace(/π/g, "\\pi ")
    .replace(/√/g, "\\sqrt ")
    .replace(/∞/g, "\\infty ")
    .replace(/±/g, "\\pm ")
    .replace(/≤/g, "\\le ")
    .replace(/≥/g, "\\ge ")
    .replace(/≠/g, "\\ne ")
    .replace(/∪/g, "\\cup ")
    .replace(/°/g, "")
    .replace(/(?<!\\)\\[([\])]/g, "")
    .replace(/\\\$/g, "")
    .replace(/\$/g, "")
    .replace(/\\(?:left|right)\s*\./g, "")
    .replace(/\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])/g, "")
    .replace(/\\[dtc]frac(?![a-zA-Z])/g, "\\frac")
    .replace(/\\[dt]binom(?![a-zA-Z])/g, "\\binom")
    .replace(/\\(?:displaystyle|limits|nolimits)(?![a-zA-Z])/g, "")
    .replace(/\\[hv]space\*?\{[^{}]*\}/g, "")
    .replace(/\\q?quad(?![a-zA-Z])/g, " ")
    .replace(/(?<!\\)\\[,;:! ]/g, "")
    .replace(/~/g, " ")
    .replace(/\{,\}/g, "")
    .replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])/g, "")
    .replace(/\^\s*\{?\s*\\text\{\s*o\s*\}\s*\}?/g, "");
  // 0.1\overline{6} -> exact fraction; \mathbb{R} -> the whole line.
  s = s.replace(/(\d*)\.(\d*)\\overline\s*\{(\d{1,12})\}/g, (_m, int: string, fixed: string, rep: string) => {
    const base = BigInt(`${int || "0"}${fixed}`);
    const num = BigInt(`${int || "0"}${fixed}${rep}`) - base;
    const den = BigInt(`${"9".repeat(rep.length)}${"0".repeat(fixed.length)}`);
    return `\\frac{${num}}{${den}}`;
  });
  s = s.replace(/\\mathbb\s*\{?R\}?/g, "(-\\infty,\\infty)");
  let percent = false;
  s = s.replace(/\\?%/g, () => {
    percent = true;
    return "";
  });
  s = replaceBraced(s, UNWRAP_CMD, (c) => c);
  // \text{...}: separators become commas; other text is marked, then either kept (all-text answer) or
  // dropped as units.
  const texts: string[] = [];
  s = replaceBraced(s, TEXT_CMD, (c) => {
    const t = c.trim();
    if (t === "or" || t === "and" || t === "," || t === "or " || t === "and ") return ",";
    texts.push(t);
    return TEXT_MARK;
  });
  if (texts.length > 0) {
    const rest = s.replaceAll(TEXT_MARK, "").replace(/[\s.,:;()]/g, "");
    if (rest === "") {
      s = s.replace(new RegExp(TEXT_MARK, "g"), () => texts.shift() ?? "");
      return { text: s.trim(), percent, isText: true };
    }
    s = s.replace(/\u0001\s*(?:\^\s*\{?\s*[23]\s*\}?)?/g, " ");
  }
  s = s.replace(/\s+(?:or|and)\s+/g, ",");
  // A trailing unit after a number: "5.4 cents", "10 cm^2", "3 square units".
  s = s.replace(
    /(?<=[\d}).])\s*([a-zA-Z]{2,}(?:\s+[a-zA-Z]{2,})*)\s*(?:\^\s*\{?[23]\}?)?\s*\.?\s*$/,
    (m, words) => {
      const w = words as string;
      if (FUNCTION_RE.test(w) && FUNCTION_WORDS.includes(w)) return m;
      if (w.length === 2 && !SHORT_UNITS.has(w)) return m;
      return "";
    },
  );
  s = s.trim().replace(/[.\s]+$/, "");
  // Thousands separators, only when the whole answer is one such number ("32,348"; "10 080").
  if (/^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/.test(s)) s = s.replace(/,/g, "");
  else if (/^[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?$/.test(s)) s = s.replace(/ /g, "");
  // An array's column spec ({ccc}) is no prose either.
  const isText = (
    s
      .replace(/\\begin\s*\{array\}\s*\{[^{}]*\}|\\(?:begin|end)\s*\{[^{}]*\}|\\[a-zA-Z]+/g, " ")
      .match(/[a-zA-Z]{3,}/g) ?? []
  ).some(isProse);
  return { text: s, percent, isText };
}

/** A run of letters that is not function names plus single-letter variables ("sinx" is math, "yes" is not). */
function isProse(run: string): boolean {
  let rest = run;
  for (let m = FUNCTION_RE.exec(rest); m; m = FUNCTION_RE.exec(rest)) rest = rest.slice(m[0].length);
  const unknown = run.replace(FUNCTION_WORDS_G, "");
  return rest.length >= 3 || unknown.length >= 3;
}

type Tok =
  | { t: "num"; v: string }
  | { t: "id"; v: string }
  | { t: "cmd"; v: string }
  | { t: "op"; v: string }
  | { t: "end" };

const OPS = new Set([
  "+",
  "-",
  "*",
  "/",
  "^",
  "_",
  "!",
  "=",
  "<",
  ">",
  ",",
  ";",
  "(",
  ")",
  "[",
  "]",
  "{",
  "}",
  "|",
  "&",
  "'",
  ":",
]);

function tokenize(s: string, original: string): Tok[] {
  const toks: Tok[] = [];
  let i = 0;
  while (i < s.length) {
    if (toks.length > MAX_TOKENS) throw new AnswerParseError("too many tokens", original);
    const ch = s[i]!;
    if (ch === " " || ch === "\t" || ch === "\n") {
      i++;
      continue;
    }
    if ((ch >= "0" && ch <= "9") || (ch === "." && s[i + 1]! >= "0" && s[i + 1]! <= "9")) {
      let j = i;
      while (j < s.length && s[j]! >= "0" && s[j]! <= "9") j++;
      if (s[j] === "." && s[j + 1]! >= "0" && s[j + 1]! <= "9") {
        j++;
        while (j < s.length && s[j]! >= "0" && s[j]! <= "9") j++;
      }
      toks.push({ t: "num", v: s.slice(i, j) });
      i = j;
      continue;
    }
    if (ch === "\\") {
      if (s[i + 1] === "\\") {
        toks.push({ t: "op", v: "\\\\" });
        i += 2;
        continue;
      }
      const m = /^[a-zA-Z]+/.exec(s.slice(i + 1, i + 40));
      if (!m) {
        const c = s[i + 1] ?? "";
        if (c === "{") toks.push({ t: "cmd", v: "lbrace" });
        else if (c === "}") toks.push({ t: "cmd", v: "rbrace" });
        else if (c === "|") toks.push({ t: "op", v: "|" });
        i += 2;
        continue;
      }
      const name = m[0];
      i += 1 + name.length;
      if (name === "begin" || name === "end") {
        const env = /^\s*\{([a-zA-Z*]+)\}/.exec(s.slice(i, i + 40));
        if (!env) throw new AnswerParseError(`\\${name} without environment`, original);
        i += env[0].length;
        if (name === "begin" && env[1] === "array") {
          const spec = /^\s*\{[^{}]*\}/.exec(s.slice(i));
          if (spec) i += spec[0].length;
        }
        toks.push({ t: "cmd", v: `${name}:${env[1]}` });
        continue;
      }
      if (GREEK.has(name)) toks.push({ t: "id", v: name });
      else toks.push({ t: "cmd", v: name });
      continue;
    }
    if ((ch >= "a" && ch <= "z") || (ch >= "A" && ch <= "Z")) {
      const fw = FUNCTION_RE.exec(s.slice(i, i + 8));
      if (fw) {
        toks.push({ t: "cmd", v: fw[0] });
        i += fw[0].length;
        continue;
      }
      toks.push({ t: "id", v: ch });
      i++;
      continue;
    }
    if (OPS.has(ch)) {
      toks.push({ t: "op", v: ch });
      i++;
      continue;
    }
    throw new AnswerParseError(`unexpected character ${JSON.stringify(ch)}`, original);
  }
  toks.push({ t: "end" });
  return toks;
}

const REL_CMDS: Record<string, string> = {
  le: "<=",
  leq: "<=",
  leqslant: "<=",
  ge: ">=",
  geq: ">=",
  geqslant: ">=",
  lt: "<",
  gt: ">",
  ne: "!=",
  neq: "!=",
  approx: "=",
  in: "=",
  equiv: "=",
};
const FUNCS = new Set([
  "sin",
  "cos",
  "tan",
  "sec",
  "csc",
  "cot",
  "arcsin",
  "arccos",
  "arctan",
  "sinh",
  "cosh",
  "tanh",
  "exp",
  "ln",
  "log",
  "gcd",
  "lcm",
  "max",
  "min",
  "det",
]);
const CLOSERS = new Set([")", "]", "}", "rbrace", "rangle", "&", "\\\\"]);

class Parser {
  private pos = 0;
  private depth = 0;
  private absDepth = 0;

  constructor(
    private readonly toks: Tok[],
    private readonly original: string,
  ) {}

  private get tok(): Tok {
    return this.toks[this.pos]!;
  }
  private isOp(v: string): boolean {
    const t = this.tok;
    return t.t === "op" && t.v === v;
  }
  private isCmd(v: string): boolean {
    const t = this.tok;
    return t.t === "cmd" && t.v === v;
  }
  private fail(msg: string): never {
    throw new AnswerParseError(msg, this.original);
  }
  private expectOp(v: string): void {
    if (!this.isOp(v)) this.fail(`expected '${v}'`);
    this.pos++;
  }
  private enter(): void {
    if (++this.depth > MAX_DEPTH) this.fail("nesting too deep");
  }

  parseTop(): MathNode {
    const items = this.parseList();
    if (this.tok.t !== "end") this.fail(`unexpected '${"v" in this.tok ? this.tok.v : ""}'`);
    return items.length === 1 ? items[0]! : { k: "list", items };
  }

  private parseList(): MathNode[] {
    const items: MathNode[] = [];
    if (this.atCloser()) return items;
    items.push(this.parseUnion());
    while (this.isOp(",") || this.isOp(";")) {
      this.pos++;
      if (this.atCloser()) break; // trailing comma
      items.push(this.parseUnion());
    }
    return items;
  }

  private atCloser(): boolean {
    const t = this.tok;
    if (t.t === "end") return true;
    if ((t.t === "op" || t.t === "cmd") && CLOSERS.has(t.v)) return true;
    return t.t === "cmd" && t.v.startsWith("end:");
  }

  private parseUnion(): MathNode {
    const first = this.parseRelation();
    const parts = [first];
    for (;;) {
      if (this.isCmd("cup")) this.pos++;
      else if (this.tok.t === "id" && this.tok.v === "U" && parts.at(-1)!.k === "group") {
        const next = this.toks[this.pos + 1]!;
        if (!(next.t === "op" && (next.v === "(" || next.v === "["))) break;
        this.pos++;
      } else break;
      parts.push(this.parseRelation());
    }
    return parts.length === 1 ? first : { k: "union", parts };
  }

  private relOp(): string | null {
    const t = this.tok;
    if (t.t === "op" && (t.v === "=" || t.v === "<" || t.v === ">")) {
      const n = this.toks[this.pos + 1]!;
      if (t.v !== "=" && n.t === "op" && n.v === "=") {
        this.pos++;
        return `${t.v}=`;
      }
      return t.v;
    }
    if (t.t === "cmd" && REL_CMDS[t.v]) return REL_CMDS[t.v]!;
    return null;
  }

  private parseRelation(): MathNode {
    const parts = [this.parseAdd()];
    const ops: string[] = [];
    for (let op = this.relOp(); op; op = this.relOp()) {
      this.pos++;
      ops.push(op);
      parts.push(this.parseAdd());
    }
    return ops.length === 0 ? parts[0]! : { k: "rel", ops, parts };
  }

  private parseAdd(): MathNode {
    this.enter();
    let node: MathNode;
    if (this.isOp("-")) {
      this.pos++;
      node = { k: "neg", a: this.parseMul() };
    } else if (this.isOp("+")) {
      this.pos++;
      node = this.parseMul();
    } else if (this.isCmd("pm") || this.isCmd("mp")) {
      const minusFirst = this.isCmd("mp");
      this.pos++;
      node = { k: "pm", a: null, b: this.parseMul(), minusFirst };
    } else node = this.parseMul();
    for (;;) {
      if (this.isOp("+")) {
        this.pos++;
        node = { k: "add", a: node, b: this.parseMul() };
      } else if (this.isOp("-")) {
        this.pos++;
        node = { k: "sub", a: node, b: this.parseMul() };
      } else if (this.isCmd("pm") || this.isCmd("mp")) {
        const minusFirst = this.isCmd("mp");
        this.pos++;
        node = { k: "pm", a: node, b: this.parseMul(), minusFirst };
      } else break;
    }
    this.depth--;
    return node;
  }

  private parseSignedFactor(): MathNode {
    return this.parseSigned(() => this.parsePow());
  }

  /** Unary signs before what `rest` parses: each "-" a negation, then at most one "+". */
  private parseSigned(rest: () => MathNode): MathNode {
    if (this.isOp("-")) {
      this.pos++;
      return { k: "neg", a: this.parseSigned(rest) };
    }
    if (this.isOp("+")) this.pos++;
    return rest();
  }

  private startsPrimary(): boolean {
    const t = this.tok;
    if (t.t === "num" || t.t === "id") return true;
    if (t.t === "op") return t.v === "(" || t.v === "{" || (t.v === "|" && this.absDepth === 0);
    if (t.t === "cmd") {
      return (
        !REL_CMDS[t.v] &&
        !CLOSERS.has(t.v) &&
        !t.v.startsWith("end:") &&
        !["cup", "pm", "mp", "cdot", "times", "div", "cap", "to"].includes(t.v)
      );
    }
    return false;
  }

  private parseMul(): MathNode {
    let node = this.parsePow();
    for (;;) {
      if (this.isOp("*") || this.isCmd("cdot") || this.isCmd("times") || this.isCmd("ast")) {
        this.pos++;
        node = { k: "mul", a: node, b: this.parseSignedFactor() };
      } else if (this.isOp("/") || this.isCmd("div")) {
        this.pos++;
        node = { k: "div", a: node, b: this.parseSignedFactor(), frac: false };
      } else if (this.startsPrimary()) {
        const right = this.parsePow();
        // Mixed number: an integer literal written right before a \frac of two integer literals.
        if (
          node.k === "num" &&
          node.lit &&
          node.v.d === 1n &&
          right.k === "div" &&
          right.frac &&
          right.a.k === "num" &&
          right.a.lit &&
          right.b.k === "num" &&
          right.b.lit
        ) {
          node = { k: "add", a: node, b: right };
        } else node = { k: "mul", a: node, b: right };
      } else break;
    }
    return node;
  }

  private parsePow(): MathNode {
    const base = this.parsePostfix();
    if (this.isOp("^")) {
      this.pos++;
      const power = this.parseScript();
      return transposed(base, power) ?? { k: "pow", a: base, b: power };
    }
    return base;
  }

  /** The argument of ^ or _: a {group}, a whole number, a signed atom, or one primary. */
  private parseScript(): MathNode {
    return this.parseSigned(() => (this.isOp("{") ? this.parseBraceGroup() : this.parsePostfix()));
  }

  private parsePostfix(): MathNode {
    let node = this.parsePrimary();
    for (;;) {
      if (this.isOp("!")) {
        this.pos++;
        node = { k: "fn", name: "fact", args: [node] };
      } else if (this.isOp("'")) {
        this.pos++;
        if (node.k === "sym") node = { k: "sym", name: `${node.name}'` };
      } else break;
    }
    return node;
  }

  private parseBraceGroup(): MathNode {
    this.expectOp("{");
    this.enter();
    const items = this.parseList();
    this.expectOp("}");
    this.depth--;
    if (items.length === 0) this.fail("empty braces");
    return items.length === 1 ? items[0]! : { k: "group", open: "\\{", close: "\\}", items };
  }

  /** A TeX macro argument: {group}, a single digit (so \frac12 is 1/2), a letter, or a command. */
  private parseArg(): MathNode {
    const t = this.tok;
    if (t.t === "op" && t.v === "{") return this.parseBraceGroup();
    if (t.t === "num") {
      if (t.v.length > 1 && t.v[0] !== ".") {
        this.toks[this.pos] = { t: "num", v: t.v.slice(1) };
        return this.numNode(t.v[0]!);
      }
      this.pos++;
      return this.numNode(t.v);
    }
    return this.parsePrimary();
  }

  private numNode(text: string): MathNode {
    const v = ratFromDecimal(text);
    if (!v) this.fail(`bad number ${text}`);
    return text.includes(".") ? { k: "num", v, lit: true, decimal: text } : { k: "num", v, lit: true };
  }

  private subscriptText(): string {
    if (this.isOp("{")) {
      let depth = 0;
      let out = "";
      do {
        const t = this.tok;
        if (t.t === "end") this.fail("unclosed subscript");
        if (t.t === "op" && t.v === "{") depth++;
        else if (t.t === "op" && t.v === "}") depth--;
        else out += t.v;
        this.pos++;
      } while (depth > 0);
      return out;
    }
    const t = this.tok;
    if (t.t === "end") this.fail("empty subscript");
    this.pos++;
    return t.v;
  }

  private parseGroup(open: string, closers: string[]): MathNode {
    this.enter();
    const items = this.parseList();
    const t = this.tok;
    if (!((t.t === "op" || t.t === "cmd") && closers.includes(t.v))) this.fail(`unclosed '${open}'`);
    this.pos++;
    this.depth--;
    const close = t.v === "rbrace" ? "\\}" : t.v === "rangle" ? "\\rangle" : t.v;
    if (items.length === 1 && ((open === "(" && close === ")") || (open === "[" && close === "]"))) {
      return items[0]!;
    }
    return { k: "group", open, close, items };
  }

  private parseFunction(name: string): MathNode {
    let base: MathNode | null = null;
    let power: MathNode | null = null;
    for (let i = 0; i < 2; i++) {
      if (this.isOp("_") && name === "log") {
        this.pos++;
        base = this.parseScript();
      } else if (this.isOp("^")) {
        this.pos++;
        power = this.parseScript();
      }
    }
    let arg: MathNode;
    if (this.isOp("(")) {
      this.pos++;
      const g = this.parseGroup("(", [")"]);
      arg = g;
    } else arg = this.parsePow();
    const args = arg.k === "group" && arg.open === "(" ? arg.items : [arg];
    let node: MathNode =
      name === "log" && base ? { k: "fn", name: "logb", args: [args[0]!, base] } : { k: "fn", name, args };
    if (power) {
      // sin^{-1} x is arcsin x; sin^2 x is (sin x)^2.
      if (power.k === "neg" && power.a.k === "num" && power.a.v.n === 1n && power.a.v.d === 1n) {
        node = { k: "fn", name: `arc${name}`, args };
      } else node = { k: "pow", a: node, b: power };
    }
    return node;
  }

  private parseMatrix(env: string): MathNode {
    const rows: MathNode[][] = [[]];
    for (;;) {
      const t = this.tok;
      if (t.t === "cmd" && t.v === `end:${env}`) {
        this.pos++;
        break;
      }
      if (t.t === "end") this.fail(`unclosed ${env}`);
      if (t.t === "op" && t.v === "&") {
        this.pos++;
        continue;
      }
      if (t.t === "op" && t.v === "\\\\") {
        this.pos++;
        rows.push([]);
        continue;
      }
      rows.at(-1)!.push(this.parseUnion());
      if (!(this.isOp("&") || this.isOp("\\\\") || this.isCmd(`end:${env}`))) this.fail(`bad cell in ${env}`);
    }
    while (rows.length > 0 && rows.at(-1)!.length === 0) rows.pop();
    return { k: "matrix", rows };
  }

  private parsePrimary(): MathNode {
    const t = this.tok;
    if (t.t === "num") {
      this.pos++;
      return this.numNode(t.v);
    }
    if (t.t === "id") {
      this.pos++;
      let name = t.v;
      if (this.isOp("_")) {
        this.pos++;
        name = `${name}_${this.subscriptText()}`;
      }
      if (name === "e") return { k: "const", name: "e" };
      if (name === "i") return { k: "const", name: "i" };
      return { k: "sym", name };
    }
    if (t.t === "op") {
      if (t.v === "(" || t.v === "[") {
        this.pos++;
        return this.parseGroup(t.v, [")", "]"]);
      }
      if (t.v === "{") return this.parseBraceGroup();
      if (t.v === "|" && this.absDepth === 0) {
        this.pos++;
        this.absDepth++;
        const inner = this.parseAdd();
        this.absDepth--;
        this.expectOp("|");
        return { k: "fn", name: "abs", args: [inner] };
      }
      this.fail(`unexpected '${t.v}'`);
    }
    if (t.t === "cmd") {
      this.pos++;
      const v = t.v;
      if (v === "frac" || v === "over") {
        const a = this.parseArg();
        const b = this.parseArg();
        return { k: "div", a, b, frac: true };
      }
      if (v === "binom" || v === "choose") {
        const a = this.parseArg();
        const b = this.parseArg();
        return { k: "fn", name: "binom", args: [a, b] };
      }
      if (v === "sqrt") {
        if (this.isOp("[")) {
          this.pos++;
          const index = this.parseAdd();
          this.expectOp("]");
          return { k: "fn", name: "root", args: [this.parseArg(), index] };
        }
        return { k: "fn", name: "sqrt", args: [this.parseArg()] };
      }
      if (v === "pi") return { k: "const", name: "pi" };
      if (v === "infty" || v === "infin" || v === "inf") return { k: "const", name: "inf" };
      if (v === "emptyset" || v === "varnothing") return { k: "group", open: "\\{", close: "\\}", items: [] };
      if (v === "lbrace") return this.parseGroup("\\{", ["rbrace"]);
      if (v === "langle") return this.parseGroup("\\langle", ["rangle"]);
      if (v === "lvert" || v === "vert") {
        const inner = this.parseAdd();
        if (!(this.isCmd("rvert") || this.isCmd("vert") || this.isOp("|"))) this.fail("unclosed |");
        this.pos++;
        return { k: "fn", name: "abs", args: [inner] };
      }
      if (v === "lfloor" || v === "lceil") {
        const inner = this.parseAdd();
        if (!(this.isCmd("rfloor") || this.isCmd("rceil"))) this.fail(`unclosed \\${v}`);
        this.pos++;
        return { k: "fn", name: v.slice(1), args: [inner] };
      }
      if (v.startsWith("begin:")) return this.parseMatrix(v.slice(6));
      if (FUNCS.has(v)) return this.parseFunction(v);
      if (v === "ldots" || v === "cdots" || v === "dots") return { k: "sym", name: "\\dots" };
      if (v === "overline" || v === "bar" || v === "hat" || v === "vec" || v === "widehat" || v === "tilde") {
        const a = this.parseArg();
        return { k: "fn", name: v, args: [a] };
      }
      return { k: "sym", name: `\\${v}` };
    }
    this.fail("unexpected end");
  }
}

/** What ^T, ^{T}, ^\\top and ^\\intercal mean after a matrix or a tuple: its transpose. */
const TRANSPOSE = new Set(["T", "\\top", "\\intercal"]);

/**
 * base^power as a transpose: a rectangular matrix's rows become its columns, and a tuple written across,
 * (1, 2)^T, is the column vector. Null when power is not a transpose sign or base is neither.
 */
function transposed(base: MathNode, power: MathNode): MathNode | null {
  if (power.k !== "sym" || !TRANSPOSE.has(power.name)) return null;
  if (base.k === "group" && (base.open === "(" || base.open === "[") && base.items.length >= 2)
    return { k: "matrix", rows: base.items.map((x) => [x]) };
  if (base.k !== "matrix" || base.rows.length === 0) return null;
  const cols = base.rows[0]!.length;
  if (!base.rows.every((r) => r.length === cols)) return null;
  return { k: "matrix", rows: Array.from({ length: cols }, (_, j) => base.rows.map((r) => r[j]!)) };
}

/** Step 2: parse a normalised answer text into a MathNode (throws AnswerParseError). */
export function parseAnswer(text: string, original = text): MathNode {
  const toks = tokenize(text, original);
  if (toks.length === 1) throw new AnswerParseError("empty answer", original);
  return new Parser(toks, original).parseTop();
}
