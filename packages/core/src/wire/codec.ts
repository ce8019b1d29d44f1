/**
 * Value codec: msgpackr with typed arrays lifted out as raw frames (no copy into the msgpack body),
 * plus extensions for the built-in classes msgpack would flatten (Map, Set, RegExp, ArrayBuffer,
 * DataView, Error), for the runtime's own classes (ObjectRef, actor handles) and for user classes
 * registered with `registerSerializer`. What may be encoded is checked first (sendable.ts).
 *
 * Extension type codes: 0x40-0x4a typed arrays, 0x50 Error, 0x51 Map, 0x52 Set, 0x53 RegExp,
 * 0x54 ArrayBuffer, 0x55 DataView, 0x56 registered user class, 0x57 -0 (msgpack would write 0),
 * 0x60 ObjectRef, 0x61 actor handle.
 */
import { addExtension, Packr } from "msgpackr";
import { SerializationError, UnknownClassError } from "../errors.js";
import {
  BoxedMap,
  hasUserSerializer,
  isSendable,
  markLeafClass,
  NegativeZero,
  prepareValue,
} from "./sendable.js";

/** A value split into a msgpack body and the raw frames its typed arrays point into. */
export interface Encoded {
  head: Uint8Array;
  frames: Uint8Array[];
}

/** Typed arrays at least this large travel as their own frame; smaller ones are copied inline. */
const FRAME_THRESHOLD = 512;

const TYPED: Array<[number, any]> = [
  [0x40, Float32Array],
  [0x41, Float64Array],
  [0x42, Int32Array],
  [0x43, Uint32Array],
  [0x44, Int16Array],
  [0x45, Uint16Array],
  [0x46, Int8Array],
  [0x47, Uint8Array],
  [0x48, Uint8ClampedArray],
  [0x49, BigInt64Array],
  [0x4a, BigUint64Array],
];

let encFrames: Uint8Array[] | null = null;
let decFrames: Uint8Array[] = [];

function bytesOf(v: ArrayBufferView): Uint8Array {
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

function viewOf(Ctor: any, bytes: Uint8Array): any {
  const size = Ctor.BYTES_PER_ELEMENT as number;
  if (bytes.byteOffset % size === 0) return new Ctor(bytes.buffer, bytes.byteOffset, bytes.byteLength / size);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Ctor(copy.buffer, 0, bytes.byteLength / size);
}

const INLINE = 0;
const FRAME = 1;
const AS_BUFFER = 2;

for (const [type, Ctor] of TYPED) {
  markLeafClass(Ctor);
  addExtension({
    Class: Ctor,
    type,
    pack(v: ArrayBufferView) {
      const flag = Buffer.isBuffer(v) ? AS_BUFFER : 0;
      if (encFrames && v.byteLength >= FRAME_THRESHOLD) {
        encFrames.push(bytesOf(v));
        const out = Buffer.allocUnsafe(5);
        out[0] = FRAME | flag;
        out.writeUInt32LE(encFrames.length - 1, 1);
        return out;
      }
      const out = Buffer.allocUnsafe(1 + v.byteLength);
      out[0] = INLINE | flag;
      out.set(bytesOf(v), 1);
      return out;
    },
    unpack(d: Uint8Array) {
      const flag = d[0]!;
      let bytes: Uint8Array;
      if (flag & FRAME) {
        const index = d[1]! | (d[2]! << 8) | (d[3]! << 16) | (d[4]! << 24);
        const frame = decFrames[index];
        if (!frame) throw new Error(`typed array refers to missing frame ${index}`);
        bytes = frame;
      } else {
        bytes = new Uint8Array(d.byteLength - 1);
        bytes.set(d.subarray(1));
      }
      if (flag & AS_BUFFER) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      return viewOf(Ctor, bytes);
    },
  });
}

/** An error as it travels: enough to rebuild a RemoteError on the other side. */
export interface WireError {
  name: string;
  message: string;
  stack?: string;
  data?: Record<string, unknown>;
}

/**
 * Any thrown value as data that can always be encoded; never throws. An Error keeps its name, message,
 * stack and own enumerable fields; a field that cannot travel (a function is left out; a symbol, a
 * BigInt beyond 64 bits, an unregistered class, a getter that throws, a value whose serializer throws)
 * is sent as a note of what it was; an Error met again inside itself (a cycle) as "[circular ...]";
 * Errors inside fields travel as Errors. Any other thrown value arrives as "NonErrorThrown" with its
 * string form as the message and, where it can travel, the value itself.
 */
export function errorToWire(error: unknown): WireError {
  return describeThrown(error, new Set());
}

/** Longest string form of a field that cannot travel (the rest is cut with a note). */
const MAX_NOTE_CHARS = 4096;
/** Fields of an error are copied this deep at most. */
const MAX_ERROR_DEPTH = 32;

function describeThrown(error: unknown, seen: Set<object>): WireError {
  if (!attempt(() => error instanceof Error, false)) {
    const data: Record<string, unknown> = {};
    const value = sendableCopy(error, seen, 0);
    if (typeof value !== "string" || typeof error === "string") data.value = value;
    return { name: "NonErrorThrown", message: printable(error), data };
  }
  const e = error as Error;
  seen.add(e);
  const data: Record<string, unknown> = {};
  const keys = attempt(() => Object.keys(e), null);
  if (keys === null) data["(fields)"] = "(listing its fields threw)";
  for (const key of keys ?? []) {
    let value: unknown;
    try {
      value = (e as unknown as Record<string, unknown>)[key];
    } catch (err) {
      data[key] = `(reading it threw: ${printable(err)})`;
      continue;
    }
    if (typeof value !== "function") data[key] = sendableCopy(value, seen, 1);
  }
  return {
    name: stringField(() => e.name, "Error"),
    message: stringField(() => e.message, "(its message could not be read)"),
    stack: attempt(() => (typeof e.stack === "string" ? e.stack : undefined), undefined),
    data,
  };
}

function attempt<T>(f: () => T, fallback: T): T {
  try {
    return f();
  } catch {
    return fallback;
  }
}

function stringField(read: () => unknown, fallback: string): string {
  return attempt(() => {
    const v = read();
    return typeof v === "string" ? v : v === undefined ? fallback : printable(v);
  }, fallback);
}

/** A value's string form for a message or a note; never throws. */
export function printable(v: unknown): string {
  let s: string;
  try {
    s = String(v);
  } catch {
    s = attempt(
      () => Object.prototype.toString.call(v),
      `(a value of type ${typeof v} without a string form)`,
    );
  }
  return s.length > MAX_NOTE_CHARS
    ? `${s.slice(0, MAX_NOTE_CHARS)}... (${s.length - MAX_NOTE_CHARS} more characters)`
    : s;
}

/** What a caught value says: an Error's message, else its string form; never throws. */
export function thrownMessage(e: unknown): string {
  return printable(attempt(() => (e instanceof Error ? e.message : e), e));
}

/**
 * `v` in a form the encoder surely takes: containers are copied with each Error inside rebuilt from
 * its own wire form (so a cycle through an Error is cut where it closes); a leaf that fails a trial
 * encoding is replaced by a note saying why.
 */
function sendableCopy(v: unknown, seen: Set<object>, depth: number): unknown {
  try {
    switch (typeof v) {
      case "function":
        return `(a function${(v as { name?: string }).name ? ` ${(v as { name: string }).name}` : ""})`;
      case "symbol":
      case "bigint":
        return isSendable(v) ? v : printable(v);
      case "object":
        break;
      default:
        return v;
    }
    if (v === null) return v;
    if (seen.has(v))
      return v instanceof Error ? `[circular or repeated ${v.name}: ${v.message}]` : "[circular reference]";
    if (depth > MAX_ERROR_DEPTH) return `(nested deeper than ${MAX_ERROR_DEPTH} levels)`;
    if (v instanceof Error) return errorFromWire(describeThrown(v, seen));
    const proto = Object.getPrototypeOf(v);
    seen.add(v);
    try {
      if (Array.isArray(v)) return v.map((x) => sendableCopy(x, seen, depth + 1));
      if (proto === Object.prototype || proto === null) {
        const out: Record<string, unknown> = {};
        for (const k of Object.keys(v)) {
          try {
            out[k] = sendableCopy((v as Record<string, unknown>)[k], seen, depth + 1);
          } catch (err) {
            out[k] = `(reading it threw: ${printable(err)})`;
          }
        }
        return out;
      }
      if (proto === Map.prototype) {
        const out = new Map<unknown, unknown>();
        for (const [k, x] of v as Map<unknown, unknown>)
          out.set(sendableCopy(k, seen, depth + 1), sendableCopy(x, seen, depth + 1));
        return out;
      }
      if (proto === Set.prototype)
        return new Set([...(v as Set<unknown>)].map((x) => sendableCopy(x, seen, depth + 1)));
    } finally {
      seen.delete(v);
    }
    if (!isSendable(v)) return `(${printable(v)}: cannot be sent)`;
    // a user's serializer may still refuse it (the runtime's own classes are not tried: encoding a
    // ref counts a copy of it)
    if (hasUserSerializer(v)) encode(v);
    return v;
  } catch (err) {
    return `(cannot be encoded: ${thrownMessage(err)})`;
  }
}

const BUILTIN_ERRORS: Record<string, ErrorConstructor> = {
  Error,
  TypeError,
  RangeError,
  SyntaxError,
  ReferenceError,
  EvalError,
  URIError,
};

/** An Error value rebuilt: built-in classes keep their class, others arrive as Error with their name. */
function errorFromWire(w: WireError): Error {
  const e = new (BUILTIN_ERRORS[w.name] ?? Error)(w.message);
  if (e.name !== w.name)
    Object.defineProperty(e, "name", { value: w.name, writable: true, configurable: true });
  e.stack = w.stack;
  Object.assign(e, w.data ?? {});
  return e;
}

addExtension({ Class: Error, type: 0x50, write: errorToWire, read: errorFromWire });
addExtension({
  Class: BoxedMap,
  type: 0x51,
  write: (m: BoxedMap) => m.flat,
  read(flat: unknown[]) {
    const m = new Map<unknown, unknown>();
    for (let i = 0; i < flat.length; i += 2) m.set(flat[i], flat[i + 1]);
    return m;
  },
});
addExtension({ Class: NegativeZero, type: 0x57, write: () => 0, read: () => -0 });
addExtension({
  Class: Set,
  type: 0x52,
  write: (v: Set<unknown>) => [...v],
  read: (a: unknown[]) => new Set(a),
});
addExtension({
  Class: RegExp,
  type: 0x53,
  write: (r: RegExp) => [r.source, r.flags],
  read: (d: [string, string]) => new RegExp(d[0], d[1]),
});
addExtension({
  Class: ArrayBuffer,
  type: 0x54,
  write: (b: ArrayBuffer) => new Uint8Array(b),
  read(bytes: Uint8Array) {
    const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
    return whole ? bytes.buffer : bytes.slice().buffer;
  },
});
addExtension({
  Class: DataView,
  type: 0x55,
  write: (v: DataView) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength),
  read: (bytes: Uint8Array) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength),
});

/**
 * Hooks for classes defined elsewhere in core (ObjectRef, actor handles), to avoid import cycles.
 * `read` may give another shape than T (a handle decoded outside a runtime is its bare ids).
 */
export function registerClass<T>(
  type: number,
  Class: new (...args: any[]) => T,
  write: (v: T) => unknown,
  read: (d: any) => unknown,
) {
  markLeafClass(Class);
  addExtension({ Class, type, write, read });
}

/** How instances of a user class travel (see registerSerializer). */
export interface SerializerOptions<T, D = unknown> {
  /** Name on the wire, the same in every process (default: the class's name). */
  name?: string;
  /** The instance as sendable data D (default: its own enumerable fields). */
  serialize?: (value: T) => D;
  /** The instance rebuilt from that data (default: an object of the class with those fields, no constructor call). */
  deserialize?: (data: D) => T;
}

const serializers = new Map<
  string,
  { Class: abstract new (...args: never) => unknown; deserialize: (data: never) => unknown }
>();

/**
 * Lets instances of `Class` travel between processes (Ray's `register_serializer`): they arrive as
 * instances of the same class. Call it in a module that every process using the class imports (the
 * module that defines the class is the natural place); a process that receives an instance of a
 * class it has no serializer for fails that message with an error naming the class.
 */
export function registerSerializer<T extends object, D = unknown>(
  Class: new (...args: never[]) => T,
  opts: SerializerOptions<T, D> = {},
): void {
  const name = opts.name ?? Class.name;
  if (!name) throw new TypeError("registerSerializer: an anonymous class needs { name }");
  const taken = serializers.get(name);
  if (taken && taken.Class !== Class) {
    throw new TypeError(`registerSerializer: the name '${name}' is already registered for another class`);
  }
  const serialize: (value: T) => unknown = opts.serialize ?? ((v: T) => ({ ...v }));
  const deserialize: (data: never) => unknown =
    opts.deserialize ?? ((d: object) => Object.assign(Object.create(Class.prototype), d) as T);
  serializers.set(name, { Class, deserialize });
  markLeafClass(Class, true);
  addExtension({
    Class,
    type: 0x56,
    write: (v: T) => [name, prepareValue(serialize(v), `serialize(${name})`, "cannot be sent")],
    read: readRegistered,
  });
}

function readRegistered(d: [string, unknown]): unknown {
  const s = serializers.get(d[0]);
  if (!s) {
    throw new UnknownClassError(
      `a value of class '${d[0]}' arrived, but this process has no serializer for it: import the module that calls registerSerializer(${d[0]})`,
    );
  }
  // the data was written by the same class's serialize, in a process of the same version
  return s.deserialize(d[1] as never);
}

const packr = new Packr({
  useRecords: false,
  moreTypes: false,
  structuredClone: false,
  // values are checked before encoding; this catches a function that slipped past (a serializer's output)
  writeFunction() {
    throw new SerializationError("(unknown)", "a function", "a function cannot be encoded");
  },
} as ConstructorParameters<typeof Packr>[0]);

/**
 * The message `build(wire)` makes of a thrown value, encoded; if its fields cannot be (too large for
 * the encoder), the same message with the error's name, message and stack alone (cut to 64 KiB each)
 * and a note of why: a reply carrying an error is always sent.
 */
export function encodeError(error: unknown, build: (wire: WireError) => unknown): Encoded {
  const wire = errorToWire(error);
  try {
    return encode(build(wire));
  } catch (e) {
    const cut = (s: string) => (s.length > 65536 ? `${s.slice(0, 65536)}... (cut)` : s);
    return encode(
      build({
        name: cut(wire.name),
        message: cut(wire.message),
        stack: wire.stack === undefined ? undefined : cut(wire.stack),
        data: { unsent: `its fields could not be encoded: ${thrownMessage(e)}` },
      }),
    );
  }
}

export function encode(value: unknown): Encoded {
  const saved = encFrames;
  encFrames = [];
  try {
    const head = packr.pack(value);
    return { head, frames: encFrames };
  } finally {
    encFrames = saved;
  }
}

export function decode(head: Uint8Array, frames: Uint8Array[] = []): any {
  const saved = decFrames;
  decFrames = frames;
  try {
    return packr.unpack(head);
  } finally {
    decFrames = saved;
  }
}

/** Plain msgpack for control messages with no frames. */
export function packPlain(value: unknown): Buffer {
  return packr.pack(value);
}

export function unpackPlain(buf: Uint8Array): any {
  return packr.unpack(buf);
}
