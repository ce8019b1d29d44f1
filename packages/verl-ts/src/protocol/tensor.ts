/**
 * A minimal n-dimensional tensor for the driver side and for the wire: a flat typed array in row-major
 * order plus its shape. Dim 0 is the batch dimension when the tensor sits in a DataProto.
 */
import type { CollectiveArray } from "@torl-ts/actors";

/** The element types a tensor may hold: those the collectives reduce, plus the 64-bit integer ones. */
export type TypedArray = CollectiveArray | BigInt64Array | BigUint64Array;

export interface BatchTensor<T extends TypedArray = TypedArray> {
  data: T;
  shape: number[];
}

/** Thrown when a tensor's data does not match its shape or two tensors disagree in shape. */
export class TensorShapeError extends Error {
  override name = "TensorShapeError";
}

export function isTypedArray(v: unknown): v is TypedArray {
  return ArrayBuffer.isView(v) && !(v instanceof DataView);
}

export function shapeSize(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Builds a tensor, checking that `data.length` equals the product of `shape`. */
export function batchTensor<T extends TypedArray>(data: T, shape: number[]): BatchTensor<T> {
  checkTensor(data, shape, "tensor");
  return { data, shape: [...shape] };
}

export function checkTensor(data: unknown, shape: unknown, what: string): void {
  if (!isTypedArray(data)) throw new TensorShapeError(`${what}: data must be a typed array`);
  if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 0)) {
    throw new TensorShapeError(
      `${what}: shape must be an array of non-negative integers, got ${String(shape)}`,
    );
  }
  if (shapeSize(shape) !== data.length) {
    throw new TensorShapeError(
      `${what}: shape [${shape.join(", ")}] holds ${shapeSize(shape)} elements but data has ${data.length}`,
    );
  }
}

/** Elements per row (product of all dims but the first). */
export function rowSize(t: BatchTensor): number {
  return shapeSize(t.shape.slice(1));
}

type TypedArrayCtor = { new (n: number): TypedArray; name: string };

export function emptyLike(t: TypedArray, length: number): TypedArray {
  return new (t.constructor as TypedArrayCtor)(length);
}

/** A copy of rows `indices` (in that order). */
export function gatherRows(t: BatchTensor, indices: ArrayLike<number>): BatchTensor {
  const rs = rowSize(t);
  const out = emptyLike(t.data, indices.length * rs);
  for (let i = 0; i < indices.length; i++) {
    const src = indices[i]!;
    if (!Number.isInteger(src) || src < 0 || src >= t.shape[0]!) {
      throw new RangeError(`row index ${src} out of range [0, ${t.shape[0]})`);
    }
    (out as any).set((t.data as any).subarray(src * rs, (src + 1) * rs), i * rs);
  }
  return { data: out, shape: [indices.length, ...t.shape.slice(1)] };
}

/** Rows [start, end) as a view sharing memory with `t` (no copy). */
export function sliceRows(t: BatchTensor, start: number, end: number): BatchTensor {
  const rs = rowSize(t);
  return {
    data: t.data.subarray(start * rs, end * rs) as TypedArray,
    shape: [end - start, ...t.shape.slice(1)],
  };
}

/** Concatenates tensors along dim 0; all must share the trailing shape and the array type. */
export function concatRows(parts: BatchTensor[], what = "tensor"): BatchTensor {
  if (parts.length === 0) throw new TensorShapeError(`${what}: nothing to concatenate`);
  const first = parts[0]!;
  const tail = first.shape.slice(1).join(",");
  let rows = 0;
  for (const p of parts) {
    if (p.shape.slice(1).join(",") !== tail) {
      throw new TensorShapeError(
        `${what}: cannot concatenate shapes [${first.shape.join(", ")}] and [${p.shape.join(", ")}]`,
      );
    }
    if (p.data.constructor !== first.data.constructor) {
      throw new TensorShapeError(
        `${what}: cannot concatenate ${first.data.constructor.name} and ${p.data.constructor.name}`,
      );
    }
    rows += p.shape[0]!;
  }
  const out = emptyLike(first.data, rows * rowSize(first));
  let off = 0;
  for (const p of parts) {
    (out as any).set(p.data, off);
    off += p.data.length;
  }
  return { data: out, shape: [rows, ...first.shape.slice(1)] };
}

export function tensorsEqual(a: BatchTensor, b: BatchTensor): boolean {
  if (a.shape.length !== b.shape.length || a.shape.some((d, i) => d !== b.shape[i])) return false;
  if (a.data.constructor !== b.data.constructor) return false;
  if (a.data === b.data) return true;
  for (let i = 0; i < a.data.length; i++) {
    const x = a.data[i]!;
    const y = b.data[i]!;
    if (x !== y && !(Number.isNaN(x as number) && Number.isNaN(y as number))) return false;
  }
  return true;
}
