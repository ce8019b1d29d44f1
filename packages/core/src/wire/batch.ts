/**
 * Batch framing on the wire: many encoded messages travel in one ZeroMQ multipart message.
 * Frame 0: msgpack [MAGIC, [headLength, frameCount, ...], pieces?]; frame 1: the heads concatenated;
 * frames 2..: the raw frames of every message in order.
 *
 * No ZeroMQ frame is larger than MAX_FRAME_BYTES (every socket of the cluster refuses larger ones,
 * see links.ts): a larger logical frame (the heads, or a raw frame) travels as consecutive pieces of
 * at most that size, and `pieces` lists [logical frame number (0 = the heads), piece count] for each
 * one cut, flattened. The receiver joins the pieces (one copy) before decoding.
 */
import { decode, type Encoded, packPlain, unpackPlain } from "./codec.js";

export const MAGIC = "torl/1";

/**
 * The largest ZeroMQ frame a socket of the cluster accepts (ZMQ_MAXMSGSIZE): what a peer can make a
 * listener buffer for one frame, before it has authenticated too (a CURVE handshake's own frames
 * are a few hundred bytes). A larger frame ends the peer's connection. Larger values travel in pieces.
 */
export const MAX_FRAME_BYTES = 1 << 20;

/**
 * What a socket is told to accept (ZMQ_MAXMSGSIZE): MAX_FRAME_BYTES plus room for CURVE's wrapping.
 * ZeroMQ checks the size of a frame as it arrives, before decrypting it, and a CURVE MESSAGE command
 * adds its name, nonce and box (33 bytes) to each frame, so a frame of exactly MAX_FRAME_BYTES
 * would otherwise end an authenticated peer's connection.
 */
export const MAX_WIRE_FRAME_BYTES = MAX_FRAME_BYTES + 4096;

export class MalformedMessageError extends Error {
  override name = "MalformedMessageError";
}

/**
 * Delivered in place of a message that could not be decoded, so that its receiver can answer the
 * sender (a call gets an error result, a fetch an error reply) instead of dropping it. `kind` and
 * `seq` are read from the raw bytes when the message is a data-plane array `[kind, seq, ...]`.
 */
export class UndecodableMessage {
  constructor(
    readonly reason: string,
    readonly kind?: number,
    readonly seq?: number,
  ) {}
}

/** The first two integers of a msgpack array, read without decoding the rest. */
function peekKindAndSeq(b: Uint8Array): [number | undefined, number | undefined] {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let pos = 0;
  const readUint = (): number | undefined => {
    const c = view.getUint8(pos++);
    if (c <= 0x7f) return c;
    const widths: Record<number, number> = { 204: 1, 205: 2, 206: 4, 207: 8, 203: 8 };
    const w = widths[c];
    if (w === undefined) return undefined;
    pos += w;
    if (c === 0xcc) return view.getUint8(pos - 1);
    if (c === 0xcd) return view.getUint16(pos - 2);
    if (c === 0xce) return view.getUint32(pos - 4);
    if (c === 0xcf) return Number(view.getBigUint64(pos - 8));
    return view.getFloat64(pos - 8);
  };
  try {
    const t = view.getUint8(pos++);
    if (t === 0xdc) pos += 2;
    else if (t === 0xdd) pos += 4;
    else if (t < 0x90 || t > 0x9f) return [undefined, undefined];
    const kind = readUint();
    return [kind, kind === undefined ? undefined : readUint()];
  } catch {
    return [undefined, undefined]; // truncated
  }
}

function undecodable(reason: string, head?: Uint8Array): UndecodableMessage {
  const [kind, seq] = head ? peekKindAndSeq(head) : [undefined, undefined];
  return new UndecodableMessage(reason, kind, seq);
}

export function buildBatch(messages: Encoded[]): Uint8Array[] {
  const index: number[] = [];
  const heads: Uint8Array[] = [];
  const frames: Uint8Array[] = [];
  let total = 0;
  for (const m of messages) {
    index.push(m.head.byteLength, m.frames.length);
    heads.push(m.head);
    total += m.head.byteLength;
    for (const f of m.frames) frames.push(f);
  }
  const headBuf = heads.length === 1 ? heads[0]! : Buffer.concat(heads, total);
  const logical = [headBuf, ...frames];
  if (!logical.some((f) => f.byteLength > MAX_FRAME_BYTES)) return [packPlain([MAGIC, index]), ...logical];
  const pieces: number[] = [];
  const out: Uint8Array[] = [];
  logical.forEach((f, i) => {
    if (f.byteLength <= MAX_FRAME_BYTES) {
      out.push(f);
      return;
    }
    const n = Math.ceil(f.byteLength / MAX_FRAME_BYTES);
    pieces.push(i, n);
    // views, not copies: the send reads them where they are
    for (let k = 0; k < n; k++) out.push(f.subarray(k * MAX_FRAME_BYTES, (k + 1) * MAX_FRAME_BYTES));
  });
  return [packPlain([MAGIC, index, pieces]), ...out];
}

/** The logical frames after the header: pieces joined as `pieces` ([frame, count, ...]) says. */
function joinPieces(parts: Uint8Array[], from: number, pieces: unknown): Uint8Array[] {
  if (!Array.isArray(pieces) || pieces.length % 2 !== 0)
    throw new MalformedMessageError("batch piece list is malformed");
  const counts = new Map<number, number>();
  for (let i = 0; i < pieces.length; i += 2) {
    const [at, n] = [pieces[i], pieces[i + 1]];
    if (!Number.isInteger(at) || !Number.isInteger(n) || n < 1)
      throw new MalformedMessageError("batch piece list is malformed");
    counts.set(at, n);
  }
  const out: Uint8Array[] = [];
  for (let p = from; p < parts.length; ) {
    const n = counts.get(out.length) ?? 1;
    if (p + n > parts.length) throw new MalformedMessageError("batch refers to missing pieces");
    out.push(n === 1 ? parts[p]! : Buffer.concat(parts.slice(p, p + n)));
    p += n;
  }
  return out;
}

/**
 * Decodes a batch starting at `parts[offset]`. A message that does not decode becomes an
 * UndecodableMessage; a batch whose framing is foreign becomes one UndecodableMessage.
 */
export function parseBatch(parts: Uint8Array[], offset: number): any[] {
  try {
    return parseFrames(parts, offset);
  } catch (e) {
    if (e instanceof MalformedMessageError) return [undecodable(e.message)];
    throw e;
  }
}

function parseFrames(received: Uint8Array[], at: number): any[] {
  let parts = received;
  let offset = at;
  if (parts.length < offset + 2)
    throw new MalformedMessageError(`expected at least 2 frames, got ${parts.length - offset}`);
  let header: any;
  try {
    header = unpackPlain(parts[offset]!);
  } catch (e) {
    throw new MalformedMessageError(`header frame is not msgpack (${(e as Error).message})`);
  }
  if (
    !Array.isArray(header) ||
    header[0] !== MAGIC ||
    !Array.isArray(header[1]) ||
    header[1].length % 2 !== 0
  ) {
    throw new MalformedMessageError("header frame lacks the torl/1 magic");
  }
  if (header[2] !== undefined) {
    parts = [parts[offset]!, ...joinPieces(parts, offset + 1, header[2])];
    offset = 0;
  }
  const index = header[1] as number[];
  const heads = parts[offset + 1]!;
  const out: any[] = [];
  let pos = 0;
  let frame = offset + 2;
  for (let i = 0; i < index.length; i += 2) {
    const len = index[i]!;
    const nFrames = index[i + 1]!;
    if (typeof len !== "number" || typeof nFrames !== "number" || pos + len > heads.byteLength) {
      throw new MalformedMessageError("batch index does not match its frames");
    }
    if (frame + nFrames > parts.length) throw new MalformedMessageError("batch refers to missing frames");
    const frames = parts.slice(frame, frame + nFrames);
    const head = heads.subarray(pos, pos + len);
    try {
      out.push(decode(head, frames));
    } catch (e) {
      out.push(undecodable(`${(e as Error).name}: ${(e as Error).message}`, head));
    }
    pos += len;
    frame += nFrames;
  }
  return out;
}
