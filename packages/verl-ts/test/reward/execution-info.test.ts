// How a rollout's tool columns become the reward's ExecutionInfo, the same way for a single row
// and inside the reward manager.
import { computeMathScore, DataProto, executionInfoFromRollout, RewardManager } from "@torl-ts/verl";
import test from "ava";

test("a rollout row's tool columns become ExecutionInfo: calls decide hadCode, passes decide passed", (t) => {
  t.deepEqual(executionInfoFromRollout({ executionPasses: 1, numToolCalls: 0 }), {
    hadCode: false,
    passed: true,
  });
  t.deepEqual(executionInfoFromRollout({ executionPasses: 1, numToolCalls: 2 }), {
    hadCode: true,
    passed: true,
  });
  t.deepEqual(executionInfoFromRollout({ executionPasses: 0, numToolCalls: 1 }), {
    hadCode: true,
    passed: false,
  });
  // Without the call count a failed row still counts as code; a passing one cannot be told from "no code".
  t.deepEqual(executionInfoFromRollout({ executionPasses: 0 }), { hadCode: true, passed: false });
  t.deepEqual(executionInfoFromRollout({ executionPasses: 1 }), { hadCode: false, passed: true });
});

test("the reward manager builds ExecutionInfo from a batch exactly as executionInfoFromRollout does", async (t) => {
  const responses = ["\\boxed{4}", "\\boxed{4}", "\\boxed{5}", "no answer"];
  const passes = Float32Array.from([1, 0, 0, 1]);
  const calls = Int32Array.from([0, 1, 2, 1]);
  const data = DataProto.fromDict(
    {
      response_mask: { data: new Uint8Array(8).fill(1), shape: [4, 2] },
      execution_passes: { data: passes, shape: [4] },
      num_tool_calls: { data: calls, shape: [4] },
    },
    { response_text: responses, ground_truth: ["4", "4", "4", "4"] },
  );
  const options = { rewardType: "v2.wformat" as const, executionErrorPenalty: true };
  const manager = new RewardManager({ ...options, numThreads: 0 });
  const scored = (await manager.scoreDataProto(data)) as DataProto;
  const expected = responses.map(
    (r, i) =>
      computeMathScore(
        r,
        "4",
        options,
        executionInfoFromRollout({ executionPasses: passes[i]!, numToolCalls: calls[i]! }),
      ).score,
  );
  t.deepEqual(scored.nonTensorBatch.score, expected);
  t.deepEqual(expected, [1, 0.5, -1, -1], "the penalty hits failed code only");
  await manager.close();
});
