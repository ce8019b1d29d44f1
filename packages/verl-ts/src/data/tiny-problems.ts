/**
 * A seeded generator of arithmetic word problems: the tiny ToRL recipe's task, public so that a custom
 * algorithm can train on the same prompts (`generateProblems`, `trainTestSplit`; as dataset rows:
 * `tinyDataset` in tiny-dataset.ts).
 *
 * Half the kinds need exact multi-digit computation (products, modular powers, long sums, gcd/lcm,
 * digit sums of big powers): a tiny model cannot do them "in its head", Python can. The other half
 * are easy one-step facts a tiny model can learn to answer directly. That split is what lets tool use
 * pay off under RL, as in the paper.
 */

import { InputError } from "@torl-ts/core";
import { mulberry32 as seededRandom } from "../random.js";

export type ProblemKind =
  | "product"
  | "modpow"
  | "range_sum"
  | "gcd"
  | "lcm"
  | "square_sum"
  | "easy_add"
  | "easy_mul"
  | "easy_sub"
  | "easy_max";

export interface Problem {
  /** Stable id: `<split>-<index>`. */
  id: string;
  kind: ProblemKind;
  /** True for kinds that need exact computation. */
  hard: boolean;
  question: string;
  /** The exact answer as a decimal integer string. */
  answer: string;
  /** A short Python program that prints the answer. */
  code: string;
  /** A one-line statement of the computation in words/symbols (used by the plain-reasoning style). */
  work: string;
}

/** Bad options for the tiny recipe's problems or dataset (names the option and the value). */
export class TinyDatasetError extends InputError {
  override name = "TinyDatasetError";
}

function intBetween(random: () => number, low: number, high: number): number {
  return low + Math.floor(random() * (high - low + 1));
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a < 0n ? -a : a;
}

function modPow(base: bigint, exponent: bigint, modulus: bigint): bigint {
  let result = 1n;
  base %= modulus;
  while (exponent > 0n) {
    if (exponent & 1n) result = (result * base) % modulus;
    base = (base * base) % modulus;
    exponent >>= 1n;
  }
  return result;
}

type Maker = (random: () => number) => Omit<Problem, "id" | "kind" | "hard">;

const makers: Record<ProblemKind, { hard: boolean; make: Maker }> = {
  product: {
    hard: true,
    make: (r) => {
      const a = intBetween(r, 101, 999);
      const b = intBetween(r, 11, 99);
      return {
        question: `What is ${a} times ${b}?`,
        answer: String(a * b),
        code: `print(${a}*${b})`,
        work: `${a}*${b}`,
      };
    },
  },
  modpow: {
    hard: true,
    make: (r) => {
      const a = intBetween(r, 2, 19);
      const e = intBetween(r, 20, 99);
      const m = intBetween(r, 7, 97);
      return {
        question: `What is the remainder when ${a}^${e} is divided by ${m}?`,
        answer: String(modPow(BigInt(a), BigInt(e), BigInt(m))),
        code: `print(pow(${a},${e},${m}))`,
        work: `${a}^${e} mod ${m}`,
      };
    },
  },
  range_sum: {
    hard: true,
    make: (r) => {
      const a = intBetween(r, 10, 99);
      const b = intBetween(r, 200, 999);
      return {
        question: `What is the sum of the integers from ${a} to ${b}?`,
        answer: String(((a + b) * (b - a + 1)) / 2),
        code: `print(sum(range(${a},${b + 1})))`,
        work: `${a}+...+${b}`,
      };
    },
  },
  gcd: {
    hard: true,
    make: (r) => {
      const g = intBetween(r, 2, 60);
      const a = g * intBetween(r, 11, 199);
      const b = g * intBetween(r, 11, 199);
      return {
        question: `What is the greatest common divisor of ${a} and ${b}?`,
        answer: String(gcd(BigInt(a), BigInt(b))),
        code: `import math\nprint(math.gcd(${a},${b}))`,
        work: `gcd(${a},${b})`,
      };
    },
  },
  lcm: {
    hard: true,
    make: (r) => {
      const a = intBetween(r, 12, 99);
      const b = intBetween(r, 12, 99);
      const value = (BigInt(a) * BigInt(b)) / gcd(BigInt(a), BigInt(b));
      return {
        question: `What is the least common multiple of ${a} and ${b}?`,
        answer: String(value),
        code: `import math\nprint(math.lcm(${a},${b}))`,
        work: `lcm(${a},${b})`,
      };
    },
  },
  square_sum: {
    hard: true,
    make: (r) => {
      const n = intBetween(r, 12, 60);
      return {
        question: `What is the sum of the squares of the integers from 1 to ${n}?`,
        answer: String((n * (n + 1) * (2 * n + 1)) / 6),
        code: `print(sum(k*k for k in range(1,${n + 1})))`,
        work: `1^2+...+${n}^2`,
      };
    },
  },
  easy_add: {
    hard: false,
    make: (r) => {
      const a = intBetween(r, 1, 9);
      const b = intBetween(r, 1, 9);
      return {
        question: `What is ${a} plus ${b}?`,
        answer: String(a + b),
        code: `print(${a}+${b})`,
        work: `${a}+${b}`,
      };
    },
  },
  easy_mul: {
    hard: false,
    make: (r) => {
      const a = intBetween(r, 2, 9);
      const b = intBetween(r, 2, 9);
      return {
        question: `What is ${a} times ${b}?`,
        answer: String(a * b),
        code: `print(${a}*${b})`,
        work: `${a}*${b}`,
      };
    },
  },
  easy_sub: {
    hard: false,
    make: (r) => {
      const a = intBetween(r, 10, 19);
      const b = intBetween(r, 1, 9);
      return {
        question: `What is ${a} minus ${b}?`,
        answer: String(a - b),
        code: `print(${a}-${b})`,
        work: `${a}-${b}`,
      };
    },
  },
  easy_max: {
    hard: false,
    make: (r) => {
      const a = intBetween(r, 10, 99);
      let b = intBetween(r, 10, 99);
      if (b === a) b = a + 1;
      return {
        question: `Which is larger, ${a} or ${b}?`,
        answer: String(Math.max(a, b)),
        code: `print(max(${a},${b}))`,
        work: `max(${a},${b})`,
      };
    },
  },
};

export const problemKinds = Object.keys(makers) as ProblemKind[];
export const hardKinds = problemKinds.filter((k) => makers[k].hard);
export const easyKinds = problemKinds.filter((k) => !makers[k].hard);

export interface ProblemSetOptions {
  count: number;
  seed: number;
  /** Fraction of hard problems, 0..1. */
  hardFraction?: number;
  /** Prefix of ids, e.g. "train" or "test". */
  split?: string;
  /** Questions to leave out (e.g. the held-out set's), so splits never overlap. */
  exclude?: ReadonlySet<string>;
}

/** Makes `count` distinct problems, deterministic for a seed. */
export function generateProblems(options: ProblemSetOptions): Problem[] {
  const { count, seed, hardFraction = 0.5, split = "p", exclude } = options;
  const random = seededRandom(seed);
  const seen = new Set<string>();
  const problems: Problem[] = [];
  let attempts = 0;
  while (problems.length < count) {
    if (++attempts > count * 200) {
      throw new TinyDatasetError(
        `generateProblems: could not make ${count} distinct problems (made ${problems.length}); ask for fewer or exclude fewer questions`,
      );
    }
    const pool = random() < hardFraction ? hardKinds : easyKinds;
    const kind = pool[Math.floor(random() * pool.length)]!;
    const made = makers[kind].make(random);
    if (seen.has(made.question) || exclude?.has(made.question)) continue;
    seen.add(made.question);
    problems.push({ id: `${split}-${problems.length}`, kind, hard: makers[kind].hard, ...made });
  }
  return problems;
}

/** The recipe's fixed split: a held-out test set and a disjoint train set. */
export function trainTestSplit(options: {
  trainCount: number;
  testCount: number;
  seed: number;
  hardFraction?: number;
}) {
  const test = generateProblems({
    count: options.testCount,
    seed: options.seed ^ 0x5eed,
    hardFraction: options.hardFraction,
    split: "test",
  });
  const exclude = new Set(test.map((p) => p.question));
  const train = generateProblems({
    count: options.trainCount,
    seed: options.seed,
    hardFraction: options.hardFraction,
    split: "train",
    exclude,
  });
  return { train, test };
}
