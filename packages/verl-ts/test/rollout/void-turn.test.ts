/** SimpleTIR's void-turn filter: which responses have a void turn, and what the filter does to the batch. */
import test from "ava";
import { DataProto } from "../../src/protocol/data-proto.js";
import { applyVoidTurnFilter, hasVoidTurn, lastTurn } from "../../src/rollout/void-turn.js";

const code = "Let me compute.\n```python\nprint(6 * 7)\n```\n";
const obs = "```output\n42\n```\n";

test("only the last turn can be void: no complete code block, no tool call and no boxed answer", (t) => {
  // answered after the observation
  t.false(hasVoidTurn(`${code}${obs}So the answer is \\boxed{42}.`));
  // a new complete code block (a call beyond the budget) is not void
  t.false(hasVoidTurn(`${code}${obs}Check:\n\`\`\`python\nprint(42)\n\`\`\`\n`));
  // the agent loop's tool call
  t.false(hasVoidTurn('<tool_call>{"name": "python"}</tool_call>'));
  // trailing off after the observation, or a code block cut by the length limit
  t.true(hasVoidTurn(`${code}${obs}So the answer is`));
  t.true(hasVoidTurn(`${code}${obs}Next:\n\`\`\`python\nprint(4`));
  // a single turn with no answer
  t.true(hasVoidTurn("I think it is 42."));
  // the answer before the observation does not count for the last turn
  t.true(hasVoidTurn(`\\boxed{41}\n${code}${obs}hmm`));
  t.is(lastTurn(`${code}${obs}tail`), "\ntail");
});

test("applyVoidTurnFilter zeroes the loss mask of void responses only and counts them", (t) => {
  const texts = [`${code}${obs}\\boxed{42}`, "no answer", `${code}${obs}`, "\\boxed{1}"];
  const batch = DataProto.fromDict(
    { loss_mask: { data: new Uint8Array(4 * 3).fill(1), shape: [4, 3] } },
    { response_text: texts },
  );
  const m = applyVoidTurnFilter(batch);
  t.deepEqual(m, { "train/void_turn_trajectories": 2, "train/void_turn_fraction": 0.5 });
  t.deepEqual([...batch.tensor("loss_mask").data], [1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
});
