/**
 * Value codec: msgpackr with typed arrays lifted out as raw frames (no copy into the msgpack body),
 * plus extensions for errors and for the runtime's own classes (ObjectRef, actor handles).
 */
import { addExtension, Packr } from "msgpackr";

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

export class EncodedError {
  constructor(readonly error: WireError) {}
}

export function errorToWire(error: unknown): WireError {
  if (error instanceof Error) {
    const data: Record<string, unknown> = {};
    for (const key of Object.keys(error)) {
      const value = (error as any)[key];
      if (typeof value !== "function") data[key] = value;
    }
    return { name: error.name, message: error.message, stack: error.stack, data };
  }
  return { name: "NonErrorThrown", message: String(error), data: { value: safe(error) } };
}

function safe(v: unknown): unknown {
  try {
    packr.pack(v);
    return v;
  } catch {
    return String(v);
  }
}

addExtension({
  Class: Error,
  type: 0x50,
  write(e: Error) {
    return errorToWire(e);
  },
  read(d: WireError) {
    return new EncodedError(d);
  },
});

/** Hooks for classes defined elsewhere in core (ObjectRef, actor handles), to avoid import cycles. */
export function registerClass<T>(
  type: number,
  Class: new (...args: any[]) => T,
  write: (v: T) => unknown,
  read: (d: any) => T,
) {
  addExtension({ Class, type, write, read });
}

const packr = new Packr({ useRecords: false, moreTypes: false, structuredClone: false });

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
