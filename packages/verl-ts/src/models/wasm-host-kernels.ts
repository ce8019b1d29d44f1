/**
 * Two wasm kernels for what grows with the vocabulary and the weights rather than with the tokens:
 *
 * - Widening 16-bit weights into a float32 tensor: written straight into the tensor's memory on the wasm
 *   heap. The generic path widened into a fresh host Float32Array (a full-precision copy of the weight
 *   per use) and then copied that into the heap.
 * - The embedding's gradient: the rows of dy added into a zeroed [vocab, hidden] tensor in one pass. tfjs's
 *   gather gradient transposes dy, runs an unsorted segment sum over all vocab rows, then transposes the
 *   [vocab, hidden] result back with an identity permutation, a full copy: at a 151,936-entry vocabulary,
 *   seconds per micro-batch for a gradient that is zero but for a few dozen rows.
 *
 * Both are plain TypeScript over heap views (no addon needed). Other backends keep the generic ops.
 */
import * as tf from "@tensorflow/tfjs";
import { HalfArray } from "./half-precision.js";
import {
  type Bf16Layout,
  Bf16Weight,
  markValuesUnwritten,
  refuseUnwritten,
  rememberBf16Bits,
} from "./native-matmul-bf16.js";
import { nativeMatmulActive } from "./native-state.js";
import type { WasmHeap } from "./wasm-heap.js";

export const WIDEN_KERNEL = "TorlWidenHalf";
export const WIDEN_ROWS_KERNEL = "TorlWidenHalfRows";
export const ALLOCATE_KERNEL = "TorlAllocate";
export const EMBEDDING_GRAD_KERNEL = "TorlEmbeddingGrad";

interface WidenAttrs {
  values: HalfArray;
  shape: number[];
}

/** A float32 tensor's memory on the heap, its values not written (bitsOnlyTensor). */
function allocateKernel({ attrs, backend }: Parameters<tf.KernelFunc>[0]): tf.TensorInfo {
  const { shape } = attrs as unknown as { shape: number[] };
  return (backend as unknown as WasmHeap).makeOutput(shape, "float32");
}

function widenKernel({ attrs, backend }: Parameters<tf.KernelFunc>[0]): tf.TensorInfo {
  const { values, shape } = attrs as unknown as WidenAttrs;
  const wasm = backend as unknown as WasmHeap;
  const out = wasm.makeOutput(shape, "float32");
  values.toFloat32(wasm.typedArrayFromHeap(out));
  return out;
}

interface WidenRowsAttrs {
  values: HalfArray;
  ids: Int32Array;
  width: number;
}

/** Rows `ids` of 16-bit values [rows, width], widened into `out` [ids.length, width]. */
function widenRowsInto(values: HalfArray, ids: Int32Array, width: number, out: Float32Array): void {
  const rows = values.length / width;
  for (let r = 0; r < ids.length; r++) {
    const id = ids[r]!;
    if (!(id >= 0 && id < rows)) throw new RangeError(`row ${id} outside 0..${rows - 1}`);
    const row = new HalfArray(values.dtype, values.bits.subarray(id * width, (id + 1) * width));
    row.toFloat32(out.subarray(r * width, (r + 1) * width));
  }
}

function widenRowsKernel({ attrs, backend }: Parameters<tf.KernelFunc>[0]): tf.TensorInfo {
  const { values, ids, width } = attrs as unknown as WidenRowsAttrs;
  const wasm = backend as unknown as WasmHeap;
  const out = wasm.makeOutput([ids.length, width], "float32");
  widenRowsInto(values, ids, width, wasm.typedArrayFromHeap(out));
  return out;
}

interface EmbeddingGradAttrs {
  ids: Int32Array;
  vocab: number;
}

function checkEmbeddingGradSizes(
  dy: Float32Array,
  ids: Int32Array,
  vocab: number,
  hidden: number,
  out: Float32Array,
): void {
  if (dy.length !== ids.length * hidden || out.length !== vocab * hidden)
    throw new RangeError(
      `embedding gradient: ${dy.length} values of dy for ${ids.length} ids x ${hidden}, ${out.length} for ${vocab} x ${hidden}`,
    );
}

/** dy [rows, h] and ids [rows] -> d table [vocab, h]: zero but for the rows ids name (repeats add up). */
export function embeddingGradInto(
  dy: Float32Array,
  ids: Int32Array,
  vocab: number,
  hidden: number,
  out: Float32Array,
): void {
  checkEmbeddingGradSizes(dy, ids, vocab, hidden, out);
  out.fill(0);
  addRowsById(dy, ids, vocab, hidden, out, (id) => id);
}

/**
 * Adds the embedding's gradient from dy [rows, h] and ids [rows] into `out` [vocab, h] (a buffer that
 * holds other gradients of the same matrix) touching only the rows ids name: per id the rows of dy are
 * summed from zero in the order embeddingGradInto adds them, then that sum is added to `out`, so each
 * such row of `out` gets the bits that adding embeddingGradInto's dense result gives. The other rows
 * would get `+ 0`, which changes no value (only a -0 into +0).
 */
export function addEmbeddingGradRows(
  dy: Float32Array,
  ids: Int32Array,
  vocab: number,
  hidden: number,
  out: Float32Array,
): void {
  checkEmbeddingGradSizes(dy, ids, vocab, hidden, out);
  const slotOf = new Map<number, number>();
  const sums = new Float32Array(ids.length * hidden);
  // every id is checked before `out` is touched
  addRowsById(dy, ids, vocab, hidden, sums, (id) => {
    let slot = slotOf.get(id);
    if (slot === undefined) slotOf.set(id, (slot = slotOf.size));
    return slot;
  });
  for (const [id, slot] of slotOf) {
    const o = id * hidden;
    const s = slot * hidden;
    for (let j = 0; j < hidden; j++) out[o + j]! += sums[s + j]!;
  }
}

/** Adds row r of dy [rows, h] to row rowOf(ids[r]) of `into`, in order of r; refuses an id outside the vocabulary. */
function addRowsById(
  dy: Float32Array,
  ids: Int32Array,
  vocab: number,
  hidden: number,
  into: Float32Array,
  rowOf: (id: number) => number,
): void {
  for (let r = 0; r < ids.length; r++) {
    const id = ids[r]!;
    if (id < 0 || id >= vocab) throw new RangeError(`embedding gradient: id ${id} outside 0..${vocab - 1}`);
    const o = rowOf(id) * hidden;
    const s = r * hidden;
    for (let j = 0; j < hidden; j++) into[o + j]! += dy[s + j]!;
  }
}

function embeddingGradKernel({ inputs, attrs, backend }: Parameters<tf.KernelFunc>[0]): tf.TensorInfo {
  const { dy } = inputs as { dy: tf.TensorInfo };
  const { ids, vocab } = attrs as unknown as EmbeddingGradAttrs;
  const hidden = dy.shape[dy.shape.length - 1]!;
  const wasm = backend as unknown as WasmHeap;
  const out = wasm.makeOutput([vocab, hidden], "float32");
  embeddingGradInto(wasm.typedArrayFromHeap(dy), ids, vocab, hidden, wasm.typedArrayFromHeap(out));
  return out;
}

let installed = false;

/** Registers both kernels on the wasm backend (once per process). */
export function installWasmHostKernels(): void {
  if (installed) return;
  tf.registerKernel({ kernelName: WIDEN_KERNEL, backendName: "wasm", kernelFunc: widenKernel });
  tf.registerKernel({ kernelName: ALLOCATE_KERNEL, backendName: "wasm", kernelFunc: allocateKernel });
  tf.registerKernel({ kernelName: WIDEN_ROWS_KERNEL, backendName: "wasm", kernelFunc: widenRowsKernel });
  tf.registerKernel({
    kernelName: EMBEDDING_GRAD_KERNEL,
    backendName: "wasm",
    kernelFunc: embeddingGradKernel,
  });
  installed = true;
}

function onWasm(): boolean {
  return installed && tf.getBackend() === "wasm";
}

/**
 * A float32 tensor of 16-bit values: widened in the tensor's own memory on wasm, via a host copy elsewhere.
 * On wasm a bfloat16 matrix's tensor is tied to its bits (bf16BitsOf), which the caller must leave as they
 * are while the tensor lives (a variable assigned new values gets new data and loses the tie).
 */
export function widenedTensor(values: HalfArray, shape: number[]): tf.Tensor {
  if (!onWasm()) return tf.tensor(values.toFloat32(), shape, "float32");
  const attrs = { values, shape } as unknown as tf.NamedAttrMap;
  const t = tf.engine().runKernel(WIDEN_KERNEL, {}, attrs) as tf.Tensor;
  // A bf16 matrix keeps its bits beside it: products read them (linear.ts), as a pass without a tape does.
  if (values.dtype === "bfloat16" && shape.length === 2)
    rememberBf16Bits(t, new Bf16Weight(values, [shape[0]!, shape[1]!]));
  return t;
}

/**
 * The tensor a tape takes a bfloat16 matrix's gradient through, where every product with it reads its bits
 * (linear.ts, on wasm with the addon's products): its float32 values are never written, which saves
 * writing 4 bytes a value per use (at Qwen2.5-0.5B's size 60 MB a layer, four times a layer per update).
 * The linear layers refuse it where they would read the values instead (no addon). For weights that go
 * into linear layers only (the update's per-layer gathers); elsewhere, and off wasm, widenedTensor.
 */
export function bitsOnlyTensor(
  values: HalfArray,
  shape: [number, number],
  layout: Bf16Layout = "rows",
): tf.Tensor {
  if (!onWasm() || values.dtype !== "bfloat16" || !nativeMatmulActive("wasm")) {
    // widening reads the bits row-major: bits in the tile layout are the addon's products' alone
    if (layout === "tiles")
      throw new Error(
        `a [${shape}] weight in the tile layout is read by the addon's products on wasm only; this process runs ${tf.getBackend()}${nativeMatmulActive("wasm") ? "" : " without them"}`,
      );
    return widenedTensor(values, shape);
  }
  const attrs = { shape } as unknown as tf.NamedAttrMap;
  const t = tf.engine().runKernel(ALLOCATE_KERNEL, {}, attrs) as tf.Tensor;
  rememberBf16Bits(t, new Bf16Weight(values, shape, layout));
  markValuesUnwritten(t);
  return t;
}

/**
 * Rows `ids` of 16-bit values [rows, width] as a float32 tensor [ids.length, width]: only those rows are
 * widened (a pass without a gradient tape looks tokens up in the bf16 embedding without a float32 copy of
 * it). No gradient.
 */
export function widenedRows(values: HalfArray, ids: Int32Array, width: number): tf.Tensor2D {
  if (!onWasm()) {
    const out = new Float32Array(ids.length * width);
    widenRowsInto(values, ids, width, out);
    return tf.tensor2d(out, [ids.length, width]);
  }
  const attrs = { values, ids: ids.slice(), width } as unknown as tf.NamedAttrMap;
  return tf.engine().runKernel(WIDEN_ROWS_KERNEL, {}, attrs) as tf.Tensor2D;
}

/**
 * Rows `ids` of `table` [vocab, h] as [rows, h], differentiable in `table`: on wasm the gradient is the
 * one-pass kernel above, elsewhere tf.gather's own.
 */
export function embeddingRows(table: tf.Tensor, ids: Int32Array): tf.Tensor2D {
  refuseUnwritten(table, "an embedding lookup");
  if (!onWasm()) return tf.gather(table, tf.tensor1d(ids, "int32")) as tf.Tensor2D;
  // the backward reads the ids later: a copy of its own, whatever the caller does with its array
  const attrs = { ids: ids.slice(), vocab: table.shape[0] } as unknown as tf.NamedAttrMap;
  const op = tf.customGrad(((...args: unknown[]) => {
    const [w] = args as [tf.Tensor];
    return {
      value: tf.gather(w, tf.tensor1d(ids, "int32")),
      gradFunc: (dy: tf.Tensor) => [tf.engine().runKernel(EMBEDDING_GRAD_KERNEL, { dy }, attrs) as tf.Tensor],
    };
  }) as Parameters<typeof tf.customGrad<tf.Tensor2D>>[0]);
  return op(table) as tf.Tensor2D;
}
