/**
 * Where a model's weights are held between passes, and the float32 copies it computes with.
 *
 * - Resident (float32, not offloaded): each weight is a tf.Variable for the model's lifetime (the
 *   compute copy is the weight itself).
 * - On the host: float32 arrays (offloaded: veRL's `fsdp_config.param_offload`) or 16-bit patterns
 *   (`model.dtype` bfloat16 / float16: tfjs has no half tensor, so half weights always live here). A pass
 *   widens each weight to a float32 tensor on first use and keeps it until `release()`, which the owner
 *   calls when the pass ends; between passes no tensor holds these weights.
 *
 * - Evicted (`evict()`): no copy at all, for an owner that keeps the weights sharded at rest and gathers
 *   them for each pass (the actor under rollout.free_cache_engine); `assign` brings a weight back in its
 *   storage (resident tensor or host array), and using a weight not brought back throws WeightNotHeldError.
 *
 * Compute is float32 in every case (no backend here has half-precision math); a half-stored model
 * computes with exactly its rounded weights, since widening is exact.
 */
import * as tf from "@tensorflow/tfjs";
import { WeightNotHeldError } from "./errors.js";
import { bytesPerValue, HalfArray, type StoredValues, toStored, type WeightDtype } from "./half-precision.js";
import { Bf16Weight } from "./native-matmul-bf16.js";
import { uid } from "./variable-names.js";
import { bitsOnlyTensor, widenedTensor } from "./wasm-host-kernels.js";

export interface WeightStoreOptions {
  /** Storage dtype. Default float32. */
  dtype?: WeightDtype;
  /** Keep float32 weights on the host between passes instead of in tensors (half dtypes always are). */
  offload?: boolean;
  /** Compute copies are trainable tf.Variables (gradients can be taken with respect to them). */
  trainable?: boolean;
  /**
   * Host-held weights whose float32 copy exceeds this many bytes are widened layer by layer in passes
   * without a gradient tape (generation, log-probs): each layer's copies are freed once the layer ran.
   * Default 1 GiB, a quarter of the wasm heap's 4 GB.
   */
  layerByLayerAboveBytes?: number;
}

/** A weight's name and the shape it is computed in. */
export interface WeightShape {
  name: string;
  shape: number[];
}

export class WeightStore {
  readonly dtype: WeightDtype;
  /** True when the weights live on the host between passes (offloaded or half-stored). */
  readonly onHost: boolean;
  /** Passes without a gradient tape free each layer's float32 copies after the layer (see the option). */
  readonly layerByLayer: boolean;
  private readonly trainable: boolean;
  private readonly shapes: Map<string, number[]>;
  private readonly order: string[];
  private readonly host = new Map<string, StoredValues>();
  private readonly resident = new Map<string, tf.Variable>();
  private readonly compute = new Map<string, tf.Variable>();
  /** Compute copies made with `bitsOnly` (their values never written): an assign keeps them so. */
  private readonly bitsOnlyCompute = new Set<string>();

  /**
   * `values` in the layout the model computes in; float32 values are copied or rounded into `dtype`;
   * half values already in `dtype` are held as they are (no copy: the caller hands them over).
   */
  constructor(
    specs: readonly WeightShape[],
    values: Map<string, StoredValues>,
    options: WeightStoreOptions = {},
  ) {
    this.dtype = options.dtype ?? "float32";
    this.onHost = this.dtype !== "float32" || options.offload === true;
    this.trainable = options.trainable ?? true;
    this.shapes = new Map(specs.map((s) => [s.name, s.shape]));
    this.order = specs.map((s) => s.name);
    const float32Bytes = specs.reduce((a, s) => a + 4 * s.shape.reduce((p, q) => p * q, 1), 0);
    this.layerByLayer = this.onHost && float32Bytes > (options.layerByLayerAboveBytes ?? 2 ** 30);
    for (const s of specs) this.hold(s.name, values.get(s.name)!);
  }

  /** Stores a weight's values as this store holds them (resident tensor, or host array in `dtype`). */
  private hold(name: string, v: StoredValues): void {
    if (!this.onHost) {
      const f = v instanceof HalfArray ? v.toFloat32() : v;
      this.resident.set(name, this.newVariable(name, f));
    } else if (v instanceof HalfArray && v.dtype === this.dtype) this.host.set(name, v);
    else if (this.dtype === "float32")
      this.host.set(name, v instanceof HalfArray ? v.toFloat32() : v.slice());
    else this.host.set(name, toStored(v instanceof HalfArray ? v.toFloat32() : v, this.dtype));
  }

  /** Whether weight `name` is held now (false after `evict()` until it is assigned again). */
  holds(name: string): boolean {
    this.shapeOf(name);
    return this.resident.has(name) || this.host.has(name);
  }

  private newVariable(name: string, values: StoredValues, bitsOnly = false): tf.Variable {
    const t = this.newTensor(name, values, bitsOnly);
    const v = tf.variable(t, this.trainable, `${name}#${uid()}`);
    t.dispose();
    return v;
  }

  /**
   * A weight's float32 tensor from its stored values. Half values widen straight into the tensor's memory
   * where the backend allows; `bitsOnly`: a bfloat16 matrix's values are not written at all, where every
   * product reads its bits (bitsOnlyTensor; elsewhere it widens).
   */
  private newTensor(name: string, values: StoredValues, bitsOnly: boolean): tf.Tensor {
    const shape = this.shapes.get(name)!;
    if (!(values instanceof HalfArray)) return tf.tensor(values, shape, "float32");
    return bitsOnly && shape.length === 2
      ? bitsOnlyTensor(values, shape as [number, number])
      : widenedTensor(values, shape);
  }

  private shapeOf(name: string): number[] {
    const s = this.shapes.get(name);
    if (!s) throw new RangeError(`no parameter named ${name}`);
    return s;
  }

  /**
   * The float32 tensor of a weight for the current pass (a host weight is widened on first use; with
   * `bitsOnly` a bfloat16 matrix not yet widened in this pass gets a tensor of its bits only, see
   * `variables`).
   */
  tensor(name: string, bitsOnly = false): tf.Variable {
    this.shapeOf(name);
    const r = this.resident.get(name);
    if (r) return r;
    let c = this.compute.get(name);
    if (!c) {
      const v = this.host.get(name);
      if (!v) throw new WeightNotHeldError(name);
      c = this.newVariable(name, v, bitsOnly);
      this.compute.set(name, c);
      if (bitsOnly) this.bitsOnlyCompute.add(name);
    }
    return c;
  }

  /**
   * Every weight's compute tensor, in spec order (what an optimizer or a gradient tape needs), or those of
   * `names` in that order. `bitsOnly`: the bfloat16 matrices' tensors hold their bits only, their float32
   * values never written (no 4 bytes a value per pass; the embedding's is 545 MB at Qwen2.5-0.5B's size),
   * for a caller whose every use of them reads the bits: the products of the linear layers and the LM
   * head, and lookups widened from the bits (the layer-by-layer update). The linear layers and the
   * embedding lookup throw where they would read such a tensor's values (refuseUnwritten); other kernels
   * do not check, so hand these tensors to nothing else. Until `release`, the tensor stays as first made.
   */
  variables(names?: readonly string[], options: { bitsOnly?: boolean } = {}): tf.Variable[] {
    const only = names && new Set(names);
    return this.order.filter((n) => !only || only.has(n)).map((n) => this.tensor(n, options.bitsOnly));
  }

  /**
   * Ends a pass: frees the float32 copies of host weights (those whose names start with `prefix` when
   * given: one layer's). Returns the bytes freed.
   */
  release(prefix = ""): number {
    let bytes = 0;
    for (const [name, v] of this.compute) {
      if (!name.startsWith(prefix)) continue;
      bytes += v.size * 4;
      v.dispose();
      this.compute.delete(name);
      this.bitsOnlyCompute.delete(name);
    }
    return bytes;
  }

  /**
   * A host weight's 16-bit values as the store holds them (no float32 copy is made), for reading straight
   * from the bits; undefined where the weights are float32. Throws WeightNotHeldError when evicted.
   */
  halfValues(name: string): HalfArray | undefined {
    this.shapeOf(name);
    if (this.dtype === "float32") return undefined;
    const v = this.host.get(name);
    if (!v) throw new WeightNotHeldError(name);
    return v as HalfArray;
  }

  /** A bfloat16 weight's bits in place, with its shape, for products read from them (native-matmul-bf16.ts). */
  bf16Weight(name: string): Bf16Weight {
    const shape = this.shapeOf(name);
    const v = this.halfValues(name);
    if (!v || shape.length !== 2)
      throw new RangeError(`${name} is not a bfloat16 matrix (${this.dtype} [${shape}])`);
    return new Bf16Weight(v, [shape[0]!, shape[1]!]);
  }

  /** A weight's values as float32 (resident: read from its tensor; host: widened). */
  async read(name: string): Promise<Float32Array> {
    this.shapeOf(name);
    const r = this.resident.get(name);
    if (r) return (await r.data()) as Float32Array;
    const v = this.host.get(name);
    if (!v) throw new WeightNotHeldError(name);
    return v instanceof HalfArray ? v.toFloat32() : v.slice();
  }

  /** A host weight's stored values (half bits or float32), for saving without rounding twice. */
  stored(name: string): StoredValues | undefined {
    this.shapeOf(name);
    return this.host.get(name);
  }

  /**
   * Overwrites a weight from float32 values (rounded into the storage dtype); a live compute copy follows.
   * An evicted weight is held again (stored from `values`, which stay the caller's).
   */
  assign(name: string, values: Float32Array): void {
    const shape = this.shapeOf(name);
    const n = shape.reduce((a, b) => a * b, 1);
    if (values.length !== n)
      throw new RangeError(`parameter ${name}: expected ${n} values, got ${values.length}`);
    if (!this.holds(name)) {
      this.hold(name, values);
      return;
    }
    const r = this.resident.get(name);
    if (r) {
      tf.tidy(() => r.assign(tf.tensor(values, shape, "float32")));
      return;
    }
    const h = this.host.get(name)!;
    if (h instanceof HalfArray) h.assign(values);
    else h.set(values);
    const c = this.compute.get(name);
    // made like the copy it replaces, so that a bf16 matrix stays tied to its bits (and bits only if it was)
    if (c) tf.tidy(() => c.assign(this.newTensor(name, h, this.bitsOnlyCompute.has(name))));
  }

  /**
   * Weight `name`'s host values were overwritten where they lie (`v`: the same memory; a gather into the
   * array the store holds): its compute copy, if any, is made again from them, the variable kept. Throws
   * where the store holds the weight elsewhere, or not at all.
   */
  storedWritten(name: string, v: StoredValues): void {
    const h = this.host.get(name);
    const bytes = (x: StoredValues) => (x instanceof HalfArray ? x.bits : x);
    if (
      !h ||
      bytes(h).buffer !== bytes(v).buffer ||
      bytes(h).byteOffset !== bytes(v).byteOffset ||
      h.length !== v.length
    )
      throw new RangeError(`parameter ${name}: the values written are not the memory the weight is held in`);
    const c = this.compute.get(name);
    if (c) tf.tidy(() => c.assign(this.newTensor(name, h, this.bitsOnlyCompute.has(name))));
  }

  /**
   * Overwrites a weight from values already in the storage dtype (half bits of `dtype`, or float32): an
   * evicted weight is held as the values themselves (no copy, nothing rounded), a held one is assigned.
   */
  assignStored(name: string, v: StoredValues): void {
    const shape = this.shapeOf(name);
    const n = shape.reduce((a, b) => a * b, 1);
    if (v.length !== n) throw new RangeError(`parameter ${name}: expected ${n} values, got ${v.length}`);
    const given = v instanceof HalfArray ? v.dtype : "float32";
    if (given !== this.dtype)
      throw new RangeError(`parameter ${name}: values in ${given}, the weights are stored in ${this.dtype}`);
    if (!this.holds(name)) this.hold(name, v);
    else this.assign(name, v instanceof HalfArray ? v.toFloat32() : v);
  }

  /** Bytes the weights take between passes, in their storage dtype: the host arrays or resident tensors held. */
  atRestBytes(): number {
    let bytes = 0;
    for (const v of this.host.values()) bytes += v.byteLength;
    for (const v of this.resident.values()) bytes += v.size * bytesPerValue("float32");
    return bytes;
  }

  /** Bytes held in tensors now: resident weights, or the compute copies of the current pass. */
  tensorBytes(): number {
    let bytes = 0;
    for (const v of this.resident.values()) bytes += v.size * 4;
    for (const v of this.compute.values()) bytes += v.size * 4;
    return bytes;
  }

  /**
   * Frees every copy of the weights (resident tensors, host arrays, compute copies): the store holds
   * nothing until weights are assigned again. Returns the bytes freed (at rest, in the storage dtype).
   */
  evict(): number {
    const bytes = this.atRestBytes();
    this.dispose();
    this.host.clear();
    return bytes;
  }

  dispose(): void {
    this.release();
    for (const v of this.resident.values()) v.dispose();
    this.resident.clear();
  }
}

/** Row-major [rows, cols] -> [cols, rows]. */
export function transpose2d<A extends Float32Array | Uint16Array>(a: A, rows: number, cols: number): A {
  const out = new (a.constructor as new (n: number) => A)(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}

/** transpose2d of stored values, in their dtype (half bits move as they are). */
export function transposeStored(v: StoredValues, rows: number, cols: number): StoredValues {
  return v instanceof HalfArray
    ? new HalfArray(v.dtype, transpose2d(v.bits, rows, cols))
    : transpose2d(v, rows, cols);
}
