import { extractBoxedAnswer, groundTruthAnswer, isEquivalentAnswer, loadRewardCorpus } from "@torl-ts/verl";
import test from "ava";

const corpus = loadRewardCorpus();

test("the labeled corpus has >= 200 pairs and every category has equal and unequal cases", (t) => {
  t.true(corpus.length >= 200);
  const seen = new Map<string, Set<boolean>>();
  for (const p of corpus) seen.set(p.category, (seen.get(p.category) ?? new Set()).add(p.equal));
  t.true(seen.size >= 17);
  for (const [cat, labels] of seen) t.deepEqual([...labels].sort(), [false, true], cat);
});

test("every corpus pair gets its label, in both directions", (t) => {
  const wrong: string[] = [];
  for (const p of corpus) {
    const given = extractBoxedAnswer(p.solution);
    const truth = groundTruthAnswer(p.ground_truth);
    const forward = given !== null && isEquivalentAnswer(given, truth);
    if (forward !== p.equal) wrong.push(`${p.category}: ${given} vs ${truth}`);
    if (given !== null && isEquivalentAnswer(truth, given) !== p.equal) {
      wrong.push(`${p.category} (reversed): ${truth} vs ${given}`);
    }
  }
  t.deepEqual(wrong, []);
});

test("wrong answers stay wrong: interval ends, order of tuples, near-miss decimals", (t) => {
  t.false(isEquivalentAnswer("[3,4]", "(3,4]"));
  t.false(isEquivalentAnswer("(3,4)", "(3,4]"));
  t.false(isEquivalentAnswer("(2,1)", "(1,2)"));
  t.false(isEquivalentAnswer("0.333", "\\frac13"));
  t.false(isEquivalentAnswer("1.414", "\\sqrt2"));
  t.false(isEquivalentAnswer("x", "y"));
  t.false(isEquivalentAnswer("", "5"));
});

test("a row vector is not the column vector with its entries, in any bracket and length; a tuple matches either", (t) => {
  const matrix = (env: string, rows: string[][]) =>
    `\\begin{${env}}${env === "array" ? `{${"c".repeat(rows[0]!.length)}}` : ""} ${rows.map((r) => r.join(" & ")).join(" \\\\ ")} \\end{${env}}`;
  const wrong: string[] = [];
  const check = (a: string, b: string, want: boolean) => {
    for (const [x, y] of [
      [a, b],
      [b, a],
    ] as const)
      if (isEquivalentAnswer(x, y) !== want) wrong.push(`${x} vs ${y}: want ${want}`);
  };
  const envs = ["pmatrix", "bmatrix", "vmatrix", "Bmatrix", "matrix", "smallmatrix", "array"];
  for (let n = 2; n <= 6; n++) {
    const entries = Array.from({ length: n }, (_, i) => String(i * 3 - 4));
    const halves = entries.map((e) => `\\frac{${2 * Number(e)}}{2}`);
    for (const [i, env] of envs.entries()) {
      const other = envs[(i + 1) % envs.length]!;
      const row = matrix(env, [entries]);
      const column = matrix(
        env,
        entries.map((e) => [e]),
      );
      check(row, column, false);
      check(row, matrix(other, [halves]), true);
      check(
        column,
        matrix(
          other,
          halves.map((e) => [e]),
        ),
        true,
      );
      check(
        row,
        matrix(
          other,
          halves.map((e) => [e]),
        ),
        false,
      );
      check(`${row}^T`, column, true);
      check(`${column}^{\\top}`, row, true);
      check(`${row}^{T}`, row, false);
      // a tuple names no orientation (as before): either vector, in order
      check(`(${entries.join(", ")})`, row, true);
      check(`(${entries.join(", ")})`, column, true);
      check(`(${[...entries].reverse().join(", ")})`, column, false);
      check(`(${entries.join(", ")})^T`, column, true);
      check(`(${entries.join(", ")})^T`, row, false);
    }
  }
  // other shapes: told apart as before; a transpose is read as one
  const m23 = matrix("pmatrix", [
    ["1", "2", "3"],
    ["4", "5", "6"],
  ]);
  const m32 = matrix("bmatrix", [
    ["1", "4"],
    ["2", "5"],
    ["3", "6"],
  ]);
  check(m23, m32, false);
  check(`${m23}^T`, m32, true);
  check(`${m32}^\\intercal`, m23, true);
  check(m23, "(1, 2, 3, 4, 5, 6)", false);
  check(matrix("pmatrix", [["1", "2"], ["3"]]), matrix("pmatrix", [["1"], ["2", "3"]]), false);
  check(matrix("pmatrix", [["5"]]), "5", true);
  check("x^T", "x^T", true);
  t.deepEqual(wrong, []);
});

test("pathological answers return a verdict instead of stalling", (t) => {
  const tower = "9^{9^{9^{9^{9}}}}";
  t.false(isEquivalentAnswer(tower, "1"));
  t.true(isEquivalentAnswer(tower, tower));
  t.false(isEquivalentAnswer("100000!", "5"));
  t.false(isEquivalentAnswer("(x+1)^{100000}", "x"));
  t.false(isEquivalentAnswer(`${"(".repeat(5000)}1${")".repeat(5000)}`, "2"));
  t.false(isEquivalentAnswer("1+".repeat(20000) + "1", "3"));
  t.false(isEquivalentAnswer(Array.from({ length: 3000 }, (_, i) => i).join(","), "1"));
  t.false(isEquivalentAnswer("\\frac{".repeat(3000) + "1" + "}{2}".repeat(3000), "1"));
  t.false(isEquivalentAnswer("\\sqrt{".repeat(2000) + "2" + "}".repeat(2000), "x"));
  t.false(isEquivalentAnswer("10^{10^{10}} - 10^{10^{10}} + 1", "2"));
});

test("hedged answers get no credit: several options, several values, a bare unknown", (t) => {
  t.false(isEquivalentAnswer("(C) and (D)", "C"));
  t.false(isEquivalentAnswer("(A)(B)(C)(D)(E)", "C"));
  t.true(isEquivalentAnswer("(C) 12", "C"));
  t.false(isEquivalentAnswer("5 \\text{ or } 6", "5"));
  t.false(isEquivalentAnswer("\\pm 5", "5"));
  t.false(isEquivalentAnswer("1, 2, 3, 4, 5, 6", "5"));
  t.false(isEquivalentAnswer("x", "x=5"));
  t.false(isEquivalentAnswer("\\frac{0}{0}", "1"));
  t.false(isEquivalentAnswer("5=5", "5"));
  t.true(isEquivalentAnswer("5 = x", "5"));
});

test("numeric tolerance is relative: tiny values are not zero, rounding noise is", (t) => {
  t.false(isEquivalentAnswer("\\pi \\cdot 10^{-10}", "0"));
  t.true(isEquivalentAnswer("\\sin \\pi", "0"));
  t.true(isEquivalentAnswer("\\cos\\frac{\\pi}{3}", "\\frac12"));
  t.false(isEquivalentAnswer("10^{20}+1", "10^{20}"));
  t.true(isEquivalentAnswer("1.4142135623730951", "\\sqrt2"));
});

test("random LaTeX fragments never throw and the verdict is symmetric", (t) => {
  const pieces = [
    "\\frac",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "\\{",
    "\\}",
    ",",
    "x",
    "2",
    "3.5",
    "^",
    "_",
    "\\sqrt",
    "\\pm",
    "=",
    "<",
    "\\le",
    "\\cup",
    "\\infty",
    "-",
    "+",
    "\\pi",
    "i",
    "\\text{cm}",
    "\\%",
    "\\$",
    "&",
    "\\\\",
    "\\begin{pmatrix}",
    "\\end{pmatrix}",
    "|",
    "!",
    "\\log",
    "\\binom",
    "\\left(",
    "\\right]",
    " ",
    "(C)",
    "0.",
    "\\overline{3}",
    "\\mathbb{R}",
    "^\\circ",
    "\\sin",
    "'",
    ":",
    "\\langle",
    "\\rangle",
    "^T",
  ];
  const answers = corpus.map((p) => extractBoxedAnswer(p.solution) ?? "1");
  let seed = 12345;
  const rnd = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x80000000;
  };
  const asymmetric: string[] = [];
  for (let k = 0; k < 3000; k++) {
    let s = "";
    for (let j = 1 + Math.floor(rnd() * 12); j > 0; j--) s += pieces[Math.floor(rnd() * pieces.length)];
    const other = rnd() < 0.5 ? answers[Math.floor(rnd() * answers.length)]! : s;
    if (isEquivalentAnswer(s, other) !== isEquivalentAnswer(other, s)) asymmetric.push(`${s} | ${other}`);
  }
  t.deepEqual(asymmetric, []);
});

test("a set written with a repeated element is the same set; tuples and bare lists keep their repeats", (t) => {
  t.true(isEquivalentAnswer("\\{1, 2, 2, 3\\}", "\\{1, 2, 3\\}"));
  t.true(isEquivalentAnswer("\\{3, 3\\}", "3"));
  t.true(isEquivalentAnswer("\\{\\frac12, 0.5, 1\\}", "\\{1, \\frac12\\}"));
  t.true(isEquivalentAnswer("\\{1, 1, 2\\}", "1, 2"));
  t.false(isEquivalentAnswer("\\{1, 2, 2\\}", "\\{1, 2, 3\\}"));
  t.false(isEquivalentAnswer("(1, 2, 2)", "(1, 2)"));
  t.false(isEquivalentAnswer("1, 2, 2", "1, 2"));
});

test("decimal rule: a terminating exact value matches only its own decimal", (t) => {
  t.true(isEquivalentAnswer("1.250", "\\frac54"));
  t.false(isEquivalentAnswer("1.2", "\\frac54"));
  t.false(isEquivalentAnswer("1.2499999999", "\\frac54"));
  t.false(isEquivalentAnswer("1.2500000001", "\\frac54"));
  t.true(isEquivalentAnswer("0.5", "\\cos\\frac{\\pi}{3}"));
  t.false(isEquivalentAnswer("0.49999999", "\\cos\\frac{\\pi}{3}"));
  t.false(isEquivalentAnswer("0.50000001", "\\sin\\frac{\\pi}{6}"));
  t.true(isEquivalentAnswer("2.0", "\\sqrt{2}\\cdot\\sqrt{2}"));
});

test("decimal rule: 8 significant digits at least, rounded or truncated at the decimal's own places", (t) => {
  // the 8-digit edge, for a rational and an irrational
  t.true(isEquivalentAnswer("0.33333333", "\\frac13"));
  t.false(isEquivalentAnswer("0.3333333", "\\frac13"));
  t.true(isEquivalentAnswer("1.4142136", "\\sqrt2"));
  t.false(isEquivalentAnswer("1.414214", "\\sqrt2"));
  // leading zeros are not significant
  t.false(isEquivalentAnswer("0.00033333", "\\frac{1}{3000}"));
  t.true(isEquivalentAnswer("0.00033333333", "\\frac{1}{3000}"));
  // rounded and truncated pass, any other last digit fails
  t.true(isEquivalentAnswer("0.66666667", "\\frac23"));
  t.true(isEquivalentAnswer("0.66666666", "\\frac23"));
  t.false(isEquivalentAnswer("0.66666668", "\\frac23"));
  t.false(isEquivalentAnswer("0.33333334", "\\frac13"));
  t.true(isEquivalentAnswer("3.1415926", "\\pi"));
  t.true(isEquivalentAnswer("3.1415927", "\\pi"));
  t.false(isEquivalentAnswer("3.1415928", "\\pi"));
  // sign must agree; a negative value is rounded like its magnitude
  t.true(isEquivalentAnswer("-0.42857143", "-\\frac37"));
  t.false(isEquivalentAnswer("-0.33333333", "\\frac13"));
  t.false(isEquivalentAnswer("0.70710678", "-\\frac{\\sqrt2}{2}"));
});

test("decimal rule: past 12 significant digits only 12 are checked (printed doubles)", (t) => {
  t.true(isEquivalentAnswer("0.3333333333333333", "\\frac13"));
  t.true(isEquivalentAnswer("1.4142135623730951", "\\sqrt2"));
  t.true(isEquivalentAnswer("0.14285714285714285", "\\frac17"));
  t.true(isEquivalentAnswer("3.14159265358979323846264", "\\pi"));
  // wrong at the 12th digit
  t.false(isEquivalentAnswer("3.14159265360979", "\\pi"));
  t.false(isEquivalentAnswer("0.33333333343333", "\\frac13"));
});

test("decimal rule: only a lone decimal numeral is an approximation; decimals never approximate decimals", (t) => {
  t.false(isEquivalentAnswer("0.33333333 \\cdot 3", "1"));
  t.false(isEquivalentAnswer("3.3333333 \\times 10^{-1}", "\\frac13"));
  t.true(isEquivalentAnswer("0.5\\pi", "\\frac{\\pi}{2}"));
  t.false(isEquivalentAnswer("3.14159265", "3.1415926535"));
  t.true(isEquivalentAnswer("(0.33333333, 2)", "(\\frac13, 2)"));
  t.true(isEquivalentAnswer("[1.4142136, \\infty)", "[\\sqrt2, \\infty)"));
  t.false(isEquivalentAnswer("0.70710678", "\\frac{\\sqrt2}{2} i"));
});

test("decimal rule: a percentage on one side is read with and without its %", (t) => {
  t.true(isEquivalentAnswer("33.333333\\%", "\\frac13"));
  t.false(isEquivalentAnswer("33.33\\%", "\\frac13"));
  t.true(isEquivalentAnswer("0.33333333", "\\frac{100}{3}\\%"));
  t.true(isEquivalentAnswer("14.142136\\%", "\\frac{\\sqrt2}{10}"));
  t.true(isEquivalentAnswer("50\\%", "0.5"));
  t.true(isEquivalentAnswer(".5\\%", "\\frac{1}{200}"));
});
