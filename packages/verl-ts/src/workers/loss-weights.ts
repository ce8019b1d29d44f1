/**
 * Global loss aggregation: the loss of a mini-batch is `aggLoss` of the whole global mini-batch (all
 * ranks' rows), not a mean of per-rank means. Every token gets its weight in the global loss
 * (`lossAggWeights`: e.g. token-mean 1 / global loss tokens) and the rank's loss is the weighted sum of its tokens'
 * losses, so the summed gradients are exactly those of the global loss, whatever the number of ranks.
 */
import { type LossAggMode, lossAggWeights } from "../algorithms/loss-aggregation.js";
import type { BatchTensor } from "../protocol/tensor.js";
import { allReduceSum, type RankContext } from "./rank-context.js";

/** Weight of every token of a local mini-batch in the global loss (see the file comment). */
export function lossTokenWeights(
  mask: BatchTensor,
  mode: LossAggMode,
  globalTokens: number,
  globalRows: number,
): Float32Array {
  return lossAggWeights(mask, mode, { tokens: globalTokens, rows: globalRows });
}

/** Sum of a mask over all ranks (the global loss-token count of a mini-batch). */
export async function globalMaskSum(ctx: RankContext, mask: BatchTensor): Promise<number> {
  const den = new Float64Array(1);
  for (let i = 0; i < mask.data.length; i++) den[0]! += Number(mask.data[i]);
  await allReduceSum(ctx, den);
  return den[0]!;
}
