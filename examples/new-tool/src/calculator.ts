/**
 * A calculator tool for tool-integrated reasoning, written against the Tool interface of
 * @torl-ts/verl's rollout and nothing else. It runs in the rollout's own process (pure TypeScript, no
 * sandbox, no Python): the model writes
 *
 *   <calc>(123 + 4) * 56</calc>
 *
 * generation pauses at "</calc>" (the tool's stop string), the rollout hands the round's text to
 * `parse`, which takes the expression after the last "<calc>", `execute` evaluates it, and the rollout
 * appends `text`: "</calc><output>7112</output>". The appended tokens are masked out of the loss like
 * the code interpreter's observations. The rollout knows none of these strings.
 */
import {
  newInstanceId,
  type OpenAIFunctionSchema,
  type Tool,
  type ToolCall,
  type ToolResult,
} from "@torl-ts/verl";

export interface CalculatorOptions {
  /** Opening marker of a call. Default "<calc>". */
  open?: string;
  /** Closing marker: the stop string that triggers the call. Default "</calc>". */
  close?: string;
  /** Longer expressions are refused (an error observation). Default 200. */
  maxExpressionChars?: number;
}

/** An expression the calculator cannot evaluate; its message is what the model reads. */
export class CalculatorError extends Error {
  override name = "CalculatorError";
}

/**
 * Evaluates an arithmetic expression: numbers (1, 2.5, 1e3), + - * / // % ** ^ (power, right
 * associative), unary minus, parentheses, and the functions abs, min, max, sqrt, gcd, lcm, pow.
 * A recursive-descent parser over the characters: no eval, no access to anything else.
 */
export function evaluate(expression: string): number {
  const s = expression.replace(/\s+/g, "");
  let i = 0;
  const fail = (what: string): never => {
    throw new CalculatorError(`${what} at position ${i} of "${expression.trim()}"`);
  };
  const peek = (token: string) => s.startsWith(token, i);
  const eat = (token: string) => {
    if (!peek(token)) return false;
    i += token.length;
    return true;
  };

  // sum := product (("+" | "-") product)*
  const sum = (): number => {
    let v = product();
    for (;;) {
      if (eat("+")) v += product();
      else if (eat("-")) v -= product();
      else return v;
    }
  };
  // product := unary (("*" | "//" | "/" | "%") unary)*   ("**" is power, not a product)
  const product = (): number => {
    let v = unary();
    for (;;) {
      if (!peek("**") && eat("*")) v *= unary();
      else if (eat("//")) v = Math.floor(v / nonZero(unary()));
      else if (eat("/")) v /= nonZero(unary());
      else if (eat("%")) {
        const m = nonZero(unary());
        v = ((v % m) + m) % m;
      } else return v;
    }
  };
  // unary := "-" unary | power
  const unary = (): number => (eat("-") ? -unary() : eat("+") ? unary() : power());
  // power := atom (("**" | "^") unary)?
  const power = (): number => {
    const base = atom();
    return eat("**") || eat("^") ? base ** unary() : base;
  };
  // atom := number | name "(" args ")" | "(" sum ")"
  const atom = (): number => {
    if (eat("(")) {
      const v = sum();
      if (!eat(")")) fail("missing )");
      return v;
    }
    const num = /^(\d+\.?\d*|\.\d+)(e[+-]?\d+)?/i.exec(s.slice(i));
    if (num) {
      i += num[0].length;
      return Number(num[0]);
    }
    const name = /^[a-z]+/i.exec(s.slice(i));
    if (name && FUNCTIONS[name[0]]) {
      i += name[0].length;
      if (!eat("(")) fail(`${name[0]} needs (`);
      const args = [sum()];
      while (eat(",")) args.push(sum());
      if (!eat(")")) fail("missing )");
      return FUNCTIONS[name[0]]!(args, fail);
    }
    return fail(name ? `unknown name ${name[0]}` : i >= s.length ? "unexpected end" : `unexpected "${s[i]}"`);
  };
  const nonZero = (v: number) => (v === 0 ? fail("division by zero") : v);

  if (s.length === 0) fail("empty expression");
  const value = sum();
  if (i < s.length) fail(`unexpected "${s[i]}"`);
  if (!Number.isFinite(value)) fail("result is not a finite number");
  return value;
}

const FUNCTIONS: Record<string, (args: number[], fail: (what: string) => never) => number> = {
  abs: ([x]) => Math.abs(x!),
  min: (xs) => Math.min(...xs),
  max: (xs) => Math.max(...xs),
  sqrt: ([x], fail) => (x! < 0 ? fail("sqrt of a negative number") : Math.sqrt(x!)),
  pow: ([x, y, m], fail) => {
    if (m === undefined) return x! ** y!;
    if (![x, y, m].every(Number.isInteger) || m === 0) fail("pow(x, y, m) needs integers and m != 0");
    let r = 1n;
    let b = BigInt(x!) % BigInt(m);
    for (let e = BigInt(y!); e > 0n; e >>= 1n) {
      if (e & 1n) r = (r * b) % BigInt(m);
      b = (b * b) % BigInt(m);
    }
    return Number(r);
  },
  gcd: (xs) => xs.reduce(gcd),
  lcm: (xs) => xs.reduce((a, b) => (a === 0 || b === 0 ? 0 : Math.abs(a * b) / gcd(a, b))),
};

function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b) [a, b] = [b, a % b];
  return a;
}

/** Integers print as integers; other numbers with up to 12 significant digits. */
export function formatNumber(v: number): string {
  return Number.isInteger(v) && Math.abs(v) < 2 ** 53 ? String(v) : String(Number(v.toPrecision(12)));
}

export class CalculatorTool implements Tool {
  readonly name = "calculator";
  readonly stop: string[];
  readonly schema: OpenAIFunctionSchema = {
    type: "function",
    function: {
      name: "calculator",
      description:
        "Evaluates an arithmetic expression (+ - * / // % ** and abs, min, max, sqrt, gcd, lcm, pow).",
      parameters: {
        type: "object",
        properties: { expression: { type: "string", description: "For example (123 + 4) * 56" } },
        required: ["expression"],
      },
    },
  };
  private readonly open: string;
  private readonly close: string;
  private readonly maxChars: number;

  /** `options` may come straight from a YAML config (the trainer passes ToolSpec.args). */
  constructor(options: CalculatorOptions = {}) {
    this.open = options.open ?? "<calc>";
    this.close = options.close ?? "</calc>";
    this.maxChars = options.maxExpressionChars ?? 200;
    this.stop = [this.close];
  }

  /** The expression after the last opening marker of the round; none when the marker is missing. */
  parse(roundText: string): ToolCall | undefined {
    const at = roundText.lastIndexOf(this.open);
    if (at < 0) return undefined;
    return { name: this.name, arguments: { expression: roundText.slice(at + this.open.length) } };
  }

  async create(instanceId?: string): Promise<string> {
    // an evaluation needs no state: an instance is only an id
    return instanceId ?? newInstanceId(this.name);
  }

  async execute(_instanceId: string, call: ToolCall): Promise<ToolResult> {
    const expression = String(call.arguments.expression ?? "");
    const started = performance.now();
    let observation: string;
    let success = false;
    try {
      if (expression.length > this.maxChars)
        throw new CalculatorError(`expression longer than ${this.maxChars} characters`);
      observation = formatNumber(evaluate(expression));
      success = true;
    } catch (e) {
      observation = e instanceof CalculatorError ? `Error: ${e.message}` : `Error: ${String(e)}`;
    }
    return {
      observation,
      text: `${this.close}<output>${observation}</output>`,
      success,
      metrics: { execution_time: (performance.now() - started) / 1000, execution_pass: success ? 1 : 0 },
    };
  }

  async release(_instanceId: string): Promise<void> {}
}
