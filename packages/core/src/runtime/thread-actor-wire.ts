/**
 * What travels between a driver and its thread actors (see thread-actor.ts), in both directions.
 *
 * comlink carries the calls: message ids, replies, and the error channel. Values go in this project's
 * codec, not in the structured clone: a value then arrives exactly as it would at a process actor
 * (registered classes keep their class, a function is refused at the call site with a
 * SerializationError). They travel as CodecPackets, which a comlink transfer handler turns into bytes
 * and back; the receiver decodes a packet only when it is ready to (a thread decodes a call's
 * arguments after the actor's module, and the serializers it registers, are loaded).
 */
import { transferHandlers } from "comlink";
import { SerializationError } from "../errors.js";
import { decode, type Encoded, encode, type WireError } from "../wire/codec.js";
import { prepareValue } from "../wire/sendable.js";

/** True while a value bound for a thread is encoded: an ObjectRef inside it is refused (see below). */
let encodingForThread = false;

/**
 * Called by the ObjectRef encoder. A thread actor has no runtime of its own to fetch an object with,
 * so a ref nested inside an argument could never be read there; top-level ref arguments are resolved
 * by the caller before the call is sent.
 */
export function refuseRefInThreadValue(): void {
  if (!encodingForThread) return;
  throw new SerializationError(
    "args",
    "an ObjectRef nested inside an argument",
    "args: an ObjectRef nested inside an argument cannot reach a thread actor (a thread has no runtime to fetch it with); pass the ref as a top-level argument (resolved before the call) or pass its value",
  );
}

export class CodecPacket {
  /** A call's result: when its thread ran the method ([start, end] in µs since the epoch), for the timeline. */
  ranUs?: [number, number];

  constructor(
    readonly head: Uint8Array,
    readonly frames: Uint8Array[],
  ) {}

  static of(enc: Encoded): CodecPacket {
    return new CodecPacket(enc.head, enc.frames);
  }

  /** Checks and encodes `value` (SerializationError naming `root` for what cannot travel). */
  static pack(value: unknown, root: string, verb: string): CodecPacket {
    return CodecPacket.of(encode(prepareValue(value, root, verb)));
  }

  /** Encodes a value that went through prepareValue and is bound for a thread: ObjectRefs inside it are refused. */
  static forThread(checked: unknown): CodecPacket {
    encodingForThread = true;
    try {
      return CodecPacket.of(encode(checked));
    } finally {
      encodingForThread = false;
    }
  }

  decode(): unknown {
    return decode(this.head, this.frames);
  }
}

// The bytes are copied once into buffers of their own, which are then moved (transferred) to the
// other side: the head is a view into msgpackr's shared, much larger buffer and a frame views the
// sender's own array, and postMessage would clone each view's whole underlying buffer.
transferHandlers.set("torl-codec", {
  canHandle: (value: unknown): value is CodecPacket => value instanceof CodecPacket,
  serialize: (p: CodecPacket) => {
    // new Uint8Array(view) copies; a Buffer's slice() would not (it is a view on the same memory)
    const h = new Uint8Array(p.head);
    const f = p.frames.map((x) => new Uint8Array(x));
    return [{ h, f, r: p.ranUs }, [h.buffer, ...f.map((x) => x.buffer)]];
  },
  deserialize: (w: { h: Uint8Array; f: Uint8Array[]; r?: [number, number] }) => {
    const p = new CodecPacket(w.h, w.f);
    if (w.r) p.ranUs = w.r;
    return p;
  },
});

/** How a call failed inside the thread; thrown through comlink's error channel as plain data. */
export type ThreadCallFailure =
  /** The method (or the constructor) threw. `ranUs`: when the method ran, as CodecPacket.ranUs. */
  | { kind: "threw"; error: WireError; ranUs?: [number, number] }
  /** Its result cannot travel: [path, found, message] of the SerializationError. */
  | { kind: "unsendable"; serialization: [string, string, string]; ranUs?: [number, number] };

export function isThreadCallFailure(e: unknown): e is ThreadCallFailure {
  const kind = (e as ThreadCallFailure | null)?.kind;
  return kind === "threw" || kind === "unsendable";
}

/** What the thread is told to construct. */
export interface ThreadActorStart {
  module: string;
  className: string;
  maxConcurrency: number;
}

/**
 * The object a thread exposes with comlink; the driver holds it as `Remote<ThreadActorHost>`. Packets
 * are top-level arguments: comlink applies transfer handlers to arguments and results, not inside them.
 */
export interface ThreadActorHost {
  /** Imports the module and constructs the instance; rejects with a ThreadCallFailure if that fails. */
  start(spec: ThreadActorStart, args: CodecPacket): Promise<null>;
  /**
   * Calls `method` (as call `seq` of the driver) once the instance exists, at most maxConcurrency at a
   * time, in arrival order. A generator's call answers StreamOpened and keeps its slot: the driver then
   * pulls its items one `next` at a time (never more than its window ahead of the consumer).
   */
  call(seq: number, method: string, args: CodecPacket): Promise<CodecPacket | StreamOpened>;
  /** The next item of call `seq`'s stream, or null once its generator returned; its error, if it threw. */
  next(seq: number): Promise<CodecPacket | null>;
  /** cancel(ref): a call waiting for a slot never runs; a running one's signal is aborted; a generator is returned. */
  cancel(seq: number): void;
}

/** The answer of `call` for a generator: its items come from `next`. */
export interface StreamOpened {
  stream: true;
}

/** The method name of `ready()`: answered once the constructor has finished. */
export const READY_METHOD = "__ready__";
