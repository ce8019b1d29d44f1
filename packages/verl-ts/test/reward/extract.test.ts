import { extractBoxedAnswer, groundTruthAnswer } from "@torl-ts/verl";
import test from "ava";

test("takes the last \\boxed{} with nested braces", (t) => {
  t.is(extractBoxedAnswer("first \\boxed{1}, then \\boxed{\\frac{1}{\\sqrt{2}}}."), "\\frac{1}{\\sqrt{2}}");
  t.is(extractBoxedAnswer("$\\boxed{\\{1, \\{2\\}\\}}$"), "\\{1, \\{2\\}\\}");
  t.is(extractBoxedAnswer("\\boxed{\\boxed{12}}"), "12");
});

test("accepts \\boxed {, \\fbox{ and the brace-less \\boxed 5 form", (t) => {
  t.is(extractBoxedAnswer("so \\boxed {42}."), "42");
  t.is(extractBoxedAnswer("so \\fbox{42}."), "42");
  t.is(extractBoxedAnswer("so $\\boxed 7$."), "7");
});

test("no box, an empty box or an unclosed last box is no answer", (t) => {
  t.is(extractBoxedAnswer("The answer is 42."), null);
  t.is(extractBoxedAnswer("The answer is \\boxed{}."), null);
  t.is(extractBoxedAnswer("\\boxed{3} and then \\boxed{4"), null);
  t.is(extractBoxedAnswer("\\boxedx{3}"), null);
});

test("a boxed ground truth is unwrapped, a plain one kept", (t) => {
  t.is(groundTruthAnswer("\\boxed{5}"), "5");
  t.is(groundTruthAnswer(" 5 "), "5");
});

test("\\boxed named in prose after the answer is not the answer: the box before it counts", (t) => {
  t.is(extractBoxedAnswer("The answer is $\\boxed{5}$. (We use \\boxed to mark it.)"), "5");
  t.is(extractBoxedAnswer("So \\boxed{12}. Note: the \\boxed command only highlights it."), "12");
  t.is(extractBoxedAnswer("Hence $\\boxed{\\frac{3}{4}}$, put in \\boxed{} as asked."), "\\frac{3}{4}");
  t.is(extractBoxedAnswer("Answer: \\boxed{10}. Why \\boxed it? The format asks."), "10");
  // a mention alone is no answer
  t.is(extractBoxedAnswer("I will write the answer in \\boxed form: it is 5."), null);
  t.is(extractBoxedAnswer("Use \\boxed{} for the answer."), null);
});

test("the brace-less \\boxed X form: up to $ or the end of the line, trailing punctuation dropped", (t) => {
  t.is(extractBoxedAnswer("The final answer is \\boxed 42."), "42");
  t.is(extractBoxedAnswer("Therefore $\\boxed -3$."), "-3");
  t.is(extractBoxedAnswer("Therefore $\\boxed \\pi$."), "\\pi");
  t.is(extractBoxedAnswer("So $\\boxed A$ is the option."), "A");
  t.is(extractBoxedAnswer("So $\\boxed \\frac12$."), "\\frac12");
  t.is(extractBoxedAnswer("\\boxed{3} then \\boxed 4\nand more"), "4");
});

test("nested braces and escaped braces inside the box are kept whole", (t) => {
  t.is(
    extractBoxedAnswer("We get $\\boxed{\\left\\{ \\frac{1}{2}, \\frac{\\sqrt{3}}{2} \\right\\}}$."),
    "\\left\\{ \\frac{1}{2}, \\frac{\\sqrt{3}}{2} \\right\\}",
  );
  t.is(
    extractBoxedAnswer("$\\boxed{\\dfrac{\\sqrt{\\sqrt{16}}}{2}}$ and \\boxed{}"),
    "\\dfrac{\\sqrt{\\sqrt{16}}}{2}",
  );
  // an unclosed last box is still a cut-off answer, even after a complete one
  t.is(extractBoxedAnswer("\\boxed{3}, so \\boxed{\\frac{1}{2}"), null);
});
