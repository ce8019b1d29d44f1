// rolloutTrainingBatch: the one conversion from rollout samples to the actor's training batch.
import test from "ava";
import {
  DataProto,
  RolloutBatchError,
  responseOffset,
  rolloutDataProto,
  rolloutTrainingBatch,
  type TirSample,
} from "../../src/index.js";

const PAD = 0;

/** A sample with prompt ids, response ids and the response tokens that came from the tool. */
function sample(index: number, prompt: number[], response: number[], toolTokens: number[] = []): TirSample {
  const calls = toolTokens.length
    ? [
        {
          call: { name: "python", arguments: { code: "print(1)" } },
          observation: `obs${index}`,
          success: index % 2 === 0,
          textRange: [0, 1] as [number, number],
          latencyMs: 1,
        },
      ]
    : [];
  const passes = calls.filter((c) => c.success).length;
  return {
    index,
    promptIds: prompt,
    responseIds: response,
    responseMask: new Uint8Array(response.length).fill(1),
    toolOutputMask: Uint8Array.from(response, (_, i) => (toolTokens.includes(i) ? 0 : 1)),
    text: `text${index}`,
    finishReason: index === 1 ? "length" : "stop",
    stopReason: null,
    numToolCalls: calls.length,
    numToolPasses: passes,
    executionPasses: passes === calls.length ? 1 : 0,
    numRounds: 1 + calls.length,
    calls,
  };
}

const rows = (data: ArrayLike<number>, width: number) =>
  Array.from({ length: data.length / width }, (_, b) => Array.from(data).slice(b * width, (b + 1) * width));

test("a rollout becomes the training batch: ids, masks with tool output masked, position ids, dtypes, offset", (t) => {
  // Given out of order: the batch is in sample index order.
  const samples = [
    sample(1, [7, 8, 9], [21, 22, 23, 24]),
    sample(0, [5, 6], [11, 12, 13], [1]), // token 1 of the response is tool output
  ];
  const batch = rolloutTrainingBatch(samples, { padTokenId: PAD, promptLength: 4, responseLength: 5 });
  t.is(batch.length, 2);
  t.is(responseOffset(batch), 4, "the response starts at column P of input_ids");
  t.deepEqual(rows(batch.tensor("input_ids").data, 9), [
    [PAD, PAD, 5, 6, 11, 12, 13, PAD, PAD],
    [PAD, 7, 8, 9, 21, 22, 23, 24, PAD],
  ]);
  t.deepEqual(rows(batch.tensor("attention_mask").data, 9), [
    [0, 0, 1, 1, 1, 1, 1, 0, 0],
    [0, 1, 1, 1, 1, 1, 1, 1, 0],
  ]);
  t.deepEqual(rows(batch.tensor("position_ids").data, 9), [
    [0, 0, 0, 1, 2, 3, 4, 5, 6],
    [0, 0, 1, 2, 3, 4, 5, 6, 7],
  ]);
  t.deepEqual(rows(batch.tensor("responses").data, 5), [
    [11, 12, 13, PAD, PAD],
    [21, 22, 23, 24, PAD],
  ]);
  t.deepEqual(rows(batch.tensor("response_mask").data, 5), [
    [1, 1, 1, 0, 0],
    [1, 1, 1, 1, 0],
  ]);
  t.deepEqual(rows(batch.tensor("loss_mask").data, 5), [
    [1, 0, 1, 0, 0],
    [1, 1, 1, 1, 0],
  ]);
  const dtypes = Object.fromEntries(
    Object.entries(batch.batch).map(([k, v]) => [k, v.data.constructor.name]),
  );
  t.deepEqual(dtypes, {
    prompts: "Int32Array",
    responses: "Int32Array",
    input_ids: "Int32Array",
    attention_mask: "Uint8Array",
    position_ids: "Int32Array",
    response_mask: "Uint8Array",
    tool_output_mask: "Uint8Array",
    loss_mask: "Uint8Array",
    execution_passes: "Float32Array",
    num_tool_calls: "Int32Array",
    num_tool_passes: "Int32Array",
  });
  t.deepEqual(Array.from(batch.tensor("num_tool_calls").data), [1, 0]);
  t.deepEqual(Array.from(batch.tensor("num_tool_passes").data), [1, 0]);
  t.deepEqual(batch.nonTensorBatch.response_text, ["text0", "text1"]);
  t.deepEqual(batch.nonTensorBatch.finish_reason, ["stop", "length"]);
  t.deepEqual(batch.nonTensorBatch.tool_observations, [["obs0"], []]);
  t.deepEqual(batch.metaInfo, {}, "no metaInfo: ranks' batches concatenate cleanly");
});

test("maskToolOutput false trains on tool output; rolloutDataProto adds the rollout metrics", (t) => {
  const samples = [sample(0, [5], [11, 12], [0, 1]), sample(1, [6], [13])];
  const unmasked = rolloutTrainingBatch(samples, { padTokenId: PAD, maskToolOutput: false });
  t.deepEqual(Array.from(unmasked.tensor("loss_mask").data), [1, 1, 1, 0]);
  t.deepEqual(Array.from(unmasked.tensor("tool_output_mask").data), [0, 0, 1, 1]);
  const withMetrics = rolloutDataProto(samples, { padTokenId: PAD });
  t.deepEqual(Array.from(withMetrics.tensor("loss_mask").data), [0, 0, 1, 0]);
  t.is((withMetrics.metaInfo.rollout_metrics as Record<string, number>)["tool/code_ratio"], 0.5);
});

test("responseOffset refuses a batch that does not locate its responses", (t) => {
  const ids = DataProto.fromDict({ input_ids: { data: new Int32Array(6), shape: [2, 3] } });
  t.throws(() => responseOffset(ids), { instanceOf: RolloutBatchError, message: /responses/ });
  const wide = DataProto.fromDict({
    input_ids: { data: new Int32Array(6), shape: [2, 3] },
    responses: { data: new Int32Array(8), shape: [2, 4] },
  });
  t.throws(() => responseOffset(wide), { instanceOf: RolloutBatchError, message: /wider/ });
});
