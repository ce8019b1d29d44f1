/**
 * What may travel between processes, checked before a value is encoded, so that nothing arrives
 * as something else (msgpack alone turns a function into nil and a class instance into a plain
 * object without a word).
 *
 * Travels faithfully: primitives (BigInt within 64 bits), `undefined`, plain objects and arrays,
 * Map, Set, Date, RegExp, Error (name, message, stack, own fields), typed arrays and Buffers,
 * ArrayBuffer, DataView, ObjectRefs, actor handles, and instances of classes registered with
 * `registerSerializer`. Everything else is refused with a SerializationError naming its path.
 *
 * The check is one walk over the value (typed arrays and other leaves are not entered). Maps need
 * a box to survive msgpack (which writes them like plain objects): when the walk meets one, the
 * value is copied once with its Maps boxed; values without Maps are sent as they are.
 */
import { SerializationError } from "../errors.js";

/** Prototypes of classes that the codec encodes itself (their instances are not entered). */
const leafPrototypes = new Set<object>([
  Date.prototype,
  RegExp.prototype,
  ArrayBuffer.prototype,
  DataView.prototype,
]);

/** Prototypes of classes registered with a serializer (entered only by the serializer). */
const registeredPrototypes = new Set<object>();

/** Whether `v` is an instance of a class registered with registerSerializer (its serializer may throw). */
export function hasUserSerializer(v: object): boolean {
  return registeredPrototypes.has(Object.getPrototypeOf(v));
}

/** Called by the codec for each class it encodes as a whole. */
export function markLeafClass(Class: { prototype: object }, registeredByUser = false): void {
  (registeredByUser ? registeredPrototypes : leafPrototypes).add(Class.prototype);
}

/** Deeper than this is treated as a cycle until a slower walk tells which it is. */
const MAX_DEPTH = 256;
const BIGINT_MIN = -(2n ** 63n);
const BIGINT_MAX = 2n ** 64n - 1n;

/** A Map as it travels: its entries flattened [k0, v0, k1, v1, ...]. */
export class BoxedMap {
  constructor(readonly flat: unknown[]) {}
}

/** -0 as it travels: msgpack writes it as the integer 0. */
export class NegativeZero {}
const NEGATIVE_ZERO = new NegativeZero();

/**
 * Arrays up to this long are checked for own properties beside their elements, which no encoding of
 * arrays carries. Listing an array's keys costs about twenty times a walk over its elements, so longer
 * arrays are not checked (documented in "What travels").
 */
export const ARRAY_PROPERTIES_CHECKED_UP_TO = 256;

const UNSENDABLE = Symbol("unsendable");
const HAS_MAP = 1;
const HAS_NEGATIVE_ZERO = 2;

/** The first own enumerable property of `a` that is not an element, if `a` is short enough to look. */
function extraArrayKey(a: unknown[]): string | undefined {
  if (a.length > ARRAY_PROPERTIES_CHECKED_UP_TO) return undefined;
  const keys = Object.keys(a);
  // elements come first, in ascending order, then the other properties: if there is one, it is last
  const last = keys[keys.length - 1];
  if (last === undefined || isIndexOf(a, last)) return undefined;
  return keys.find((k) => !isIndexOf(a, k));
}

function isIndexOf(a: unknown[], key: string): boolean {
  const n = Number(key);
  return Number.isInteger(n) && n >= 0 && n < a.length && String(n) === key;
}

/**
 * 0 if `v` can be encoded as it is; else the flags of what must be boxed first (HAS_MAP, a Map;
 * HAS_NEGATIVE_ZERO, a -0); throws UNSENDABLE for what cannot travel.
 */
function scan(v: unknown, depth: number): number {
  switch (typeof v) {
    case "object":
      break;
    case "number":
      return v === 0 && 1 / v < 0 ? HAS_NEGATIVE_ZERO : 0;
    case "function":
    case "symbol":
      throw UNSENDABLE;
    case "bigint":
      if ((v as bigint) < BIGINT_MIN || (v as bigint) > BIGINT_MAX) throw UNSENDABLE;
      return 0;
    default:
      return 0;
  }
  if (v === null) return 0;
  if (depth > MAX_DEPTH) throw UNSENDABLE;
  let flags = 0;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) flags |= scan(v[i], depth + 1);
    if (extraArrayKey(v) !== undefined) throw UNSENDABLE;
    return flags;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto === Object.prototype || proto === null) {
    const o = v as Record<string, unknown>;
    for (const k in o) flags |= scan(o[k], depth + 1);
    return flags;
  }
  if (leafPrototypes.has(proto) || registeredPrototypes.has(proto)) return 0;
  if (proto === Map.prototype) {
    for (const [k, x] of v as Map<unknown, unknown>) {
      scan(k, depth + 1);
      scan(x, depth + 1);
    }
    return HAS_MAP;
  }
  if (proto === Set.prototype) {
    for (const x of v as Set<unknown>) flags |= scan(x, depth + 1);
    return flags;
  }
  if (ArrayBuffer.isView(v) || v instanceof Error) return 0;
  throw UNSENDABLE;
}

/** A copy of `v` with every Map and every -0 boxed (only called when scan found one). */
function boxed(v: unknown): unknown {
  if (v === 0 && 1 / v < 0) return NEGATIVE_ZERO;
  if (v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) return v.map(boxed);
  const proto = Object.getPrototypeOf(v);
  if (proto === Object.prototype || proto === null) {
    const out: Record<string, unknown> = {};
    for (const k in v as Record<string, unknown>) out[k] = boxed((v as Record<string, unknown>)[k]);
    return out;
  }
  if (proto === Map.prototype) {
    const flat: unknown[] = [];
    for (const [k, x] of v as Map<unknown, unknown>) flat.push(boxed(k), boxed(x));
    return new BoxedMap(flat);
  }
  if (proto === Set.prototype) return new Set([...(v as Set<unknown>)].map(boxed));
  return v;
}

interface Problem {
  path: string;
  found: string;
  hint: string;
}

function className(v: object): string {
  return (v as { constructor?: { name?: string } }).constructor?.name || "(anonymous)";
}

function keyPath(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** The first thing in `v` that cannot travel, with its path (the slow walk, run only on failure). */
function findProblem(v: unknown, path: string, ancestors: Set<object>): Problem | null {
  switch (typeof v) {
    case "function":
      return {
        path,
        found: `a function${(v as { name?: string }).name ? ` (${(v as { name: string }).name})` : ""}`,
        hint: "send data, or export the function from a module and call it by name inside the actor",
      };
    case "symbol":
      return { path, found: "a symbol", hint: "symbols exist only inside one process" };
    case "bigint":
      if ((v as bigint) < BIGINT_MIN || (v as bigint) > BIGINT_MAX) {
        return { path, found: "a BigInt outside the 64-bit range", hint: "send it as a string" };
      }
      return null;
    case "object":
      break;
    default:
      return null;
  }
  if (v === null) return null;
  if (ancestors.has(v)) {
    return { path, found: "a circular reference", hint: "send a tree of values, not a graph with cycles" };
  }
  if (ancestors.size >= MAX_DEPTH) {
    return { path, found: `nesting deeper than ${MAX_DEPTH} levels`, hint: "flatten the value" };
  }
  ancestors.add(v);
  try {
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const p = findProblem(v[i], `${path}[${i}]`, ancestors);
        if (p) return p;
      }
      const extra = extraArrayKey(v);
      if (extra === undefined) return null;
      return {
        path: keyPath(path, extra),
        found: "a property of an array beside its elements",
        hint: "an array travels as its elements alone: send the array and the property in an object",
      };
    }
    const proto = Object.getPrototypeOf(v);
    if (proto === Object.prototype || proto === null) {
      for (const k in v as Record<string, unknown>) {
        const p = findProblem((v as Record<string, unknown>)[k], keyPath(path, k), ancestors);
        if (p) return p;
      }
      return null;
    }
    if (leafPrototypes.has(proto) || registeredPrototypes.has(proto)) return null;
    if (proto === Map.prototype) {
      for (const [k, x] of v as Map<unknown, unknown>) {
        const label = typeof k === "string" || typeof k === "number" ? JSON.stringify(k) : "(key)";
        const p =
          findProblem(k, `${path}.<key ${label}>`, ancestors) ??
          findProblem(x, `${path}.get(${label})`, ancestors);
        if (p) return p;
      }
      return null;
    }
    if (proto === Set.prototype) {
      let i = 0;
      for (const x of v as Set<unknown>) {
        const p = findProblem(x, `${path}.<element ${i++}>`, ancestors);
        if (p) return p;
      }
      return null;
    }
    if (ArrayBuffer.isView(v) || v instanceof Error) return null;
    if (v instanceof Promise) {
      return { path, found: "a Promise", hint: "await it first, or pass an ObjectRef" };
    }
    if (v instanceof WeakMap || v instanceof WeakSet || v instanceof WeakRef) {
      return { path, found: `a ${className(v)}`, hint: "weak references exist only inside one process" };
    }
    const name = className(v);
    return {
      path,
      found: `an instance of class ${name}`,
      hint: `send plain data (e.g. { ...value }), or call registerSerializer(${name}) in a module that both processes import`,
    };
  } finally {
    ancestors.delete(v);
  }
}

/**
 * `value` ready for encoding: itself, or a copy with its Maps boxed. Throws SerializationError
 * naming the path under `root` (e.g. "args[0].f") and saying why, for anything that cannot travel.
 * `verb` finishes the sentence: "cannot be sent to an actor", "cannot be returned from an actor" ...
 */
export function prepareValue<T>(value: T, root: string, verb: string): T {
  let flags: number;
  try {
    flags = scan(value, 0);
  } catch (e) {
    if (e !== UNSENDABLE) throw e;
    const p = findProblem(value, root, new Set()) ?? {
      path: root,
      found: "a value",
      hint: "it holds something that cannot be encoded",
    };
    throw new SerializationError(p.path, p.found, `${p.path}: ${p.found} ${verb}; ${p.hint}`);
  }
  return flags === 0 ? value : (boxed(value) as T);
}

/** Whether `value` can travel as it is (used for best-effort fields such as an error's own properties). */
export function isSendable(value: unknown): boolean {
  try {
    return scan(value, 0) === 0;
  } catch (e) {
    if (e !== UNSENDABLE) throw e;
    return false;
  }
}
