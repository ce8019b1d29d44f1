/**
 * The gradient of one unit outside the decoder layers (the vocabulary-sized embedding; the final norm and
 * an untied head) over a mini-batch's rounds, for the layer-by-layer update (layer-sharding.ts).
 *
 * The LM head's weight gradient is dy^T h. With few scored positions its two factors are far smaller
 * than the [vocab, h] matrix: at Qwen2.5-0.5B's shapes, 48 positions hold 7.3M values and the matrix
 * 136M. While a rank's factors (with the embedding's row gradients and the small parameters' gradients)
 * stay within a budget, they are kept as they came. In the mini-batch's last round every rank gathers
 * every rank's factors and computes only its own piece of the unit's gradient, in chunks of rows, with
 * one product per chunk. No rank then holds a vocabulary-sized gradient, and the collective moves the
 * factors instead of the matrix.
 *
 * Past the budget (long batches, where the factors outgrow the matrix) the unit's whole gradient is
 * summed in one buffer, the kept factors added into it first, and reduce-scattered. If any rank went
 * that way, every rank does, so the ranks' collectives stay the same.
 */
import { nativeBlas } from "../models/native-blas.js";
import { addEmbeddingGradRows } from "../models/wasm-host-kernels.js";
import { WorkerStateError } from "./errors.js";
import type { ShardedParameters } from "./sharded-parameters.js";
import { addInto } from "./vector-ops.js";

/** What the gradient needs of the sharded parameters: the layout, and the collectives over the ranks. */
export type UnitExchange = Pick<
  ShardedParameters,
  "units" | "pieces" | "everyRank" | "allGatherConcat" | "reduceScatterUnit"
>;

/** How a record of the kept gradient reads (its first value). */
const PRODUCT = 0;
const ROWS = 1;
const ADD_VALUES = 2;
const SET_VALUES = 3;
/** Values before a record's data: its kind, its entry, its row count. */
const HEADER = 3;
/** Values before a rank's records in the gathered array: their count, as two exact 16-bit halves. */
const FRAME = 2;
/** Integers stored in float32 records (counts, ids) must be exact. */
const EXACT_INTEGERS = 2 ** 24;
/** Values of one chunk of rows computed at a time in the exchange (4 MiB). */
const CHUNK_VALUES = 1 << 20;

/** An entry of the unit as a matrix [rows, cols] (a vector: one row). */
interface EntryShape {
  name: string;
  /** Where it starts in the unit's buffer. */
  at: number;
  rows: number;
  cols: number;
}

/** A record read back from a rank's kept values. */
interface ReadRecord {
  kind: number;
  /** Its entry's index in the unit. */
  entry: number;
  rows: number;
  /** Where its data starts in `values`. */
  data: number;
  values: Float32Array;
}

export class OuterUnitGradient {
  private readonly entries: EntryShape[];
  private readonly entryIndex: Map<string, number>;
  private readonly size: number;
  /** The frame, then the kept records end to end: [kind, entry, rows, data...] each. */
  private kept = new Float32Array(FRAME);
  private used = FRAME;
  /** The whole unit's gradient, once this mini-batch went past the budget (null while it is kept as records). */
  private dense: Float32Array | null = null;
  /** The dense buffer's memory, kept for the next mini-batch that needs it. */
  private denseMemory: Float32Array | null = null;
  private chunk: Float32Array | null = null;

  /**
   * `u`: the unit's index in `sharded`. `shapes`: parameters' shapes by name (those whose gradient may
   * come as factors or rows; any other is a vector). `budget`: the most
   * values this rank keeps as records (defaultBudget).
   */
  constructor(
    private readonly sharded: UnitExchange,
    private readonly u: number,
    shapes: ReadonlyMap<string, number[]>,
    private readonly budget: number,
  ) {
    const unit = sharded.units[u]!;
    this.size = unit.end - unit.start;
    // a parameter the model has no shape for (a value head, an adapter) takes whole gradients only: a row
    this.entries = unit.entries.map((e) => {
      const shape = shapes.get(e.name) ?? [e.size];
      const rows = shape.length >= 2 ? shape[0]! : 1;
      return { name: e.name, at: e.offset - unit.start, rows, cols: e.size / rows };
    });
    this.entryIndex = new Map(this.entries.map((e, k) => [e.name, k]));
  }

  /**
   * The budget that keeps a rank's records and, at the exchange, every rank's gathered records within
   * half of the unit's dense gradient: unit size / (2 x ranks) values.
   */
  static defaultBudget(unitSize: number, worldSize: number): number {
    return Math.floor(unitSize / (2 * worldSize));
  }

  /** Starts a mini-batch: nothing kept. */
  begin(): void {
    this.used = FRAME;
    this.dense = null;
  }

  /** Whether the mini-batch's gradient is now summed in the unit's whole buffer (past the budget). */
  get isDense(): boolean {
    return this.dense !== null;
  }

  /** Bytes held: the records' memory, the dense buffer's, the exchange's chunk. */
  get bytes(): number {
    return this.kept.byteLength + (this.denseMemory?.byteLength ?? 0) + (this.chunk?.byteLength ?? 0);
  }

  /**
   * Adds the gradient left^T right of matrix `name` [a, b] (left [n, a], right [n, b]: the head's dy and
   * input, or input and dy), as WeightGradientSink gives it: kept as the two factors, or added into
   * the whole buffer with the sgemm the head's own backward would make.
   */
  addProduct(name: string, left: Float32Array, right: Float32Array, n: number): void {
    const k = this.entryOf(name);
    const e = this.entries[k]!;
    if (left.length < n * e.rows || right.length < n * e.cols)
      throw new RangeError(
        `${name}: gradient factors of ${left.length} and ${right.length} values for ${n} rows of [${e.rows}, ${e.cols}]`,
      );
    const blas = nativeBlas();
    if (!blas) throw new WorkerStateError(`${name}: a gradient given as factors needs the OpenBLAS addon`);
    if (this.dense || !this.keeps(n * (e.rows + e.cols))) {
      const into = this.denseBuffer().subarray(e.at, e.at + e.rows * e.cols);
      blas.gemm(left, right, into, 1, e.rows, e.cols, n, true, false, 0, 0, true);
      return;
    }
    const at = this.record(PRODUCT, k, n, n * (e.rows + e.cols));
    this.kept.set(left.subarray(0, n * e.rows), at);
    this.kept.set(right.subarray(0, n * e.cols), at + n * e.rows);
  }

  /** Adds the embedding's gradient rows: row ids[r] gets row r of dy [ids, cols] (repeats add up). */
  addRows(name: string, ids: Int32Array, dy: Float32Array): void {
    const k = this.entryOf(name);
    const e = this.entries[k]!;
    const n = ids.length;
    if (dy.length !== n * e.cols)
      throw new RangeError(`${name}: ${dy.length} gradient values for ${n} rows of ${e.cols}`);
    for (const id of ids)
      if (id < 0 || id >= e.rows) throw new RangeError(`${name}: row id ${id} outside 0..${e.rows - 1}`);
    if (this.dense || e.rows > EXACT_INTEGERS || !this.keeps(n * (1 + e.cols))) {
      const into = this.denseBuffer().subarray(e.at, e.at + e.rows * e.cols);
      addEmbeddingGradRows(dy, ids, e.rows, e.cols, into);
      return;
    }
    const at = this.record(ROWS, k, n, n * (1 + e.cols));
    for (let r = 0; r < n; r++) this.kept[at + r] = ids[r]!;
    this.kept.set(dy, at + n);
  }

  /**
   * Adds the whole gradient of parameter `name` (`overwrite`: the first in its place this mini-batch, so
   * it replaces the zeros rather than adding to them).
   */
  addValues(name: string, values: Float32Array, overwrite: boolean): void {
    const k = this.entryOf(name);
    const e = this.entries[k]!;
    if (values.length !== e.rows * e.cols)
      throw new RangeError(`${name}: ${values.length} gradient values, the parameter has ${e.rows * e.cols}`);
    if (this.dense || !this.keeps(values.length)) {
      const into = this.denseBuffer().subarray(e.at, e.at + values.length);
      if (overwrite) into.set(values);
      else addInto(values, into);
      return;
    }
    const at = this.record(overwrite ? SET_VALUES : ADD_VALUES, k, 1, values.length);
    this.kept.set(values, at);
  }

  /**
   * The mini-batch's last round: sums the unit's gradient over the ranks and writes this rank's piece
   * of it into `shardGrad` (the only write there in the mini-batch). Every rank calls it for the same
   * units in the same order.
   */
  async reduceInto(shardGrad: Float32Array): Promise<void> {
    if (!(await this.sharded.everyRank(this.dense === null))) {
      this.goDense();
      await this.sharded.reduceScatterUnit(this.u, this.dense!, shardGrad, true);
      return;
    }
    const count = this.used - FRAME;
    this.kept[0] = Math.floor(count / 65536);
    this.kept[1] = count % 65536;
    const records = this.unframe(await this.sharded.allGatherConcat(this.kept.subarray(0, this.used)));
    const unit = this.sharded.units[this.u]!;
    const piece = this.sharded.pieces[this.u]!;
    const from = piece.start - unit.start;
    const to = piece.end - unit.start;
    const out = shardGrad.subarray(piece.local, piece.local + to - from);
    for (const [k, e] of this.entries.entries()) {
      const lo = Math.max(from, e.at);
      const hi = Math.min(to, e.at + e.rows * e.cols);
      if (lo >= hi) continue;
      const mine = records.filter((r) => r.entry === k);
      this.computeRows(
        e,
        mine,
        Math.floor((lo - e.at) / e.cols),
        Math.ceil((hi - e.at) / e.cols),
        (at, chunk) => {
          // the chunk's values that fall in this rank's piece
          const start = Math.max(lo, at);
          const end = Math.min(hi, at + chunk.length);
          if (start < end) out.set(chunk.subarray(start - at, end - at), start - from);
        },
      );
    }
  }

  /**
   * Rows [r0, r1) of entry e's gradient summed from `records`, chunk by chunk: each chunk is handed to
   * `use` with its place in the unit's buffer, then overwritten by the next.
   */
  private computeRows(
    e: EntryShape,
    records: ReadRecord[],
    r0: number,
    r1: number,
    use: (at: number, chunk: Float32Array) => void,
  ): void {
    const products = records.filter((r) => r.kind === PRODUCT);
    const k = products.reduce((n, r) => n + r.rows, 0);
    const chunkRows = Math.max(1, Math.min(r1 - r0, Math.floor(CHUNK_VALUES / e.cols)));
    // the right factors, stacked: [k, cols] (the same for every chunk)
    const right = new Float32Array(k * e.cols);
    const left = new Float32Array(k * chunkRows);
    let kk = 0;
    for (const p of products) {
      right.set(
        p.values.subarray(p.data + p.rows * e.rows, p.data + p.rows * (e.rows + e.cols)),
        kk * e.cols,
      );
      kk += p.rows;
    }
    if (!this.chunk || this.chunk.length < chunkRows * e.cols)
      this.chunk = new Float32Array(chunkRows * e.cols);
    for (let c0 = r0; c0 < r1; c0 += chunkRows) {
      const c1 = Math.min(r1, c0 + chunkRows);
      const width = c1 - c0;
      const chunk = this.chunk.subarray(0, width * e.cols);
      if (k > 0) {
        // the left factors' columns of these rows, stacked: [k, width]
        let row = 0;
        for (const p of products)
          for (let i = 0; i < p.rows; i++, row++) {
            const src = p.data + i * e.rows;
            left.set(p.values.subarray(src + c0, src + c1), row * width);
          }
        nativeBlas()!.gemm(left, right, chunk, 1, width, e.cols, k, true, false, 0, 0, false);
      } else chunk.fill(0);
      for (const r of records) {
        if (r.kind === ADD_VALUES || r.kind === SET_VALUES) {
          addInto(r.values.subarray(r.data + c0 * e.cols, r.data + c1 * e.cols), chunk);
        } else if (r.kind === ROWS) {
          for (let i = 0; i < r.rows; i++) {
            const id = r.values[r.data + i]!;
            if (id < c0 || id >= c1) continue;
            const src = r.data + r.rows + i * e.cols;
            const dst = (id - c0) * e.cols;
            for (let j = 0; j < e.cols; j++) chunk[dst + j]! += r.values[src + j]!;
          }
        }
      }
      use(e.at + c0 * e.cols, chunk);
    }
  }

  /** Every rank's records from the gathered frames, in rank order. */
  private unframe(all: Float32Array): ReadRecord[] {
    const out: ReadRecord[] = [];
    let at = 0;
    while (at < all.length) {
      const count = all[at]! * 65536 + all[at + 1]!;
      if (!(at + FRAME + count <= all.length))
        throw new WorkerStateError(`unit ${this.u}: gathered gradient records at ${at} run past the end`);
      out.push(...this.read(all.subarray(at + FRAME, at + FRAME + count)));
      at += FRAME + count;
    }
    return out;
  }

  /** A rank's kept values as records; refuses values that are not records of this unit. */
  private read(values: Float32Array): ReadRecord[] {
    const out: ReadRecord[] = [];
    for (let at = 0; at < values.length; ) {
      const kind = values[at]!;
      const e = this.entries[values[at + 1]!];
      const rows = values[at + 2]!;
      if (!e || !Number.isInteger(rows) || rows < 0)
        throw new WorkerStateError(`unit ${this.u}: a gathered gradient record at ${at} does not read`);
      const length =
        kind === PRODUCT
          ? rows * (e.rows + e.cols)
          : kind === ROWS
            ? rows * (1 + e.cols)
            : kind === ADD_VALUES || kind === SET_VALUES
              ? e.rows * e.cols
              : Number.NaN;
      if (!(at + HEADER + length <= values.length))
        throw new WorkerStateError(`unit ${this.u}: a gathered gradient record at ${at} does not read`);
      out.push({ kind, entry: values[at + 1]!, rows, data: at + HEADER, values });
      at += HEADER + length;
    }
    return out;
  }

  /** Whether `values` more (and a header) fit in the budget; growing the records' memory when they do. */
  private keeps(values: number): boolean {
    const need = this.used + HEADER + values;
    if (need > this.budget) {
      this.goDense();
      return false;
    }
    if (need > this.kept.length) {
      const grown = new Float32Array(Math.min(this.budget, Math.max(need, 2 * this.kept.length)));
      grown.set(this.kept.subarray(0, this.used));
      this.kept = grown;
    }
    return true;
  }

  /** Appends a record's header; returns where its `length` data values go. */
  private record(kind: number, entry: number, rows: number, length: number): number {
    if (rows >= EXACT_INTEGERS) throw new RangeError(`a gradient record of ${rows} rows`);
    this.kept[this.used] = kind;
    this.kept[this.used + 1] = entry;
    this.kept[this.used + 2] = rows;
    const at = this.used + HEADER;
    this.used = at + length;
    return at;
  }

  /** Past the budget: the whole buffer, with every kept record added in, in the order they came. */
  private goDense(): void {
    if (this.dense) return;
    const dense = this.denseBuffer();
    for (const r of this.read(this.kept.subarray(FRAME, this.used))) {
      const e = this.entries[r.entry]!;
      const into = dense.subarray(e.at, e.at + e.rows * e.cols);
      const data = r.values.subarray(r.data);
      if (r.kind === PRODUCT)
        nativeBlas()!.gemm(
          data.subarray(0, r.rows * e.rows),
          data.subarray(r.rows * e.rows, r.rows * (e.rows + e.cols)),
          into,
          1,
          e.rows,
          e.cols,
          r.rows,
          true,
          false,
          0,
          0,
          true,
        );
      else if (r.kind === ROWS)
        addEmbeddingGradRows(
          data.subarray(r.rows, r.rows * (1 + e.cols)),
          Int32Array.from(data.subarray(0, r.rows)),
          e.rows,
          e.cols,
          into,
        );
      else if (r.kind === SET_VALUES) into.set(data.subarray(0, into.length));
      else addInto(data.subarray(0, into.length), into);
    }
    this.used = FRAME;
  }

  /** The unit's whole buffer for this mini-batch (zeroed when it is made dense). */
  private denseBuffer(): Float32Array {
    if (!this.dense) {
      this.dense = this.denseMemory ? this.denseMemory.fill(0) : new Float32Array(this.size);
      this.denseMemory = this.dense;
    }
    return this.dense;
  }

  private entryOf(name: string): number {
    const k = this.entryIndex.get(name);
    if (k === undefined) throw new WorkerStateError(`parameter ${name} is not in unit ${this.u}`);
    return k;
  }
}
