/** The model's input: token rows padded to one length, with a mask of the real tokens. */

/** A batch of token rows, row-major [batch, length]; mask 1 marks real tokens, 0 padding. */
export interface TokenBatch {
  ids: Int32Array;
  mask: Uint8Array;
  batch: number;
  length: number;
}

/** Pads token rows to one length; left padding for generation, right padding for training. */
export function padBatch(
  rows: ArrayLike<number>[],
  side: "left" | "right" = "left",
  padId = 0,
  length?: number,
): TokenBatch {
  const batch = rows.length;
  const L = length ?? Math.max(1, ...rows.map((r) => r.length));
  const ids = new Int32Array(batch * L).fill(padId);
  const mask = new Uint8Array(batch * L);
  rows.forEach((r, b) => {
    if (r.length > L) throw new RangeError(`row ${b} has ${r.length} tokens, more than the length ${L}`);
    const off = b * L + (side === "left" ? L - r.length : 0);
    for (let i = 0; i < r.length; i++) {
      ids[off + i] = r[i]!;
      mask[off + i] = 1;
    }
  });
  return { ids, mask, batch, length: L };
}

/** Rotary position of every token: the count of real tokens before it in its row (0 on padding). */
export function tokenPositions(batch: TokenBatch): Int32Array {
  const { batch: B, length: L } = batch;
  const positions = new Int32Array(B * L);
  for (let b = 0; b < B; b++) {
    let n = 0;
    for (let t = 0; t < L; t++) {
      const m = batch.mask[b * L + t]!;
      positions[b * L + t] = m ? n : 0;
      n += m;
    }
  }
  return positions;
}
