/**
 * Value codec: msgpackr with typed arrays lifted out as raw frames (no copy into the msgpack body),
 * plus extensions for the built-in classes msgpack would flatten (Map, Set, RegExp, ArrayBuffer,
 * DataView, Error), for the runtime's own classes (ObjectRef, actor handles) and for user classes
 * registered with `registerSerializer`. What may be encoded is checked first (sendable.ts).
 *
 * Extension type codes: 0x40-0x4a typed arrays, 0x50 Error, 0x51 Map, 0x52 Set, 0x53 RegExp,
 * 0x54 ArrayBuffer, 0x55 DataView, 0x56 registered user class, 0x60 ObjectRef, 0x61 actor handle.
 */
import { addExtension, Packr } from "msgpackr";
import { SerializationError, UnknownClassError } from "../errors.js";
import { BoxedMap, isSendable, markLeafClass, prepareValue } from "./sendable.js";

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

/** An error as data; own fields that cannot travel are sent as their string form. */
export function errorToWire(error: unknown): WireError {
  if (error instanceof Error) {
    const data: Record<string, unknown> = {};
    for (const key of Object.keys(error)) {
      const value = (error as any)[key];
      if (typeof value !== "function") data[key] = safe(value);
    }
    return { name: error.name, message: error.message, stack: error.stack, data };
  }
  return { name: "NonErrorThrown", message: String(error), data: { value: safe(error) } };
}

function safe(v: unknown): unknown {
  return isSendable(v) ? v : String(v);
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

/** Hooks for classes defined elsewhere in core (ObjectRef, actor handles), to avoid import cycles. */
export function registerClass<T>(
  type: number,
  Class: new (...args: any[]) => T,
  write: (v: T) => unknown,
  read: (d: any) => T,
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
