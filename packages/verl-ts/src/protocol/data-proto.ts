import {
  type BatchTensor,
  checkTensor,
  concatRows,
  gatherRows,
  isTypedArray,
  sliceRows,
  type TypedArray,
  tensorsEqual,
} from "./tensor.js";

export type TensorDict = Record<string, BatchTensor>;
export type NonTensorDict = Record<string, unknown[]>;
export type MetaInfo = Record<string, unknown>;

/** Any DataProto misuse: inconsistent batch sizes, union conflicts, missing keys, bad chunk counts. */
export class DataProtoError extends Error {
  override name = "DataProtoError";
}

/**
 * The wire form of a DataProto: a plain object whose tensors are typed arrays, so the runtime's codec
 * sends them as raw frames. Produced by `toWire`, read back by `DataProto.fromWire`.
 */
export interface DataProtoWire {
  __dataproto: 1;
  batch: Record<string, { data: TypedArray; shape: number[] }>;
  nonTensorBatch: Record<string, unknown[]>;
  metaInfo: MetaInfo;
}

export function isDataProtoWire(v: unknown): v is DataProtoWire {
  return typeof v === "object" && v !== null && (v as { __dataproto?: unknown }).__dataproto === 1;
}

/**
 * The batch that flows between the driver and the workers, as in veRL: `batch` holds tensors that share
 * dim 0, `nonTensorBatch` holds per-row arrays of anything (strings, objects), `metaInfo` holds
 * batch-wide values. Operations that return a new DataProto share typed-array memory with the source
 * where they can (select, slice, chunk, split, pop) and copy where they must (concat, repeat, selectRows).
 */
export class DataProto {
  /**
   * The tensors. Adding or replacing one (`d.batch.k = t`, Object.assign, or assigning a whole new dict)
   * is checked there and then: a bad tensor, or one whose rows differ from the DataProto's, is refused.
   */
  declare batch: TensorDict;
  /** The per-row columns, checked like `batch` when one is added or replaced. */
  declare nonTensorBatch: NonTensorDict;
  metaInfo: MetaInfo;
  #batch: TensorDict;
  #nonTensor: NonTensorDict;

  constructor(init: { batch?: TensorDict; nonTensorBatch?: NonTensorDict; metaInfo?: MetaInfo } = {}) {
    if (!isRecord(init)) throw new DataProtoError(`DataProto: init must be an object, got ${describe(init)}`);
    for (const k of Object.keys(init)) {
      if (!INIT_KEYS.includes(k))
        throw new DataProtoError(`DataProto: unknown option "${k}" (known: ${INIT_KEYS.join(", ")})`);
    }
    const batch = { ...dict("batch", init.batch) } as TensorDict;
    const nonTensor = { ...dict("nonTensorBatch", init.nonTensorBatch) } as NonTensorDict;
    this.metaInfo = { ...dict("metaInfo", init.metaInfo) };
    checkRows(batch, nonTensor);
    this.#batch = this.#guard("batch", batch);
    this.#nonTensor = this.#guard("nonTensorBatch", nonTensor);
    // own enumerable accessors, so the instance still shows (and compares by) its three dicts
    Object.defineProperties(this, {
      batch: { enumerable: true, get: () => this.#batch, set: (v) => this.#replace("batch", v) },
      nonTensorBatch: {
        enumerable: true,
        get: () => this.#nonTensor,
        set: (v) => this.#replace("nonTensorBatch", v),
      },
    });
  }

  /**
   * `target` behind a proxy that checks each entry defined on it (assignment, Object.assign and
   * Object.defineProperty all define through the trap) before it lands: a tensor or column with the
   * wrong number of rows would otherwise surface later, in another method, far from the cause.
   */
  #guard<D extends TensorDict | NonTensorDict>(where: Where, target: D): D {
    return new Proxy(target, {
      defineProperty: (t, key, desc) => {
        if (typeof key !== "string")
          throw new DataProtoError(`${where}: keys must be strings, got ${String(key)}`);
        if (desc.get || desc.set)
          throw new DataProtoError(`${where}["${key}"] must be a value, not an accessor`);
        if ("value" in desc) {
          const rows = entryRows(where, key, desc.value);
          const have = firstRows(this.#batch, this.#nonTensor, { where, key });
          if (have && have.rows !== rows) {
            throw new DataProtoError(
              `${where}["${key}"] has ${rows} rows but the DataProto has ${have.rows} (${have.where}["${have.key}"])`,
            );
          }
        }
        const fresh = !Object.hasOwn(t, key);
        return Reflect.defineProperty(
          t,
          key,
          fresh ? { writable: true, enumerable: true, configurable: true, ...desc } : desc,
        );
      },
    });
  }

  /** A whole new dict for `batch` or `nonTensorBatch`, checked against the other one first. */
  #replace(where: Where, v: unknown): void {
    const next = { ...dict(where, v) };
    if (where === "batch") {
      checkRows(next as TensorDict, this.#nonTensor);
      this.#batch = this.#guard(where, next as TensorDict);
    } else {
      checkRows(this.#batch, next as NonTensorDict);
      this.#nonTensor = this.#guard(where, next as NonTensorDict);
    }
  }

  /** Builds from tensors, non-tensor columns and meta info (veRL's `DataProto.from_dict`). */
  static fromDict(
    tensors: TensorDict = {},
    nonTensors: NonTensorDict = {},
    metaInfo: MetaInfo = {},
  ): DataProto {
    return new DataProto({ batch: tensors, nonTensorBatch: nonTensors, metaInfo });
  }

  /** Number of rows (dim 0 of every tensor, length of every non-tensor column). */
  get length(): number {
    for (const t of Object.values(this.batch)) return t.shape[0]!;
    for (const v of Object.values(this.nonTensorBatch)) return v.length;
    return 0;
  }

  /** Throws DataProtoError unless every tensor and column agrees on the number of rows. */
  checkConsistency(): void {
    checkRows(this.batch, this.nonTensorBatch);
  }

  /** Tensor by key; throws naming the keys present when absent. */
  tensor<T extends TypedArray = Float32Array>(key: string): BatchTensor<T> {
    const t = this.batch[key];
    if (!t)
      throw new DataProtoError(`no tensor "${key}" in batch (has: ${Object.keys(this.batch).join(", ")})`);
    return t as BatchTensor<T>;
  }

  /** Non-tensor column by key; throws naming the keys present when absent. */
  column<T = unknown>(key: string): T[] {
    const v = this.nonTensorBatch[key];
    if (!v) {
      throw new DataProtoError(
        `no column "${key}" in nonTensorBatch (has: ${Object.keys(this.nonTensorBatch).join(", ")})`,
      );
    }
    return v as T[];
  }

  /**
   * A DataProto holding only the named keys (all when a list is omitted). Tensors are shared, not
   * copied, unless `deep` is set.
   */
  select(batchKeys?: string[], nonTensorKeys?: string[], metaInfoKeys?: string[], deep = false): DataProto {
    keyList("select", "batchKeys", batchKeys, true);
    keyList("select", "nonTensorKeys", nonTensorKeys, true);
    keyList("select", "metaInfoKeys", metaInfoKeys, true);
    flag("select", "deep", deep);
    const pick = <V>(
      src: Record<string, V>,
      keys: string[] | undefined,
      where: string,
    ): Record<string, V> => {
      if (!keys) return { ...src };
      const out: Record<string, V> = {};
      for (const k of keys) {
        if (!(k in src)) throw new DataProtoError(`select: no key "${k}" in ${where}`);
        out[k] = src[k]!;
      }
      return out;
    };
    let batch = pick(this.batch, batchKeys, "batch");
    let nonTensor = pick(this.nonTensorBatch, nonTensorKeys, "nonTensorBatch");
    let meta = pick(this.metaInfo, metaInfoKeys, "metaInfo");
    if (deep) {
      batch = Object.fromEntries(
        Object.entries(batch).map(([k, t]) => [
          k,
          { data: t.data.slice() as TypedArray, shape: [...t.shape] },
        ]),
      );
      nonTensor = Object.fromEntries(Object.entries(nonTensor).map(([k, v]) => [k, structuredClone(v)]));
      meta = structuredClone(meta);
    }
    return new DataProto({ batch, nonTensorBatch: nonTensor, metaInfo: meta });
  }

  /** Removes the named keys from this DataProto and returns them as a new one. */
  pop(batchKeys: string[] = [], nonTensorKeys: string[] = [], metaInfoKeys: string[] = []): DataProto {
    keyList("pop", "batchKeys", batchKeys);
    keyList("pop", "nonTensorKeys", nonTensorKeys);
    keyList("pop", "metaInfoKeys", metaInfoKeys);
    // select checks every key before anything is removed
    const out = this.select(batchKeys, nonTensorKeys, metaInfoKeys);
    for (const k of batchKeys) delete this.batch[k];
    for (const k of nonTensorKeys) delete this.nonTensorBatch[k];
    for (const k of metaInfoKeys) delete this.metaInfo[k];
    return out;
  }

  /** Renames keys of `batch` (veRL's `rename`); returns this. */
  rename(oldKeys: string[], newKeys: string[]): this {
    keyList("rename", "oldKeys", oldKeys);
    keyList("rename", "newKeys", newKeys);
    if (oldKeys.length !== newKeys.length) throw new DataProtoError("rename: key lists differ in length");
    const taken = oldKeys.map((k) => this.tensor(k));
    // refused before anything moves: a clash or a repeat would drop a tensor
    for (const [list, name] of [
      [oldKeys, "old key"],
      [newKeys, "new key"],
    ] as const) {
      const twice = list.find((k, i) => list.indexOf(k) !== i);
      if (twice !== undefined) throw new DataProtoError(`rename: ${name} "${twice}" appears twice`);
    }
    const clash = newKeys.find((k) => k in this.batch && !oldKeys.includes(k));
    if (clash !== undefined)
      throw new DataProtoError(`rename: "${clash}" is already a key of batch (pop or rename it first)`);
    for (const k of oldKeys) delete this.batch[k];
    newKeys.forEach((k, i) => {
      this.batch[k] = taken[i]!;
    });
    return this;
  }

  /**
   * Merges another DataProto's keys into this one (in place, returns this). A key present in both must
   * hold equal values, else DataProtoError names it.
   */
  union(other: DataProto): this {
    if (!(other instanceof DataProto))
      throw new DataProtoError(`union: expects a DataProto, got ${describe(other)}`);
    // every check before the first change, so a refused union leaves this as it was
    const mine = firstRows(this.batch, this.nonTensorBatch);
    const theirs = firstRows(other.batch, other.nonTensorBatch);
    if (mine && theirs && mine.rows !== theirs.rows) {
      throw new DataProtoError(`union: batch sizes differ (${mine.rows} vs ${theirs.rows})`);
    }
    for (const [k, t] of Object.entries(other.batch)) {
      const have = this.batch[k];
      if (have && !tensorsEqual(have, t))
        throw new DataProtoError(`union: conflicting values for batch key "${k}"`);
    }
    for (const [k, v] of Object.entries(other.nonTensorBatch)) {
      const have = this.nonTensorBatch[k];
      if (have && !deepEqual(have, v)) {
        throw new DataProtoError(`union: conflicting values for nonTensorBatch key "${k}"`);
      }
    }
    for (const [k, v] of Object.entries(other.metaInfo)) {
      if (k in this.metaInfo && !deepEqual(this.metaInfo[k], v)) {
        throw new DataProtoError(`union: conflicting values for metaInfo key "${k}"`);
      }
    }
    checkRows({ ...this.batch, ...other.batch }, { ...this.nonTensorBatch, ...other.nonTensorBatch });
    Object.assign(this.batch, other.batch);
    Object.assign(this.nonTensorBatch, other.nonTensorBatch);
    Object.assign(this.metaInfo, other.metaInfo);
    return this;
  }

  /** Rows [start, end) as a new DataProto sharing tensor memory (negative indices count from the end). */
  slice(start = 0, end = this.length): DataProto {
    integer("slice", "start", start);
    integer("slice", "end", end);
    const n = this.length;
    const s = clampIndex(start, n);
    const e = Math.max(s, clampIndex(end, n));
    const batch: TensorDict = {};
    for (const [k, t] of Object.entries(this.batch)) batch[k] = sliceRows(t, s, e);
    const nonTensor: NonTensorDict = {};
    for (const [k, v] of Object.entries(this.nonTensorBatch)) nonTensor[k] = v.slice(s, e);
    return new DataProto({ batch, nonTensorBatch: nonTensor, metaInfo: this.metaInfo });
  }

  /** A copy holding rows `indices`, in that order (veRL's `select_idxs`). */
  selectRows(indices: ArrayLike<number>): DataProto {
    const idx = Array.from(indices);
    const n = this.length;
    for (const i of idx) {
      if (!Number.isInteger(i) || i < 0 || i >= n)
        throw new DataProtoError(`row index ${i} out of range [0, ${n})`);
    }
    const batch: TensorDict = {};
    for (const [k, t] of Object.entries(this.batch)) batch[k] = gatherRows(t, idx);
    const nonTensor: NonTensorDict = {};
    for (const [k, v] of Object.entries(this.nonTensorBatch)) nonTensor[k] = idx.map((i) => v[i]);
    return new DataProto({ batch, nonTensorBatch: nonTensor, metaInfo: this.metaInfo });
  }

  /**
   * Permutes the rows in place so that new row i is old row `indices[i]` (veRL's `reorder`); `indices`
   * must be a permutation of 0..length-1. Returns this.
   */
  reorder(indices: ArrayLike<number>): this {
    const n = this.length;
    if (indices.length !== n)
      throw new DataProtoError(`reorder: got ${indices.length} indices for ${n} rows`);
    const seen = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const j = indices[i]!;
      if (!Number.isInteger(j) || j < 0 || j >= n || seen[j]) {
        throw new DataProtoError(
          `reorder: indices are not a permutation of 0..${n - 1} (at position ${i}: ${j})`,
        );
      }
      seen[j] = 1;
    }
    const moved = this.selectRows(indices);
    this.batch = moved.batch;
    this.nonTensorBatch = moved.nonTensorBatch;
    return this;
  }

  /**
   * Splits into `chunks` equal parts that share tensor memory with this one. The length must be
   * divisible by `chunks`; pad first with `padToDivisor` otherwise.
   */
  chunk(chunks: number): DataProto[] {
    if (!Number.isInteger(chunks) || chunks <= 0)
      throw new DataProtoError(`chunk: chunks must be > 0, got ${chunks}`);
    const n = this.length;
    if (n % chunks !== 0) {
      throw new DataProtoError(
        `chunk: ${n} rows cannot be split into ${chunks} equal chunks (pad to a divisor first)`,
      );
    }
    const size = n / chunks;
    return Array.from({ length: chunks }, (_, i) => this.slice(i * size, (i + 1) * size));
  }

  /** Splits into parts of `splitSize` rows (the last may be shorter), sharing tensor memory. */
  split(splitSize: number): DataProto[] {
    if (!Number.isInteger(splitSize) || splitSize <= 0) {
      throw new DataProtoError(`split: splitSize must be > 0, got ${splitSize}`);
    }
    const out: DataProto[] = [];
    for (let s = 0; s < this.length; s += splitSize) out.push(this.slice(s, s + splitSize));
    return out;
  }

  /**
   * Concatenates along dim 0. Every part must hold the same keys. metaInfo is the first part's, with
   * keys only later parts hold added.
   */
  static concat(parts: DataProto[]): DataProto {
    if (!Array.isArray(parts))
      throw new DataProtoError(`concat: expects an array of DataProto, got ${describe(parts)}`);
    parts.forEach((p, i) => {
      if (!(p instanceof DataProto))
        throw new DataProtoError(`concat: part ${i} is not a DataProto (got ${describe(p)})`);
    });
    if (parts.length === 0) throw new DataProtoError("concat: nothing to concatenate");
    const first = parts[0]!;
    const bKeys = Object.keys(first.batch).sort().join(",");
    const nKeys = Object.keys(first.nonTensorBatch).sort().join(",");
    parts.forEach((p, i) => {
      if (
        Object.keys(p.batch).sort().join(",") !== bKeys ||
        Object.keys(p.nonTensorBatch).sort().join(",") !== nKeys
      ) {
        throw new DataProtoError(`concat: part ${i} holds different keys than part 0`);
      }
    });
    const batch: TensorDict = {};
    for (const k of Object.keys(first.batch)) {
      batch[k] = concatRows(
        parts.map((p) => p.batch[k]!),
        `batch["${k}"]`,
      );
    }
    const nonTensor: NonTensorDict = {};
    for (const k of Object.keys(first.nonTensorBatch))
      nonTensor[k] = parts.flatMap((p) => p.nonTensorBatch[k]!);
    const meta: MetaInfo = {};
    for (const p of parts) for (const [k, v] of Object.entries(p.metaInfo)) if (!(k in meta)) meta[k] = v;
    return new DataProto({ batch, nonTensorBatch: nonTensor, metaInfo: meta });
  }

  /**
   * Repeats rows `times` times: interleaved gives a,a,b,b (veRL's default, used for rollout.n);
   * otherwise the whole batch is tiled: a,b,a,b.
   */
  repeat(times: number, interleave = true): DataProto {
    if (!Number.isInteger(times) || times < 1)
      throw new DataProtoError(`repeat: times must be >= 1, got ${times}`);
    flag("repeat", "interleave", interleave);
    const n = this.length;
    const idx = new Array<number>(n * times);
    for (let i = 0; i < n; i++) {
      for (let r = 0; r < times; r++) idx[interleave ? i * times + r : r * n + i] = i;
    }
    return this.selectRows(idx);
  }

  /**
   * Pads to a multiple of `divisor` by appending copies of the first rows (cycling), as veRL's
   * `pad_dataproto_to_divisor` does. Returns the padded DataProto and how many rows were added.
   */
  padToDivisor(divisor: number): { data: DataProto; padSize: number } {
    if (!Number.isInteger(divisor) || divisor <= 0)
      throw new DataProtoError(`padToDivisor: bad divisor ${divisor}`);
    const n = this.length;
    if (n % divisor === 0) return { data: this, padSize: 0 };
    if (n === 0) throw new DataProtoError("padToDivisor: cannot pad an empty DataProto");
    const padSize = divisor - (n % divisor);
    const idx = Array.from({ length: n + padSize }, (_, i) => (i < n ? i : (i - n) % n));
    return { data: this.selectRows(idx), padSize };
  }

  /** Drops the last `padSize` rows added by `padToDivisor` (a view, no copy). */
  unpad(padSize: number): DataProto {
    if (!Number.isInteger(padSize) || padSize < 0 || padSize > this.length) {
      throw new DataProtoError(
        `unpad: padSize must be an integer in [0, ${this.length}], got ${describe(padSize)}`,
      );
    }
    if (padSize === 0) return this;
    return this.slice(0, this.length - padSize);
  }

  /** Plain-object form whose typed arrays the runtime sends as raw frames (no copies into JSON). */
  toWire(): DataProtoWire {
    const batch: DataProtoWire["batch"] = {};
    for (const [k, t] of Object.entries(this.batch)) batch[k] = { data: t.data, shape: [...t.shape] };
    return {
      __dataproto: 1,
      batch,
      nonTensorBatch: { ...this.nonTensorBatch },
      metaInfo: { ...this.metaInfo },
    };
  }

  /** Reads the wire form back (validating it); the typed arrays are used as they are. */
  static fromWire(wire: DataProtoWire): DataProto {
    if (!isDataProtoWire(wire)) throw new DataProtoError("fromWire: not a DataProto wire object");
    const batch: TensorDict = {};
    for (const [k, t] of Object.entries(wire.batch ?? {})) {
      if (!isTypedArray(t?.data))
        throw new DataProtoError(`fromWire: batch["${k}"].data is not a typed array`);
      batch[k] = { data: t.data, shape: Array.from(t.shape) };
    }
    return new DataProto({ batch, nonTensorBatch: wire.nonTensorBatch ?? {}, metaInfo: wire.metaInfo ?? {} });
  }

  toString(): string {
    const b = Object.entries(this.batch).map(
      ([k, t]) => `${k}: ${t.data.constructor.name}[${t.shape.join(", ")}]`,
    );
    return `DataProto(length=${this.length}, batch={${b.join("; ")}}, nonTensorBatch=[${Object.keys(
      this.nonTensorBatch,
    ).join(", ")}], metaInfo=[${Object.keys(this.metaInfo).join(", ")}])`;
  }
}

type Where = "batch" | "nonTensorBatch";

const INIT_KEYS = ["batch", "nonTensorBatch", "metaInfo"];

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !isTypedArray(v);
}

/** A value as an error message shows it: strings quoted, NaN as NaN, lists and objects by kind. */
function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return "an array";
  if (v instanceof DataProto) return "a DataProto";
  if (typeof v === "object" && v !== null) return `an object (${v.constructor?.name ?? "no prototype"})`;
  return String(v);
}

/** `init[key]` of the constructor (or a whole new dict): a plain object, or absent. */
function dict(key: string, v: unknown): Record<string, unknown> {
  if (v === undefined) return {};
  if (!isRecord(v))
    throw new DataProtoError(`DataProto: ${key} must be an object of named entries, got ${describe(v)}`);
  return v;
}

/** Throws unless `v` is an integer (an index or a count: a fraction or NaN would shift rows silently). */
function integer(method: string, arg: string, v: unknown): void {
  if (!Number.isInteger(v))
    throw new DataProtoError(`${method}: ${arg} must be an integer, got ${describe(v)}`);
}

function flag(method: string, arg: string, v: unknown): void {
  if (typeof v !== "boolean")
    throw new DataProtoError(`${method}: ${arg} must be a boolean, got ${describe(v)}`);
}

/** Throws unless `v` is an array of strings (a string would be read letter by letter); absent if `optional`. */
function keyList(method: string, arg: string, v: unknown, optional = false): void {
  if (optional && v === undefined) return;
  if (!Array.isArray(v) || v.some((k) => typeof k !== "string"))
    throw new DataProtoError(`${method}: ${arg} must be an array of strings, got ${describe(v)}`);
}

/** The rows of one entry, after checking it: a tensor with a batch dim, or an array (one entry per row). */
function entryRows(where: Where, key: string, v: unknown): number {
  if (where === "nonTensorBatch") {
    if (!Array.isArray(v))
      throw new DataProtoError(`nonTensorBatch["${key}"] must be an array (one entry per row)`);
    return v.length;
  }
  const t = v as Partial<BatchTensor> | undefined;
  try {
    checkTensor(t?.data, t?.shape, `batch["${key}"]`);
  } catch (e) {
    throw new DataProtoError((e as Error).message);
  }
  if (t!.shape!.length === 0)
    throw new DataProtoError(`batch["${key}"] is a scalar; tensors need a batch dim`);
  return t!.shape![0]!;
}

/** The rows of the first entry (leaving out `skip`, the one about to be replaced); undefined when none. */
function firstRows(
  batch: TensorDict,
  nonTensor: NonTensorDict,
  skip?: { where: Where; key: string },
): { where: Where; key: string; rows: number } | undefined {
  for (const [where, d] of [
    ["batch", batch],
    ["nonTensorBatch", nonTensor],
  ] as const) {
    for (const [key, v] of Object.entries(d)) {
      if (skip?.where === where && skip.key === key) continue;
      return { where, key, rows: where === "batch" ? (v as BatchTensor).shape[0]! : (v as unknown[]).length };
    }
  }
  return undefined;
}

/** Checks every entry and that all agree on the number of rows (DataProtoError naming two that differ). */
function checkRows(batch: TensorDict, nonTensor: NonTensorDict): void {
  let n: number | undefined;
  let firstKey = "";
  for (const [where, d] of [
    ["batch", batch],
    ["nonTensorBatch", nonTensor],
  ] as const) {
    for (const [key, v] of Object.entries(d)) {
      const len = entryRows(where, key, v);
      if (n === undefined) {
        n = len;
        firstKey = key;
      } else if (len !== n) {
        throw new DataProtoError(`batch size mismatch: "${firstKey}" has ${n} rows but "${key}" has ${len}`);
      }
    }
  }
}

function clampIndex(i: number, n: number): number {
  if (i < 0) i += n;
  return Math.min(Math.max(i, 0), n);
}

export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a === "number" && typeof b === "number") return Number.isNaN(a) && Number.isNaN(b);
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (isTypedArray(a) || isTypedArray(b)) {
    if (!isTypedArray(a) || !isTypedArray(b) || a.constructor !== b.constructor || a.length !== b.length)
      return false;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (const k of ka) {
    if (!deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}
