/**
 * veRL's balance_batch: reorder a batch so that the contiguous chunks DP_COMPUTE_PROTO hands to the W
 * workers hold about the same number of tokens. Every worker trims its micro-batches to their real
 * tokens, so the slowest (most tokens) worker sets the pace of each log-prob pass and update.
 */
import type { DataProto } from "../protocol/data-proto.js";

/**
 * Splits rows into k parts of equal size (rows / k) with total lengths as close as possible: rows
 * longest first, each to the part with the smallest total that still has room (LPT with a size cap),
 * then swaps between the heaviest and the lightest part while one narrows their gap. Parts are returned
 * with their rows in ascending order.
 */
export function balancedPartitions(lengths: readonly number[], k: number): number[][] {
  const n = lengths.length;
  if (k < 1 || n % k !== 0) throw new RangeError(`cannot split ${n} rows into ${k} equal parts`);
  const size = n / k;
  const parts = Array.from({ length: k }, () => ({ rows: [] as number[], total: 0 }));
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => lengths[b]! - lengths[a]! || a - b);
  for (const row of order) {
    let best = -1;
    for (let p = 0; p < k; p++) {
      if (parts[p]!.rows.length >= size) continue;
      if (best < 0 || parts[p]!.total < parts[best]!.total) best = p;
    }
    parts[best]!.rows.push(row);
    parts[best]!.total += lengths[row]!;
  }
  // then swap a row of the heaviest part with one of the lightest while that narrows the gap
  for (let round = 0; round < 4 * n; round++) {
    const byTotal = [...parts].sort((a, b) => a.total - b.total);
    const light = byTotal[0]!;
    const heavy = byTotal[k - 1]!;
    const gap = heavy.total - light.total;
    let bestSwap: [number, number] | undefined;
    let bestGap = gap;
    for (const [i, h] of heavy.rows.entries())
      for (const [j, l] of light.rows.entries()) {
        const d = lengths[h]! - lengths[l]!;
        if (d > 0 && Math.abs(gap - 2 * d) < bestGap) {
          bestGap = Math.abs(gap - 2 * d);
          bestSwap = [i, j];
        }
      }
    if (!bestSwap) break;
    const [i, j] = bestSwap;
    const h = heavy.rows[i]!;
    const l = light.rows[j]!;
    heavy.rows[i] = l;
    light.rows[j] = h;
    heavy.total += lengths[l]! - lengths[h]!;
    light.total += lengths[h]! - lengths[l]!;
  }
  return parts.map((p) => p.rows.sort((a, b) => a - b));
}

/**
 * The row order that balances `batch` over `worldSize` workers (tokens = attention_mask per row),
 * and veRL's global_seqlen metrics: per-worker token totals before (min, max, minmax_diff) and after
 * (balanced_min, balanced_max), and the mean.
 */
export function balanceBatch(
  batch: DataProto,
  worldSize: number,
): { order: number[]; metrics: Record<string, number> } {
  const attn = batch.tensor("attention_mask");
  const [B, L] = attn.shape as [number, number];
  const lengths = Array.from({ length: B }, (_, b) => {
    let n = 0;
    for (let t = 0; t < L; t++) n += Number(attn.data[b * L + t]);
    return n;
  });
  const parts = balancedPartitions(lengths, worldSize);
  const sum = (rows: readonly number[]) => rows.reduce((a, r) => a + lengths[r]!, 0);
  const chunk = B / worldSize;
  const before = Array.from({ length: worldSize }, (_, w) =>
    sum(Array.from({ length: chunk }, (_, i) => w * chunk + i)),
  );
  let after = parts.map(sum);
  let order = parts.flat();
  if (Math.max(...after) > Math.max(...before)) {
    // the heuristic lost to the order the rows came in (rare): keep that
    after = before;
    order = Array.from({ length: B }, (_, i) => i);
  }
  return {
    order,
    metrics: {
      "global_seqlen/min": Math.min(...before),
      "global_seqlen/max": Math.max(...before),
      "global_seqlen/minmax_diff": Math.max(...before) - Math.min(...before),
      "global_seqlen/balanced_min": Math.min(...after),
      "global_seqlen/balanced_max": Math.max(...after),
      "global_seqlen/mean": before.reduce((a, b) => a + b, 0) / worldSize,
    },
  };
}
