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
 * joined, so seeded rollouts do not depend on tool latency.
 */
import * as tf from "@tensorflow/tfjs";
import { type HostTensor, KVCache, type Qwen2Config, type TokenBatch } from "../models/index.js";

const NEG = -1e9;

export class RaggedKVCache extends KVCache {
  /** Next slot each row writes. */
  private rowEnd: Int32Array;
  /** Rows taking part in the next decode step. */
  private active: Uint8Array;
  private kTensors: tf.Tensor4D[] = [];
  private vTensors: tf.Tensor4D[] = [];
  private hostCopies: Float32Array[][] = [];
  private readonly nLayers: number;
  private readonly nKv: number;
  private readonly dHead: number;
  private readonly direct: boolean;

  constructor(
    config: Qwen2Config,
    batch: number,
    private readonly growBy = 64,
  ) {
    super(config, batch, growBy);
    this.nLayers = config.numHiddenLayers;
    this.nKv = config.numKeyValueHeads;
    this.dHead = config.headDim;
    this.rowEnd = new Int32Array(batch);
    this.active = new Uint8Array(batch).fill(1);
    const name = tf.getBackend();
    this.direct = name === "wasm" || name === "cpu";
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

  private memory(t: tf.Tensor): Float32Array {
    const backend = tf.backend() as any;
    if (tf.getBackend() === "wasm") return backend.typedArrayFromHeap(t) as Float32Array;
    return backend.data.get(t.dataId).values as Float32Array;
  }

  private store(layer: number, which: 0 | 1): Float32Array {
    if (!this.direct) return this.hostCopies[layer]![which]!;
    return this.memory(which === 0 ? this.kTensors[layer]! : this.vTensors[layer]!);
  }

  private upload(layer: number, which: 0 | 1, data: Float32Array): void {
    const t = tf.keep(tf.tensor4d(data, [this.batch, this.nKv, this.capacity, this.dHead]));
    const list = which === 0 ? this.kTensors : this.vTensors;
    list[layer]?.dispose();
    list[layer] = t;
  }

  /** Re-lays storage out with `rows` (in this order) and capacity `cap`. */
  private relayout(cap: number, rows: number[]): void {
    const D = this.dHead;
    const KV = this.nKv;
    const oldCap = this.capacity;
    const keep = Math.min(oldCap, cap);
    const stores: Float32Array[][] = [];
    for (let l = 0; l < this.nLayers; l++) {
      stores[l] = [];
      for (const which of [0, 1] as const) {
        const next = new Float32Array(rows.length * KV * cap * D);
        if (oldCap > 0) {
          const old = this.store(l, which);
          rows.forEach((r, i) => {
            for (let h = 0; h < KV; h++) {
              const src = (r * KV + h) * oldCap * D;
              next.set(old.subarray(src, src + keep * D), (i * KV + h) * cap * D);
            }
          });
        }
        stores[l]![which] = next;
      }
    }
    this.batch = rows.length;
    this.capacity = cap;
    this.rowEnd = Int32Array.from(rows, (r) => this.rowEnd[r]!);
    this.active = Uint8Array.from(rows, (r) => this.active[r]!);
    this.install(stores);
  }

  override reserve(n: number): void {
    const need = Math.max(0, ...this.rowEnd) + n;
    if (need <= this.capacity) return;
    this.relayout(Math.ceil(need / this.growBy) * this.growBy, [...Array(this.batch).keys()]);
  }

  override keepRows(rows: number[]): void {
    this.relayout(this.capacity, rows);
    this.length = Math.max(0, ...this.rowEnd);
  }

  override startPrefill(L: number): void {
    this.rowEnd.fill(0);
    this.length = 0;
    this.reserve(L);
  }

  override writePrefill(layer: number, k: HostTensor, v: HostTensor, rowOffset = 0): void {
    const rows = k.shape[0]!;
    const L = k.shape[2]!;
    const D = this.dHead;
    for (const [which, t] of [
      [0, k],
      [1, v],
    ] as const) {
      const src = t.data;
      const dst = this.store(layer, which);
      const base = rowOffset * this.nKv;
      for (let r = 0; r < rows * this.nKv; r++)
        dst.set(src.subarray(r * L * D, (r + 1) * L * D), (base + r) * this.capacity * D);
      if (!this.direct) this.upload(layer, which, dst);
    }
  }

  override finishPrefill(batch: TokenBatch): void {
    const L = batch.length;
    const D = this.dHead;
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
        for (let l = 0; l < this.nLayers; l++)
          for (const which of [0, 1] as const) {
            const st = this.store(l, which);
            for (let h = 0; h < this.nKv; h++) {
              const base = (b * this.nKv + h) * this.capacity * D;
              st.copyWithin(base, base + first * D, base + L * D);
            }
            if (!this.direct) this.upload(l, which, st);
          }
      this.rowEnd[b] = L - first;
    }
    this.length = Math.max(0, ...this.rowEnd);
  }

  /** Appends the rows of another cache of the same model after this one's; `other` is left empty. */
  absorb(other: RaggedKVCache): void {
    const D = this.dHead;
    const KV = this.nKv;
    const cap = Math.max(this.capacity, other.capacity);
    const nb = this.batch + other.batch;
    const stores: Float32Array[][] = [];
    for (let l = 0; l < this.nLayers; l++) {
      stores[l] = [];
      for (const which of [0, 1] as const) {
        const next = new Float32Array(nb * KV * cap * D);
        for (const [src, offset] of [
          [this, 0],
          [other, this.batch],
        ] as const) {
          if (src.capacity === 0) continue;
          const old = src.store(l, which);
          for (let r = 0; r < src.batch * KV; r++)
            next.set(
              old.subarray(r * src.capacity * D, (r + 1) * src.capacity * D),
              (offset * KV + r) * cap * D,
            );
        }
        stores[l]![which] = next;
      }
    }
    this.rowEnd = Int32Array.from([...this.rowEnd, ...other.rowEnd]);
    this.active = Uint8Array.from([...this.active, ...other.active]);
    this.batch = nb;
    this.capacity = cap;
    this.install(stores);
    this.length = Math.max(0, ...this.rowEnd);
    other.dispose();
    other.batch = 0;
    other.rowEnd = new Int32Array(0);
    other.active = new Uint8Array(0);
  }

  private install(stores: Float32Array[][]): void {
    for (let l = 0; l < this.nLayers; l++)
      for (const which of [0, 1] as const) {
        if (!this.direct) {
          this.hostCopies[l] ??= [];
          this.hostCopies[l]![which] = stores[l]![which]!;
        }
        this.upload(l, which, stores[l]![which]!);
      }
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

  override writeStep(layer: number, _slot: number, k: HostTensor, v: HostTensor): [tf.Tensor4D, tf.Tensor4D] {
    const D = this.dHead;
    const KV = this.nKv;
    for (const [which, t] of [
      [0, k],
      [1, v],
    ] as const) {
      const src = t.data;
      const dst = this.store(layer, which);
      // Inactive rows write at their next slot too (harmless: it is not theirs until they advance).
      for (let b = 0; b < this.batch; b++) {
        const slot = this.rowEnd[b]!;
        for (let h = 0; h < KV; h++) {
          const r = b * KV + h;
          dst.set(src.subarray(r * D, (r + 1) * D), (r * this.capacity + slot) * D);
        }
      }
      if (!this.direct) this.upload(layer, which, dst);
    }
    return [this.kTensors[layer]!, this.vTensors[layer]!];
  }

  override stepSlots(): Int32Array {
    // Inactive rows write at their next slot too, as in writeStep.
    return this.rowEnd.slice();
  }

  override inPlaceLayer(layer: number): [tf.Tensor4D, tf.Tensor4D] | undefined {
    return this.direct ? [this.kTensors[layer]!, this.vTensors[layer]!] : undefined;
  }

  override advance(_tokens: Int32Array): void {
    for (let b = 0; b < this.batch; b++) if (this.active[b]) this.rowEnd[b]! += 1;
    this.length = Math.max(0, ...this.rowEnd);
  }

  override dispose(): void {
    for (const t of [...this.kTensors, ...this.vTensors]) t?.dispose();
    this.kTensors = [];
    this.vTensors = [];
    this.hostCopies = [];
    super.dispose();
  }
}
