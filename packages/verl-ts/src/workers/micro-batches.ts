/** How an update or a scoring pass cuts a rank's rows into mini-batches and micro-batches. */
import type { DataProto } from "../protocol/data-proto.js";
import { WorkerStateError } from "./errors.js";
import type { RankContext } from "./rank-context.js";
import { rowsOf } from "./rows.js";

/**
 * Rows per local mini-batch and per micro-batch for an update over `data` (checked: the global
 * mini-batch splits over the ranks and the rank's rows split into mini-batches).
 */
export function miniBatchPlan(
  ctx: RankContext,
  rows: number,
  globalMiniRows: number,
  microPerGpu: number | null | undefined,
  what: string,
): { localMini: number; micro: number } {
  const W = ctx.worldSize;
  if (globalMiniRows % W !== 0)
    throw new WorkerStateError(
      `${what}: a global mini-batch of ${globalMiniRows} rows does not split over ${W} ranks`,
    );
  const localMini = globalMiniRows / W;
  if (rows % localMini !== 0)
    throw new WorkerStateError(
      `${what}: rank ${ctx.rank} got ${rows} rows, not a multiple of its mini-batch (${localMini} rows = ${globalMiniRows} / ${W} ranks)`,
    );
  return { localMini, micro: microPerGpu ?? localMini };
}

/**
 * Rows per micro-batch on one worker: the `_per_gpu` setting, else veRL's deprecated global form divided
 * over the workers (at least 1), else null (not set).
 */
export function perWorkerRows(
  perGpu: number | null | undefined,
  global: number | null | undefined,
  worldSize: number,
): number | null {
  if (perGpu !== null && perGpu !== undefined) return perGpu;
  return global ? Math.max(1, Math.floor(global / worldSize)) : null;
}

/**
 * The micro-batches of one pass over `data`, as row indices. Fixed: `rows` rows each, in order.
 * Dynamic (`maxTokens` set: veRL's use_dynamic_bsz with *_max_token_len_per_gpu): rows sorted by
 * length, longest first, and packed while the micro-batch's tensor stays within maxTokens tokens
 * (rows x (longest prompt + longest response): our forward pads a micro-batch to that); a row longer
 * than the budget gets a micro-batch of its own. Losses are weighted globally (lossTokenWeights), so
 * the grouping changes no gradient, only memory and speed.
 */
export function microBatches(data: DataProto, rows: number, maxTokens?: number | null): number[][] {
  const B = data.length;
  if (!maxTokens) {
    const out: number[][] = [];
    for (let s = 0; s < B; s += rows)
      out.push(Array.from({ length: Math.min(rows, B - s) }, (_, i) => s + i));
    return out;
  }
  const attn = data.tensor("attention_mask");
  const R = data.tensor("responses").shape[1]!;
  const L = attn.shape[1]!;
  const P = L - R;
  const len = (b: number, from: number, to: number) => {
    let n = 0;
    for (let t = from; t < to; t++) n += Number(attn.data[b * L + t]);
    return n;
  };
  const prompt = Array.from({ length: B }, (_, b) => len(b, 0, P));
  const response = Array.from({ length: B }, (_, b) => len(b, P, L));
  const order = Array.from({ length: B }, (_, b) => b).sort(
    (x, y) => prompt[y]! + response[y]! - (prompt[x]! + response[x]!) || x - y,
  );
  const out: number[][] = [];
  let group: number[] = [];
  let pMax = 0;
  let rMax = 0;
  for (const b of order) {
    const p = Math.max(pMax, prompt[b]!);
    const r = Math.max(rMax, response[b]!, 1);
    if (group.length > 0 && (group.length + 1) * (p + r) > maxTokens) {
      out.push(group);
      group = [];
      pMax = 0;
      rMax = 0;
    }
    group.push(b);
    pMax = Math.max(pMax, prompt[b]!);
    rMax = Math.max(rMax, response[b]!, 1);
  }
  if (group.length) out.push(group);
  return out;
}

/**
 * Runs `score` on each micro-batch (row indices from microBatches) and assembles its outputs, host
 * arrays [rows, R], into arrays [data.length, R] in the data's row order.
 */
export async function byMicroBatch(
  data: DataProto,
  groups: number[][],
  R: number,
  score: (part: DataProto) => Promise<Float32Array[]>,
): Promise<Float32Array[]> {
  let outs: Float32Array[] | undefined;
  for (const g of groups) {
    const res = await score(rowsOf(data, g));
    outs ??= res.map(() => new Float32Array(data.length * R));
    for (const [k, r] of res.entries()) placeRows(outs[k]!, r, g, R);
  }
  return outs ?? [];
}

/** Rows of `part` ([group.length, R]) into `into` ([rows, R]) at the rows `group` names. */
export function placeRows(into: Float32Array, part: Float32Array, group: readonly number[], R: number): void {
  for (const [i, row] of group.entries()) into.set(part.subarray(i * R, (i + 1) * R), row * R);
}
