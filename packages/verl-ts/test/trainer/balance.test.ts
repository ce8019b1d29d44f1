import test from "ava";
import { DataProto } from "../../src/protocol/index.js";
import { balanceBatch, balancedPartitions } from "../../src/trainer/index.js";

// veRL's balance_batch: equal rows per worker, token totals as even as the rows allow.

test("balanced partitions: equal sizes, every row once, totals within one row; never worse than no balancing", (t) => {
  let s = 7;
  const rnd = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  for (const k of [2, 4]) {
    for (let trial = 0; trial < 20; trial++) {
      const lengths = Array.from({ length: 16 }, () => 1 + Math.floor(rnd() * 100));
      const parts = balancedPartitions(lengths, k);
      t.true(parts.every((p) => p.length === 16 / k));
      t.deepEqual(
        parts.flat().sort((a, b) => a - b),
        Array.from({ length: 16 }, (_, i) => i),
      );
      const totals = (groups: number[][]) => groups.map((g) => g.reduce((a, r) => a + lengths[r]!, 0));
      const spread = (xs: number[]) => Math.max(...xs) - Math.min(...xs);
      t.true(spread(totals(parts)) <= Math.max(...lengths), "within one row's length");
      // through balanceBatch the slowest worker never gets more tokens than without balancing
      const L = 100;
      const attn = new Uint8Array(16 * L);
      for (const [b, n] of lengths.entries()) attn.fill(1, b * L, b * L + n);
      const { metrics } = balanceBatch(
        DataProto.fromDict({ attention_mask: { data: attn, shape: [16, L] } }),
        k,
      );
      t.true(metrics["global_seqlen/balanced_max"]! <= metrics["global_seqlen/max"]!);
    }
  }
  t.throws(() => balancedPartitions([1, 2, 3], 2), { message: /cannot split 3 rows into 2 equal parts/ });
});

test("balanceBatch orders rows so that each worker's contiguous chunk holds half the tokens", (t) => {
  // rows 0-3 long (10 tokens), rows 4-7 short (2 tokens): the contiguous split gives 40 vs 8
  const B = 8;
  const L = 10;
  const attn = new Uint8Array(B * L);
  for (let b = 0; b < B; b++) for (let i = 0; i < (b < 4 ? 10 : 2); i++) attn[b * L + i] = 1;
  const batch = DataProto.fromDict(
    { attention_mask: { data: attn, shape: [B, L] } },
    { id: [...Array(B).keys()] },
  );
  const { order, metrics } = balanceBatch(batch, 2);
  t.deepEqual(metrics, {
    "global_seqlen/min": 8,
    "global_seqlen/max": 40,
    "global_seqlen/minmax_diff": 32,
    "global_seqlen/balanced_min": 24,
    "global_seqlen/balanced_max": 24,
    "global_seqlen/mean": 24,
  });
  batch.reorder(order);
  const ids = batch.column<number>("id");
  const tokens = (rows: number[]) => rows.reduce((a, r) => a + (r < 4 ? 10 : 2), 0);
  t.is(tokens(ids.slice(0, 4)), 24);
  t.is(tokens(ids.slice(4)), 24);
});
