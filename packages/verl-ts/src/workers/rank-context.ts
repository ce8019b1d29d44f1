/** A rank's place in its worker group, and the collective calls made through it. */
import { type CollectiveArray, collective } from "@torl-ts/actors";

/** Where a rank's collective calls go. */
export interface RankContext {
  rank: number;
  worldSize: number;
  /** The collective group (needed when worldSize > 1). */
  group?: string;
}

export async function allReduceSum(ctx: RankContext, arr: Float64Array | Float32Array): Promise<void> {
  if (ctx.worldSize > 1) await collective.allReduce(arr as CollectiveArray, "sum", ctx.group!);
}
