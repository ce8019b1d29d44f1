/**
 * TensorBoard event files, written without TensorFlow: `events.out.tfevents.<time>.<host>` holding
 * TFRecords of `Event` protocol buffers, the format TensorBoard reads.
 *
 * A TFRecord is: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, the data,
 * uint32 masked CRC-32C of the data; masked(c) = ((c >>> 15) | (c << 17)) + 0xa282ead8 (mod 2^32).
 *
 * The protos (tensorflow/core/util/event.proto, framework/summary.proto), fields used here:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * The first record of a file is an Event with file_version "brain.Event:2"; then one Event per step with
 * a scalar Value per metric.
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32C (Castagnoli), the checksum of TFRecords. */
export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC32C_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC. */
export function maskedCrc32c(bytes: Uint8Array): number {
  const c = crc32c(bytes);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

/** One TFRecord around `data`. */
export function tfRecord(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length + 4);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskedCrc32c(data), true);
  return out;
}

/** A protocol-buffer message written field by field. */
class ProtoWriter {
  private readonly parts: number[] = [];

  private varint(v: bigint): void {
    let x = BigInt.asUintN(64, v);
    while (x >= 0x80n) {
      this.parts.push(Number(x & 0x7fn) | 0x80);
      x >>= 7n;
    }
    this.parts.push(Number(x));
  }

  private key(field: number, wireType: number): void {
    this.varint(BigInt((field << 3) | wireType));
  }

  double(field: number, v: number): this {
    this.key(field, 1);
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, v, true);
    this.parts.push(...b);
    return this;
  }

  float(field: number, v: number): this {
    this.key(field, 5);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, v, true);
    this.parts.push(...b);
    return this;
  }

  int64(field: number, v: number): this {
    this.key(field, 0);
    this.varint(BigInt(Math.trunc(v)));
    return this;
  }

  bytes(field: number, b: Uint8Array): this {
    this.key(field, 2);
    this.varint(BigInt(b.length));
    for (const x of b) this.parts.push(x);
    return this;
  }

  string(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

/** An Event with scalar summaries, serialized. */
export function scalarEvent(wallTime: number, step: number, scalars: Record<string, number>): Uint8Array {
  const summary = new ProtoWriter();
  for (const [tag, value] of Object.entries(scalars)) {
    if (typeof value !== "number") continue;
    summary.bytes(1, new ProtoWriter().string(1, tag).float(2, value).finish());
  }
  return new ProtoWriter().double(1, wallTime).int64(2, step).bytes(5, summary.finish()).finish();
}

/** Appends scalar events to one event file in `dir` (TensorBoard's logdir). */
export class TensorBoardWriter {
  readonly file: string;
  private fd: number | null;

  constructor(dir: string) {
    const now = Date.now() / 1000;
    this.file = join(dir, `events.out.tfevents.${Math.floor(now)}.${hostname()}`);
    this.fd = openSync(this.file, "a");
    const version = new ProtoWriter().double(1, now).string(3, "brain.Event:2").finish();
    writeSync(this.fd, tfRecord(version));
  }

  /** One step's scalars (non-finite values included: TensorBoard shows NaN and Inf). */
  addScalars(step: number, scalars: Record<string, number>, wallTime = Date.now() / 1000): void {
    if (this.fd === null) throw new Error(`${this.file} is closed`);
    writeSync(this.fd, tfRecord(scalarEvent(wallTime, step, scalars)));
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}
