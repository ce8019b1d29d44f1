/**
 * Batch framing on the wire: many encoded messages travel in one ZeroMQ multipart message.
 * Frame 0: msgpack [MAGIC, [headLength, frameCount, ...]]; frame 1: the heads concatenated;
 * frames 2..: the raw frames of every message in order.
 */
import { decode, type Encoded, packPlain, unpackPlain } from "./codec.js";

export const MAGIC = "torl/1";

export class MalformedMessageError extends Error {
  override name = "MalformedMessageError";
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
  return [packPlain([MAGIC, index]), headBuf, ...frames];
}

/** Decodes a batch starting at `parts[offset]`; throws MalformedMessageError for anything foreign. */
export function parseBatch(parts: Uint8Array[], offset: number): any[] {
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
    try {
      out.push(decode(heads.subarray(pos, pos + len), frames));
    } catch (e) {
      throw new MalformedMessageError(`message ${i / 2} does not decode: ${(e as Error).message}`);
    }
    pos += len;
    frame += nFrames;
  }
  return out;
}
