/**
 * An event-file reader for the tests, written from the TFRecord and protocol-buffer formats and sharing
 * no code with the writer: a bit-by-bit CRC-32C (the writer uses a table), the record framing, and a
 * generic protobuf decoder for Event { wall_time = 1, step = 2, file_version = 3, summary = 5 },
 * Summary { value = 1 }, Value { tag = 1, simple_value = 2 }.
 */

/** CRC-32C, one bit at a time (reflected polynomial 0x82F63B78). */
export function crc32cBitwise(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function masked(bytes: Uint8Array): number {
  const c = crc32cBitwise(bytes);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

/** The records of a TFRecord file; throws on a bad length or data CRC, naming the record. */
export function readRecords(buf: Uint8Array): Uint8Array[] {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: Uint8Array[] = [];
  let at = 0;
  while (at < buf.length) {
    const length = Number(view.getBigUint64(at, true));
    if (view.getUint32(at + 8, true) !== masked(buf.subarray(at, at + 8)))
      throw new Error(`record ${out.length}: length CRC mismatch`);
    const data = buf.subarray(at + 12, at + 12 + length);
    if (view.getUint32(at + 12 + length, true) !== masked(data))
      throw new Error(`record ${out.length}: data CRC mismatch`);
    out.push(data);
    at += 12 + length + 4;
  }
  return out;
}

type Field = { field: number; wire: number; value: bigint | Uint8Array | DataView };

function decode(buf: Uint8Array): Field[] {
  const fields: Field[] = [];
  let at = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[at++]!;
      result |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return result;
      shift += 7n;
    }
  };
  while (at < buf.length) {
    const key = Number(varint());
    const field = key >> 3;
    const wire = key & 7;
    if (wire === 0) fields.push({ field, wire, value: varint() });
    else if (wire === 1) {
      fields.push({ field, wire, value: new DataView(buf.buffer, buf.byteOffset + at, 8) });
      at += 8;
    } else if (wire === 5) {
      fields.push({ field, wire, value: new DataView(buf.buffer, buf.byteOffset + at, 4) });
      at += 4;
    } else if (wire === 2) {
      const n = Number(varint());
      fields.push({ field, wire, value: buf.subarray(at, at + n) });
      at += n;
    } else throw new Error(`wire type ${wire} not expected`);
  }
  return fields;
}

export interface ParsedEvent {
  wallTime: number;
  step: number;
  fileVersion?: string;
  scalars: Record<string, number>;
}

export function parseEvent(data: Uint8Array): ParsedEvent {
  const ev: ParsedEvent = { wallTime: Number.NaN, step: 0, scalars: {} };
  for (const f of decode(data)) {
    if (f.field === 1) ev.wallTime = (f.value as DataView).getFloat64(0, true);
    else if (f.field === 2) ev.step = Number(BigInt.asIntN(64, f.value as bigint));
    else if (f.field === 3) ev.fileVersion = new TextDecoder().decode(f.value as Uint8Array);
    else if (f.field === 5) {
      for (const v of decode(f.value as Uint8Array).filter((x) => x.field === 1)) {
        let tag = "";
        let value = Number.NaN;
        for (const g of decode(v.value as Uint8Array)) {
          if (g.field === 1) tag = new TextDecoder().decode(g.value as Uint8Array);
          if (g.field === 2) value = (g.value as DataView).getFloat32(0, true);
        }
        ev.scalars[tag] = value;
      }
    }
  }
  return ev;
}
