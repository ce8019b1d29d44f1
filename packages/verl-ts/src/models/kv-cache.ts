/**
 * Key/value cache for batched decoding, laid out [B, kvHeads, capacity, headDim] per layer. Capacity grows
 * in chunks, so one decode step costs O(current length), not O(max length). On the wasm and cpu backends
 * the new position is written in place into the tensor's memory (no O(context) copy per step; tfjs has no
 * in-place update op and concat on wasm copies at ~60 ms per 16 MB); elsewhere a host mirror is kept and
 * re-uploaded each step.
 *
 * The storage (the tensors, the host mirrors, growth, compaction and the k/v writes) lives here alone;
 * a subclass lays rows out differently (the rollout's RaggedKVCache) through the protected methods.
 */
import * as tf from "@tensorflow/tfjs";
import type { Qwen2Config } from "./config.js";
import type { TokenBatch } from "./token-batch.js";
import { hostMemory } from "./wasm-heap.js";

const NEG = -1e9;

/** One layer's keys or values read back to the host, in the memory order of `shape`. */
export interface HostTensor {
  data: Float32Array;
  shape: readonly number[];
}

/** Rows of a cache that a relayout copies, in order: their first `length` slots. */
interface SourceRows {
  from: KVCache;
  rows: readonly number[];
}

export class KVCache {
  batch: number;
  capacity = 0;
  /** Slots used (the same for every row: rows are left-padded at prefill). */
  length = 0;
  private keys: tf.Tensor4D[] = [];
  private values: tf.Tensor4D[] = [];
  private mirrors: Float32Array[][] = [];
  /** `[B, capacity]`: 1 where the slot holds a real token. */
  private valid = new Uint8Array(0);
  /** Next rotary position per row (count of real tokens so far). */
  private nextPos: Int32Array;
  readonly inPlace: boolean;
  protected readonly layers: number;
  protected readonly kvHeads: number;
  protected readonly headDim: number;

  constructor(
    config: Qwen2Config,
    batch: number,
    private readonly chunk = 64,
    /** `auto`: in place on wasm/cpu, host mirror elsewhere; `mirror` forces the mirror (for tests). */
    mode: "auto" | "mirror" = "auto",
  ) {
    this.batch = batch;
    this.layers = config.numHiddenLayers;
    this.kvHeads = config.numKeyValueHeads;
    this.headDim = config.headDim;
    this.nextPos = new Int32Array(batch);
    const name = tf.getBackend();
    this.inPlace = mode === "auto" && (name === "wasm" || name === "cpu");
  }

  /** A writable view of a tensor's memory (wasm heap or cpu backend array). */
  private view(t: tf.Tensor): Float32Array {
    const values = hostMemory(t);
    if (!values)
      throw new RangeError(
        `KV cache in place on backend ${tf.getBackend()}: its tensors are not in host memory`,
      );
    return values;
  }

  /** The layer's keys (0) or values (1), [B, KV, capacity, D] in memory: write it, then call `stored`. */
  protected storage(layer: number, which: 0 | 1): Float32Array {
    if (!this.inPlace) return this.mirrors[layer]![which]!;
    return this.view(which === 0 ? this.keys[layer]! : this.values[layer]!);
  }

  /** After a write into `storage`: in place there is nothing to do; the host mirror is re-uploaded. */
  protected stored(layer: number, which: 0 | 1): void {
    if (!this.inPlace) this.install(layer, which, this.mirrors[layer]![which]!);
  }

  /** Makes `data` (shape [batch, KV, capacity, D]) the layer's keys or values tensor (and its mirror). */
  private install(layer: number, which: 0 | 1, data: Float32Array): void {
    if (!this.inPlace) {
      this.mirrors[layer] ??= [];
      this.mirrors[layer]![which] = data;
    }
    const shape: [number, number, number, number] = [this.batch, this.kvHeads, this.capacity, this.headDim];
    const t = tf.keep(tf.tensor4d(data, shape));
    const list = which === 0 ? this.keys : this.values;
    list[layer]?.dispose();
    list[layer] = t;
  }

  /** The capacity that holds `need` slots: the next multiple of the chunk. */
  protected capacityFor(need: number): number {
    return Math.ceil(need / this.chunk) * this.chunk;
  }

  /**
   * Rebuilds the storage with capacity `cap` from the given rows of caches, in order: each row keeps its
   * first min(its cache's length, capacity, cap) slots, the rest is zero. Sets batch and capacity.
   */
  protected relayout(cap: number, sources: readonly SourceRows[]): void {
    const D = this.headDim;
    const KV = this.kvHeads;
    const from = sources.map(({ from, rows }) => ({
      from,
      rows,
      cap: from.capacity,
      copy: Math.min(from.capacity, cap, from.length) * D,
    }));
    this.batch = sources.reduce((n, s) => n + s.rows.length, 0);
    this.capacity = cap;
    for (let l = 0; l < this.layers; l++) {
      for (const which of [0, 1] as const) {
        const next = new Float32Array(this.batch * KV * cap * D);
        let i = 0;
        for (const src of from) {
          const old = src.copy > 0 ? src.from.storage(l, which) : undefined;
          for (const r of src.rows) {
            if (old)
              for (let h = 0; h < KV; h++) {
                const at = (r * KV + h) * src.cap * D;
                next.set(old.subarray(at, at + src.copy), (i * KV + h) * cap * D);
              }
            i++;
          }
        }
        this.install(l, which, next);
      }
    }
  }

  /** Makes room for `n` more slots, growing capacity to the next multiple of the chunk. */
  reserve(n: number): void {
    const need = this.length + n;
    if (need <= this.capacity) return;
    this.resize(this.capacityFor(need), [...Array(this.batch).keys()]);
  }

  /** Rebuilds storage with a new capacity and a subset of rows (compaction when rows finish). */
  private resize(cap: number, rows: number[]): void {
    const oldCap = this.capacity;
    const keepLen = Math.min(oldCap, cap, this.length);
    this.relayout(cap, [{ from: this, rows }]);
    const valid = new Uint8Array(rows.length * cap);
    rows.forEach((r, i) => {
      valid.set(this.valid.subarray(r * oldCap, r * oldCap + keepLen), i * cap);
    });
    this.valid = valid;
    this.nextPos = Int32Array.from(rows, (r) => this.nextPos[r]!);
  }

  /** Keeps only the given rows (in this order). */
  keepRows(rows: number[]): void {
    this.resize(this.capacity, rows);
  }

  /** Empties the cache and makes room for a prefill of L positions. */
  startPrefill(L: number): void {
    this.length = 0;
    this.reserve(L);
  }

  /** Called by prefill after its forward pass: stores one layer's keys and values [rows, KV, L, D] at a row offset. */
  writePrefill(layer: number, k: HostTensor, v: HostTensor, rowOffset = 0): void {
    const rows = k.shape[0]!;
    const L = k.shape[2]!;
    this.writeRuns(layer, k, v, rowOffset * this.kvHeads, rows * this.kvHeads, L * this.headDim, () => 0);
  }

  /**
   * Copies k and v, `count` (row, kv head) runs of `span` floats each, into the layer's storage: run r
   * goes to cache run `first + r`, from the slot `slotOf` gives for its row on.
   */
  private writeRuns(
    layer: number,
    k: HostTensor,
    v: HostTensor,
    first: number,
    count: number,
    span: number,
    slotOf: (row: number) => number,
  ): void {
    const KV = this.kvHeads;
    for (const [which, t] of [
      [0, k],
      [1, v],
    ] as const) {
      const src = t.data;
      const dst = this.storage(layer, which);
      for (let r = 0; r < count; r++) {
        const run = first + r;
        const slot = slotOf(Math.floor(run / KV));
        dst.set(src.subarray(r * span, (r + 1) * span), (run * this.capacity + slot) * this.headDim);
      }
      this.stored(layer, which);
    }
  }

  /** Called after a prefill forward: records which slots are real and where positions continue. */
  finishPrefill(batch: TokenBatch): void {
    const L = batch.length;
    this.length = L;
    for (let b = 0; b < this.batch; b++) {
      let n = 0;
      for (let t = 0; t < L; t++) {
        const m = batch.mask[b * L + t]!;
        this.valid[b * this.capacity + t] = m;
        n += m;
      }
      this.nextPos[b] = n;
    }
  }

  nextPositions(): Int32Array {
    return this.nextPos.slice();
  }

  /** Additive attention mask [B, heads, 1, capacity] for the slot about to be written. */
  stepMask(heads: number): Float32Array {
    const cap = this.capacity;
    const row = new Float32Array(cap);
    const out = new Float32Array(this.batch * heads * cap);
    for (let b = 0; b < this.batch; b++) {
      row.fill(NEG);
      for (let j = 0; j < this.length; j++) if (this.valid[b * cap + j]) row[j] = 0;
      row[this.length] = 0;
      for (let h = 0; h < heads; h++) out.set(row, (b * heads + h) * cap);
    }
    return out;
  }

  /**
   * Writes one step's k, v (memory order [B, KV, 1, D]), each row at its slot of stepSlots(); returns
   * the layer's K and V tensors.
   */
  writeStep(layer: number, k: HostTensor, v: HostTensor): [tf.Tensor4D, tf.Tensor4D] {
    const slots = this.stepSlots();
    this.writeRuns(layer, k, v, 0, this.batch * this.kvHeads, this.headDim, (row) => slots[row]!);
    return [this.keys[layer]!, this.values[layer]!];
  }

  /** Shape [B]: the slot each row's next key and value go to (one for all rows here: rows are left-padded). */
  stepSlots(): Int32Array {
    return new Int32Array(this.batch).fill(this.length);
  }

  /**
   * The layer's K and V tensors [B, KV, capacity, D] for a kernel that writes the step's slots into them
   * itself; undefined where the cache is not written in place (a host mirror is re-uploaded instead).
   */
  inPlaceLayer(layer: number): [tf.Tensor4D, tf.Tensor4D] | undefined {
    return this.inPlace ? [this.keys[layer]!, this.values[layer]!] : undefined;
  }

  /** Marks the slot just written as real for every row and moves positions on. */
  advance(_tokens: Int32Array): void {
    for (let b = 0; b < this.batch; b++) {
      this.valid[b * this.capacity + this.length] = 1;
      this.nextPos[b]! += 1;
    }
    this.length += 1;
  }

  dispose(): void {
    for (const t of [...this.keys, ...this.values]) t?.dispose();
    this.keys = [];
    this.values = [];
    this.mirrors = [];
  }
}
