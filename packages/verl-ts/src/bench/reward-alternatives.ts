/**
 * Alternative scalar stages, kept for `pnpm torl bench reward --alternatives` so the choice of
 * machinery stays measured rather than asserted. Each plugs into the same parser and structure rules
 * (extraction, lists, intervals, ...) and replaces only the numeric identity test for scalars:
 *  - mathjs: `evaluate` for constant expressions, `simplify(a - b) == 0` for symbolic ones;
 *  - sympy: `simplify(a - b) == 0` in one warm python3 process (2 s alarm per pair).
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { isModuleNotFound, OptionalDependencyMissingError } from "@torl-ts/core";
import type { ScalarStage } from "../reward/equivalence.js";
import type { MathNode } from "../reward/latex.js";

type Dialect = "mathjs" | "sympy";

/** Thrown for a node the target syntax cannot express (the pair then counts as unequal). */
class Unsupported extends Error {}

function symName(name: string): string {
  const clean = name.replace(/\\/g, "").replace(/[^a-zA-Z0-9_]/g, "_");
  return /^[a-zA-Z]/.test(clean) ? `v_${clean}` : `v_${clean}`;
}

/** Infix text of a scalar node in mathjs or sympy syntax. */
export function nodeToInfix(n: MathNode, d: Dialect): string {
  const r = (x: MathNode) => nodeToInfix(x, d);
  switch (n.k) {
    case "num":
      return n.v.d === 1n ? `(${n.v.n})` : `(${n.v.n}/${n.v.d})`;
    case "sym":
      return symName(n.name);
    case "const":
      if (n.name === "pi") return "pi";
      if (n.name === "e") return d === "sympy" ? "E" : "e";
      if (n.name === "i") return d === "sympy" ? "I" : "i";
      return d === "sympy" ? "oo" : "Infinity";
    case "add":
      return `(${r(n.a)}+${r(n.b)})`;
    case "sub":
      return `(${r(n.a)}-${r(n.b)})`;
    case "mul":
      return `(${r(n.a)}*${r(n.b)})`;
    case "div":
      return `(${r(n.a)}/${r(n.b)})`;
    case "pow":
      return `(${r(n.a)})${d === "sympy" ? "**" : "^"}(${r(n.b)})`;
    case "neg":
      return `(-${r(n.a)})`;
    case "group":
      if (n.items.length === 1) return r(n.items[0]!);
      throw new Unsupported("group");
    case "fn": {
      const args = n.args.map(r);
      const map: Record<string, [string, string]> = {
        sqrt: ["sqrt", "sqrt"],
        root: ["nthRoot", "root"],
        ln: ["log", "log"],
        log: ["log", "log"],
        logb: ["log", "log"],
        fact: ["factorial", "factorial"],
        binom: ["combinations", "binomial"],
        abs: ["abs", "Abs"],
        arcsin: ["asin", "asin"],
        arccos: ["acos", "acos"],
        arctan: ["atan", "atan"],
        floor: ["floor", "floor"],
        ceil: ["ceil", "ceiling"],
      };
      const name = map[n.name]?.[d === "mathjs" ? 0 : 1] ?? n.name;
      if (!/^(?:[a-zA-Z]+)$/.test(name)) throw new Unsupported(n.name);
      return `${name}(${args.join(",")})`;
    }
    default:
      throw new Unsupported(n.k);
  }
}

/** The mathjs stage (loaded lazily: mathjs takes ~0.3 s to import). */
export async function mathjsScalarStage(): Promise<ScalarStage> {
  const math = await import("mathjs").catch((cause: unknown) => {
    if (isModuleNotFound(cause))
      throw new OptionalDependencyMissingError(
        "mathjs",
        "the mathjs comparison (bench reward --alternatives)",
        { cause },
      );
    throw cause;
  });
  return (a, b) => {
    let ea: string;
    let eb: string;
    try {
      ea = nodeToInfix(a, "mathjs");
      eb = nodeToInfix(b, "mathjs");
    } catch {
      return false;
    }
    try {
      const free = /v_[a-zA-Z0-9_]+/.test(ea + eb);
      if (!free) {
        const va = math.complex(math.evaluate(ea) as never);
        const vb = math.complex(math.evaluate(eb) as never);
        const diff = math.abs(math.subtract(va, vb) as never) as unknown as number;
        const scale = Math.max(1, math.abs(va) as unknown as number, math.abs(vb) as unknown as number);
        return diff <= 1e-9 * scale;
      }
      return math.simplify(`(${ea})-(${eb})`).toString() === "0";
    } catch {
      return false;
    }
  };
}

const SYMPY_SERVER = `
import sys, json, time, signal
import sympy
from sympy import sympify, simplify, nsimplify
class Timeout(Exception): pass
def on_alarm(*_): raise Timeout()
signal.signal(signal.SIGALRM, on_alarm)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    t0 = time.perf_counter()
    eq = False
    try:
        signal.alarm(2)
        d = simplify(sympify(req["a"]) - sympify(req["b"]))
        eq = bool(d == 0)
    except Exception:
        eq = False
    finally:
        signal.alarm(0)
    print(json.dumps({"id": req["id"], "eq": eq, "ms": (time.perf_counter() - t0) * 1000}), flush=True)
`;

/** A warm sympy process answering simplify(a - b) == 0 questions. */
export class SympyOracle {
  private proc = spawn("python3", ["-c", SYMPY_SERVER], { stdio: ["pipe", "pipe", "inherit"] });
  private waiting = new Map<number, (r: { eq: boolean; ms: number }) => void>();
  private nextId = 0;
  readonly ready: Promise<void>;
  /** Seconds spent inside sympy (sum over calls). */
  sympySeconds = 0;

  constructor() {
    const rl = createInterface({ input: this.proc.stdout! });
    let onReady: () => void;
    this.ready = new Promise((r) => {
      onReady = r;
    });
    rl.on("line", (line) => {
      const m = JSON.parse(line) as { ready?: boolean; id: number; eq: boolean; ms: number };
      if (m.ready) return onReady();
      this.sympySeconds += m.ms / 1000;
      this.waiting.get(m.id)?.(m);
      this.waiting.delete(m.id);
    });
  }

  ask(a: string, b: string): Promise<{ eq: boolean; ms: number }> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.proc.stdin!.write(`${JSON.stringify({ id, a, b })}\n`);
    });
  }

  close(): void {
    this.proc.stdin!.end();
    this.proc.kill();
  }
}

/**
 * Runs `verdict(stage)` with a sympy-backed stage. The comparator is synchronous, so this iterates:
 * unknown pairs get a provisional `false` and are recorded, sympy answers them, and the pass repeats
 * until no new pairs appear (two or three passes).
 */
export async function withSympyStage<T>(
  oracle: SympyOracle,
  verdicts: (stage: ScalarStage) => T,
): Promise<{ result: T; pairs: number }> {
  const known = new Map<string, boolean>();
  let last: T | undefined;
  for (let pass = 0; pass < 6; pass++) {
    const missing = new Map<string, [string, string]>();
    const stage: ScalarStage = (a, b) => {
      let ea: string;
      let eb: string;
      try {
        ea = nodeToInfix(a, "sympy");
        eb = nodeToInfix(b, "sympy");
      } catch {
        return false;
      }
      const key = `${ea}\u0000${eb}`;
      const v = known.get(key);
      if (v === undefined) missing.set(key, [ea, eb]);
      return v ?? false;
    };
    const result = verdicts(stage);
    last = result;
    if (missing.size === 0) return { result, pairs: known.size };
    await Promise.all(
      [...missing].map(async ([key, [ea, eb]]) => {
        known.set(key, (await oracle.ask(ea, eb)).eq);
      }),
    );
  }
  return { result: last as T, pairs: known.size };
}
