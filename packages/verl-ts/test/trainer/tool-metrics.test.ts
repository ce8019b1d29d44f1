import { computeToolMetrics, DataProto } from "@torl-ts/verl";
import test from "ava";

/** A batch of responses with their tool calls, passing calls and correctness. */
function batch(calls: number[], passes: number[], acc?: boolean[]): DataProto {
  const B = calls.length;
  return DataProto.fromDict(
    {
      num_tool_calls: { data: Int32Array.from(calls), shape: [B] },
      num_tool_passes: { data: Int32Array.from(passes), shape: [B] },
    },
    acc ? { acc } : {},
  );
}

test("pass ratio split by correctness (Figure 4c): calls of right responses vs wrong ones", (t) => {
  // right: 2 calls, 2 passed + 1 call, 0 passed -> 2/3; wrong: 2 calls, 1 passed + (no call) -> 1/2
  const m = computeToolMetrics(batch([2, 1, 2, 0], [2, 0, 1, 0], [true, true, false, false]));
  t.is(m["tool/pass_ratio"], 3 / 5);
  t.is(m["tool/pass_ratio_correct"], 2 / 3);
  t.is(m["tool/pass_ratio_wrong"], 1 / 2);
  const v = computeToolMetrics(batch([1, 1], [1, 0], [true, false]), "val/tool");
  t.is(v["val/tool/pass_ratio_correct"], 1);
  t.is(v["val/tool/pass_ratio_wrong"], 0);
});

test("a kind without any call has no pass ratio (absent, not 0); no acc column, no split", (t) => {
  const m = computeToolMetrics(batch([0, 3], [0, 1], [true, false]));
  t.false("tool/pass_ratio_correct" in m, "no right response called the tool");
  t.is(m["tool/pass_ratio_wrong"], 1 / 3);
  const none = computeToolMetrics(batch([1], [1]));
  t.false("tool/pass_ratio_correct" in none);
  t.false("tool/pass_ratio_wrong" in none);
  t.is(none["tool/pass_ratio"], 1);
});
