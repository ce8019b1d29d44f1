/**
 * Key/value cache for batched decoding, laid out [B, kvHeads, capacity, headDim] per layer. Capacity grows
 * in chunks, so one decode step costs O(current length), not O(max length). On the wasm and cpu backends
 * the new position is written in place into the tensor's memory (no O(context) copy per step; tfjs has no
 * in-place update op and concat on wasm copies at ~60 ms per 16 MB); elsewhere a host mirror is kept and
 * re-uploaded each step.
 */
import * as tf from "@tensorflow/tfjs";
import type { Qwen2Config } from "./config.js";
import type { TokenBatch } from "./token-batch.js";

const NEG = -1e9;

/** One layer's keys or values read back to the host, in the memory order of `shape`. */
export interface HostTensor {
  data: Float32Array;
  shape: readonly number[];
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
  private readonly layers: number;
  private readonly kvHeads: number;
  private readonly headDim: number;

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
    const backend = tf.backend() as any;
    if (tf.getBackend() === "wasm") return backend.typedArrayFromHeap(t) as Float32Array;
    return backend.data.get(t.dataId).values as Float32Array;
  }

  private storage(layer: number, which: 0 | 1): Float32Array {
    if (!this.inPlace) return this.mirrors[layer]![which]!;
    return this.view(which === 0 ? this.keys[layer]! : this.values[layer]!);
  }

  private publish(layer: number, which: 0 | 1, data: Float32Array | undefined): void {
    // In-place mode writes straight into the tensor; mirror mode re-uploads.
    if (this.inPlace && data === undefined) return;
    const shape: [number, number, number, number] = [this.batch, this.kvHeads, this.capacity, this.headDim];
    const t = tf.keep(tf.tensor4d(data ?? this.mirrors[layer]![which]!, shape));
    const list = which === 0 ? this.keys : this.values;
    list[layer]?.dispose();
    list[layer] = t;
  }

  /** Makes room for `n` more slots, growing capacity to the next multiple of the chunk. */
  reserve(n: number): void {
    const need = this.length + n;
    if (need <= this.capacity) return;
    const cap = Math.ceil(need / this.chunk) * this.chunk;
    this.resize(cap, [...Array(this.batch).keys()]);
  }

  /** Rebuilds storage with a new capacity and a subset of rows (compaction when rows finish). */
  private resize(cap: number, rows: number[]): void {
    const D = this.headDim;
    const KV = this.kvHeads;
    const oldCap = this.capacity;
    const copy = Math.min(oldCap, cap, this.length) * D;
    const nb = rows.length;
    for (let l = 0; l < this.layers; l++) {
      for (const which of [0, 1] as const) {
        const next = new Float32Array(nb * KV * cap * D);
        if (oldCap > 0 && copy > 0) {
          const old = this.storage(l, which);
          rows.forEach((r, i) => {
            for (let h = 0; h < KV; h++) {
              const src = (r * KV + h) * oldCap * D;
              next.set(old.subarray(src, src + copy), (i * KV + h) * cap * D);
            }
          });
        }
        if (!this.inPlace) {
          this.mirrors[l] ??= [];
          this.mirrors[l]![which] = next;
        }
        this.batch = nb;
        this.capacity = cap;
        this.publish(l, which, next);
      }
    }
    const valid = new Uint8Array(nb * cap);
    const keepLen = Math.min(oldCap, cap, this.length);
    rows.forEach((r, i) => {
      valid.set(this.valid.subarray(r * oldCap, r * oldCap + keepLen), i * cap);
    });
    this.valid = valid;
    this.nextPos = Int32Array.from(rows, (r) => this.nextPos[r]!);
    this.batch = nb;
    this.capacity = cap;
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
    this.writeRows(layer, k, v, rowOffset * this.kvHeads, rows * this.kvHeads, 0, L * this.headDim);
  }

  /**
   * Copies k and v, `count` (row, kv head) runs of `span` floats each, into the layer's storage from
   * slot `slot` of cache run `first` on.
   */
  private writeRows(
    layer: number,
    k: HostTensor,
    v: HostTensor,
    first: number,
    count: number,
    slot: number,
    span: number,
  ): void {
    for (const [which, t] of [
      [0, k],
      [1, v],
    ] as const) {
      const src = t.data;
      const dst = this.storage(layer, which);
      for (let r = 0; r < count; r++)
        dst.set(src.subarray(r * span, (r + 1) * span), ((first + r) * this.capacity + slot) * this.headDim);
      if (!this.inPlace) this.publish(layer, which, undefined);
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

  /** Writes one step's k, v (memory order [B, KV, 1, D]) at `slot`; returns the layer's K and V tensors. */
  writeStep(layer: number, slot: number, k: HostTensor, v: HostTensor): [tf.Tensor4D, tf.Tensor4D] {
    this.writeRows(layer, k, v, 0, this.batch * this.kvHeads, slot, this.headDim);
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
