/**
 * Global loss aggregation: the loss of a mini-batch is `aggLoss` of the whole global mini-batch (all
 * ranks' rows), not a mean of per-rank means. Every token gets a weight (token-mean: 1 / global loss
 * tokens; seq-mean-token-sum: 1 / global rows; seq-mean-token-mean: 1 / (row tokens x global rows);
 * seq-mean-token-sum-norm: 1 / response width) and the rank's loss is the weighted sum of its tokens'
 * losses, so the summed gradients are exactly those of the global loss, whatever the number of ranks.
 */
import type { BatchTensor } from "../protocol/tensor.js";
import { WorkerStateError } from "./errors.js";
import { allReduceSum, type RankContext } from "./rank-context.js";

/** Weight of every token of a local mini-batch in the global loss (see the file comment). */
export function lossTokenWeights(
  mask: BatchTensor,
  mode: string,
  globalTokens: number,
  globalRows: number,
): Float32Array {
  const [B, R] = mask.shape as [number, number];
  const w = new Float32Array(B * R);
  for (let b = 0; b < B; b++) {
    let rowTok = 0;
    for (let t = 0; t < R; t++) rowTok += Number(mask.data[b * R + t]);
    let scale: number;
    switch (mode) {
      case "token-mean":
        scale = globalTokens > 0 ? 1 / globalTokens : 0;
        break;
      case "seq-mean-token-sum":
        scale = 1 / globalRows;
        break;
      case "seq-mean-token-mean":
        scale = rowTok > 0 ? 1 / (rowTok * globalRows) : 0;
        break;
      case "seq-mean-token-sum-norm":
        scale = 1 / R;
        break;
      default:
        throw new WorkerStateError(`unknown loss_agg_mode "${mode}"`);
    }
    for (let t = 0; t < R; t++) w[b * R + t] = Number(mask.data[b * R + t]) * scale;
  }
  return w;
}

/** Sum of a mask over all ranks (the global loss-token count of a mini-batch). */
export async function globalMaskSum(ctx: RankContext, mask: BatchTensor): Promise<number> {
  const den = new Float64Array(1);
  for (let i = 0; i < mask.data.length; i++) den[0]! += Number(mask.data[i]);
  await allReduceSum(ctx, den);
  return den[0]!;
}
