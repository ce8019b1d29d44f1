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
