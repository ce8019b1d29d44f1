/** The loss aggregation modes: one table read by the host sum, the tfjs sum and the trainer's token weights. */
import { readFileSync } from "node:fs";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { aggLoss, LOSS_AGG_MODES, lossAggWeights } from "../../src/algorithms/loss-aggregation.js";
import { aggLossTf } from "../../src/algorithms/tf-ops.js";

const B = 4;
const T = 5;
const loss = {
  data: Float32Array.from({ length: B * T }, (_, i) => Math.sin(i * 1.7) * 2 + 0.3),
  shape: [B, T],
};
// row 2 has no loss tokens; the others have 5, 3 and 1
const mask = {
  data: Uint8Array.from([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
  shape: [B, T],
};

const weightedSum = (w: Float32Array, rows = [0, B]) => {
  let s = 0;
  for (let i = rows[0]! * T; i < rows[1]! * T; i++) s += loss.data[i]! * w[i - rows[0]! * T]!;
  return s;
};

test("for every mode the host sum, the tfjs sum and the sum of the token weights agree", async (t) => {
  for (const mode of LOSS_AGG_MODES) {
    const host = aggLoss(loss, mask, mode);
    const viaWeights = weightedSum(lossAggWeights(mask, mode));
    const lt = tf.tensor2d(loss.data, [B, T]);
    const agg = aggLossTf(lt, { data: Float32Array.from(mask.data), shape: [B, T] }, mode);
    const viaTf = (await agg.data())[0]!;
    tf.dispose([lt, agg]);
    t.true(Math.abs(host - viaWeights) < 1e-6, `${mode}: host ${host}, weights ${viaWeights}`);
    t.true(Math.abs(host - viaTf) < 1e-6, `${mode}: host ${host}, tfjs ${viaTf}`);
  }
});

test("the weights of two ranks' halves, given the global counts, add up to the whole batch's loss", (t) => {
  const part = (rows: [number, number]) => ({
    data: mask.data.slice(rows[0] * T, rows[1] * T),
    shape: [rows[1] - rows[0], T],
  });
  const tokens = mask.data.reduce((a, v) => a + v, 0);
  for (const mode of LOSS_AGG_MODES) {
    const halves = (
      [
        [0, 2],
        [2, 4],
      ] as [number, number][]
    ).map((rows) => weightedSum(lossAggWeights(part(rows), mode, { tokens, rows: B }), rows));
    const whole = aggLoss(loss, mask, mode);
    t.true(Math.abs(halves[0]! + halves[1]! - whole) < 1e-6, `${mode}: ${halves} vs ${whole}`);
  }
});

test("the config's loss_agg_mode enum lists exactly the modes of the table", (t) => {
  const yaml = readFileSync(new URL("../../src/config/ppo-trainer.yaml", import.meta.url), "utf8");
  const line = /loss_agg_mode: \S+ # type: enum\(([^)]*)\)/.exec(yaml);
  t.truthy(line, "ppo-trainer.yaml declares loss_agg_mode as an enum");
  t.deepEqual(line![1]!.split(/,\s*/), [...LOSS_AGG_MODES]);
});
