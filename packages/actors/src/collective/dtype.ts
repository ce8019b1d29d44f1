import { CollectiveArgumentError } from "./errors.js";

/** Typed arrays the collectives accept (BigInt arrays and Uint8ClampedArray are not supported). */
export type CollectiveArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Int16Array
  | Int32Array
  | Uint8Array
  | Uint16Array
  | Uint32Array;

/**
 * Reduction applied element-wise across ranks. `mean` divides the sum by the world size; on
 * integer arrays the sum wraps like the array type and the division truncates toward zero.
 */
export type ReduceOp = "sum" | "mean" | "max" | "min" | "prod";

export const REDUCE_OPS: readonly ReduceOp[] = ["sum", "mean", "max", "min", "prod"];

type Ctor = {
  new (length: number): CollectiveArray;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): CollectiveArray;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
};

const CTORS: readonly Ctor[] = [
  Float32Array,
  Float64Array,
  Int8Array,
  Int16Array,
  Int32Array,
  Uint8Array,
  Uint16Array,
  Uint32Array,
];

/** Wire code of an array's element type (index in CTORS), or -1 when unsupported. */
export function dtypeCode(arr: unknown): number {
  if (!ArrayBuffer.isView(arr)) return -1;
  // Buffer is a Uint8Array subclass: accept it as Uint8Array.
  for (let i = 0; i < CTORS.length; i++) {
    if (arr.constructor === CTORS[i]) return i;
  }
  if (arr instanceof Uint8Array && !(arr instanceof Uint8ClampedArray)) return 5;
  return -1;
}

export function ctorOf(code: number): Ctor {
  return CTORS[code]!;
}

export function dtypeName(code: number): string {
  return CTORS[code]?.name ?? `dtype#${code}`;
}

export function isFloatCode(code: number): boolean {
  return code <= 1;
}

type Kernel = (acc: CollectiveArray, src: CollectiveArray) => void;

const KERNEL_BODIES: Record<ReduceOp, string> = {
  sum: "for (let i = 0; i < n; i++) acc[i] += src[i];",
  mean: "for (let i = 0; i < n; i++) acc[i] += src[i];",
  // NaN wins, like Math.max.
  max: "for (let i = 0; i < n; i++) { const b = src[i]; if (b > acc[i] || b !== b) acc[i] = b; }",
  min: "for (let i = 0; i < n; i++) { const b = src[i]; if (b < acc[i] || b !== b) acc[i] = b; }",
  prod: "for (let i = 0; i < n; i++) acc[i] *= src[i];",
};
// 32-bit integer products can pass 2^53: multiply modulo 2^32 so they stay exact.
const IMUL_BODY = "for (let i = 0; i < n; i++) acc[i] = Math.imul(acc[i], src[i]);";

const kernels = new Map<string, Kernel>();
/** Kernels registered by the process (registerReduceKernel), by op and element type. */
const registered = new Map<string, Kernel>();

/**
 * One compiled loop per (op, element type): each `new Function` gets its own type feedback, so
 * every loop stays monomorphic (about 2x faster than one generic loop over all array types).
 */
function kernel(op: ReduceOp, code: number): Kernel {
  const key = `${op}/${code}`;
  let k = registered.get(key) ?? kernels.get(key);
  if (!k) {
    const isInt32 = code === 4 || code === 7;
    const body = op === "prod" && isInt32 ? IMUL_BODY : KERNEL_BODIES[op];
    k = new Function("acc", "src", `"use strict"; const n = acc.length; ${body}`) as Kernel;
    kernels.set(key, k);
  }
  return k;
}

/** Element-wise `acc[i] = acc[i] (op) src[i]`; `mean` accumulates like `sum`. */
export function accumulate(op: ReduceOp, acc: CollectiveArray, src: CollectiveArray): void {
  kernel(op, dtypeCode(acc))(acc, src);
}

/** Last step of an op on the fully reduced values (only `mean` does anything). */
export function finalize(op: ReduceOp, acc: CollectiveArray, worldSize: number): void {
  if (op !== "mean" || worldSize === 1) return;
  const n = acc.length;
  // Integer arrays truncate toward zero on assignment (ToInt32 / ToUint32 semantics).
  for (let i = 0; i < n; i++) acc[i] = acc[i]! / worldSize;
}

/** The element types a reduce kernel can be registered for (the float ones: see registerReduceKernel). */
export type ReduceKernelArray = Float32ArrayConstructor | Float64ArrayConstructor;

/**
 * Makes `kernel(acc, src)` this process's loop for `op` ("sum" or "mean", whose loop is the sum's) on
 * arrays of `ctor`, in place of the built-in JavaScript loop: a native one, for instance, where the
 * reductions of large arrays are a visible share of a step. It must compute `acc[i] += src[i]` for every
 * i, one IEEE addition per element in the arrays' own precision, so that the results are the same bits
 * as the built-in loop's (a loop that sums in another precision or order is not a drop-in). Returns a
 * function that puts back the kernel registered before. Refuses other ops, types and non-functions
 * with a CollectiveArgumentError.
 */
export function registerReduceKernel(
  op: ReduceOp,
  ctor: ReduceKernelArray,
  kernel: (acc: Float32Array | Float64Array, src: Float32Array | Float64Array) => void,
): () => void {
  if (op !== "sum" && op !== "mean")
    throw new CollectiveArgumentError(
      `registerReduceKernel: op must be "sum" or "mean", got ${JSON.stringify(op)}`,
      "",
    );
  const code = CTORS.indexOf(ctor as unknown as Ctor);
  if (code < 0 || code > 1)
    throw new CollectiveArgumentError(
      `registerReduceKernel: the array type must be Float32Array or Float64Array, got ${String((ctor as { name?: string })?.name ?? ctor)}`,
      "",
    );
  if (typeof kernel !== "function")
    throw new CollectiveArgumentError(
      `registerReduceKernel: kernel must be a function, got ${typeof kernel}`,
      "",
    );
  const key = `${op}/${code}`;
  const before = registered.get(key);
  registered.set(key, kernel as Kernel);
  return () => {
    if (before) registered.set(key, before);
    else registered.delete(key);
  };
}
