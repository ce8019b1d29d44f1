/**
 * A KV cache whose rows move independently, for the step-wise rollout engine. The model's prefill and
 * decodeStep drive it through KVCache's public methods (it is a KVCache), but here:
 *
 * - each row has its own write pointer: row b's tokens live in slots [0, rowEnd[b]), contiguously,
 *   whatever the other rows do (a prefill's left padding is shifted away);
 * - a step may leave rows out (`setActive`): a row paused on a tool call writes nothing and does not
 *   move, so its context stays exactly its tokens;
 * - `dropLast(row, n)` forgets a row's last n tokens (text cut at a tool's stop string).
 *
 * - `absorb(other)` appends the rows of another cache (new prompts prefilled while this one decodes).
 *
 * A row's slot layout depends only on its own tokens, never on when other rows stopped, resumed or
 * joined, so seeded rollouts do not depend on tool latency. The storage (tensors, host mirrors, the
 * k/v writes, growth and relayout) is KVCache's; this class only places the rows.
 */
import { KVCache, type Qwen2Config, type TokenBatch } from "../models/index.js";

const NEG = -1e9;

export class RaggedKVCache extends KVCache {
  /** Next slot each row writes. */
  private rowEnd: Int32Array;
  /** Rows taking part in the next decode step. */
  private active: Uint8Array;

  constructor(config: Qwen2Config, batch: number, growBy = 64) {
    super(config, batch, growBy);
    this.rowEnd = new Int32Array(batch);
    this.active = new Uint8Array(batch).fill(1);
  }

  /** Tokens held for a row. */
  rowLength(row: number): number {
    return this.rowEnd[row]!;
  }

  /** Chooses the rows the next decode step writes (1 = take part). Others keep their state untouched. */
  setActive(mask: ArrayLike<number>): void {
    if (mask.length !== this.batch)
      throw new RangeError(`setActive: ${mask.length} flags for ${this.batch} rows`);
    for (let b = 0; b < this.batch; b++) this.active[b] = mask[b] ? 1 : 0;
  }

  /** Forgets the last n tokens of a row. */
  dropLast(row: number, n: number): void {
    if (n < 0 || n > this.rowLength(row))
      throw new RangeError(`dropLast(${row}, ${n}): row holds ${this.rowLength(row)} tokens`);
    this.rowEnd[row]! -= n;
    this.length = Math.max(0, ...this.rowEnd);
  }

  /** Re-lays storage out with `rows` (in this order) and capacity `cap`. */
  private relayoutRows(cap: number, rows: number[]): void {
    this.relayout(cap, [{ from: this, rows }]);
    this.rowEnd = Int32Array.from(rows, (r) => this.rowEnd[r]!);
    this.active = Uint8Array.from(rows, (r) => this.active[r]!);
    this.length = Math.max(0, ...this.rowEnd);
  }

  override reserve(n: number): void {
    const need = Math.max(0, ...this.rowEnd) + n;
    if (need <= this.capacity) return;
    this.relayoutRows(this.capacityFor(need), [...Array(this.batch).keys()]);
  }

  override keepRows(rows: number[]): void {
    this.relayoutRows(this.capacity, rows);
  }

  override startPrefill(L: number): void {
    this.rowEnd.fill(0);
    this.length = 0;
    this.reserve(L);
  }

  override finishPrefill(batch: TokenBatch): void {
    const L = batch.length;
    const D = this.headDim;
    for (let b = 0; b < this.batch; b++) {
      let first = L;
      for (let t = 0; t < L; t++)
        if (batch.mask[b * L + t]) {
          first = t;
          break;
        }
      for (let t = first; t < L; t++)
        if (!batch.mask[b * L + t]) throw new RangeError(`RaggedKVCache: prompt row ${b} is not left-padded`);
      if (first > 0)
        for (let l = 0; l < this.layers; l++)
          for (const which of [0, 1] as const) {
            const st = this.storage(l, which);
            for (let h = 0; h < this.kvHeads; h++) {
              const base = (b * this.kvHeads + h) * this.capacity * D;
              st.copyWithin(base, base + first * D, base + L * D);
            }
            this.stored(l, which);
          }
      this.rowEnd[b] = L - first;
    }
    this.length = Math.max(0, ...this.rowEnd);
  }

  /** Appends the rows of another cache of the same model after this one's; `other` is left empty. */
  absorb(other: RaggedKVCache): void {
    const all = (c: RaggedKVCache) => [...Array(c.batch).keys()];
    this.relayout(Math.max(this.capacity, other.capacity), [
      { from: this, rows: all(this) },
      { from: other, rows: all(other) },
    ]);
    this.rowEnd = Int32Array.from([...this.rowEnd, ...other.rowEnd]);
    this.active = Uint8Array.from([...this.active, ...other.active]);
    this.length = Math.max(0, ...this.rowEnd);
    other.dispose();
    other.batch = 0;
    other.rowEnd = new Int32Array(0);
    other.active = new Uint8Array(0);
  }

  override nextPositions(): Int32Array {
    return this.rowEnd.slice();
  }

  override stepMask(heads: number): Float32Array {
    const cap = this.capacity;
    const out = new Float32Array(this.batch * heads * cap).fill(NEG);
    for (let b = 0; b < this.batch; b++) {
      const e = this.rowEnd[b]!;
      for (let h = 0; h < heads; h++) out.fill(0, (b * heads + h) * cap, (b * heads + h) * cap + e + 1);
    }
    return out;
  }

  override stepSlots(): Int32Array {
    // Inactive rows write at their next slot too (harmless: it is not theirs until they advance).
    return this.rowEnd.slice();
  }

  override advance(_tokens: Int32Array): void {
    for (let b = 0; b < this.batch; b++) if (this.active[b]) this.rowEnd[b]! += 1;
    this.length = Math.max(0, ...this.rowEnd);
  }
}
