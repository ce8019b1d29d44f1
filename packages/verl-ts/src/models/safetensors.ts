/**
 * safetensors reader and writer: 8-byte little-endian header length, a JSON header mapping each tensor
 * name to {dtype, shape, data_offsets}, then the raw little-endian data. F32, F16 and BF16 (and F64) load
 * as Float32Array; saving writes F32, F16 or BF16. Sharded checkpoints use model.safetensors.index.json.
 */
import {
  closeSync,
  existsSync,
  fstatSync,
  openSync,
  readFileSync,
  readSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { basename, join } from "node:path";
import { ModelFormatError } from "./errors.js";

export type SafetensorsDtype = "F32" | "F16" | "BF16";

export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

const BYTES: Record<string, number> = { F64: 8, F32: 4, F16: 2, BF16: 2 };

/** Reads the JSON header of a safetensors file; checks every entry against the file's size. */
export function readSafetensorsHeader(file: string): {
  entries: Map<string, HeaderEntry>;
  dataStart: number;
  metadata: Record<string, string>;
} {
  if (!existsSync(file)) throw new ModelFormatError("file not found", file);
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    if (size < 8) throw new ModelFormatError(`truncated: ${size} bytes, no header length`, file);
    const lenBuf = Buffer.alloc(8);
    readSync(fd, lenBuf, 0, 8, 0);
    const headerLen = Number(lenBuf.readBigUInt64LE(0));
    if (headerLen <= 1 || 8 + headerLen > size)
      throw new ModelFormatError(`header length ${headerLen} does not fit in the file (${size} bytes)`, file);
    const hb = Buffer.alloc(headerLen);
    readSync(fd, hb, 0, headerLen, 8);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(hb.toString("utf8"));
    } catch (e) {
      throw new ModelFormatError(`header is not valid JSON (${(e as Error).message})`, file);
    }
    if (!header || typeof header !== "object" || Array.isArray(header))
      throw new ModelFormatError("header is not a JSON object", file);
    const dataStart = 8 + headerLen;
    const dataLen = size - dataStart;
    const entries = new Map<string, HeaderEntry>();
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(header)) {
      if (name === "__metadata__") {
        metadata = (v ?? {}) as Record<string, string>;
        continue;
      }
      const e = v as HeaderEntry;
      if (!e || typeof e !== "object" || !Array.isArray(e.shape) || !Array.isArray(e.data_offsets))
        throw new ModelFormatError("malformed header entry", file, name);
      const bytes = BYTES[e.dtype];
      if (!bytes)
        throw new ModelFormatError(
          `unsupported dtype ${e.dtype} (supported: F32, F16, BF16, F64)`,
          file,
          name,
        );
      const [begin, end] = e.data_offsets;
      const numel = e.shape.reduce((a, b) => a * b, 1);
      if (!Number.isInteger(begin) || !Number.isInteger(end) || begin < 0 || end < begin)
        throw new ModelFormatError(`bad data_offsets ${JSON.stringify(e.data_offsets)}`, file, name);
      if (end > dataLen)
        throw new ModelFormatError(
          `data [${begin}, ${end}) runs past the end of the file (${dataLen} data bytes): truncated`,
          file,
          name,
        );
      if (end - begin !== numel * bytes)
        throw new ModelFormatError(
          `shape ${JSON.stringify(e.shape)} ${e.dtype} needs ${numel * bytes} bytes, data_offsets give ${end - begin}`,
          file,
          name,
        );
      entries.set(name, e);
    }
    return { entries, dataStart, metadata };
  } finally {
    closeSync(fd);
  }
}

function decode(dtype: string, raw: Buffer): Float32Array {
  const n = raw.length / BYTES[dtype]!;
  const out = new Float32Array(n);
  // Copy into an aligned buffer first: Buffer slices may start at any byte offset.
  const aligned = new Uint8Array(raw.length);
  aligned.set(raw);
  switch (dtype) {
    case "F32":
      out.set(new Float32Array(aligned.buffer));
      break;
    case "F64":
      out.set(new Float64Array(aligned.buffer));
      break;
    case "BF16": {
      const src = new Uint16Array(aligned.buffer);
      const u = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) u[i] = src[i]! << 16;
      break;
    }
    case "F16": {
      const src = new Uint16Array(aligned.buffer);
      for (let i = 0; i < n; i++) out[i] = halfToFloat(src[i]!);
      break;
    }
  }
  return out;
}

function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? Number.NaN : s * Number.POSITIVE_INFINITY;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function floatToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  if ((b & 0x7f800000) === 0x7f800000 && b & 0x7fffff) return 0x7fc0; // NaN
  return ((b + 0x7fff + ((b >> 16) & 1)) >>> 16) & 0xffff; // round to nearest even
}

function floatToHalf(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  e = half >> 10;
  return sign | half;
}

/** Reads every tensor of one safetensors file as float32. */
export function readSafetensors(file: string, only?: (name: string) => boolean): Map<string, NamedTensor> {
  const { entries, dataStart } = readSafetensorsHeader(file);
  const out = new Map<string, NamedTensor>();
  const fd = openSync(file, "r");
  try {
    for (const [name, e] of entries) {
      if (only && !only(name)) continue;
      const [begin, end] = e.data_offsets;
      const raw = Buffer.alloc(end - begin);
      const got = readSync(fd, raw, 0, end - begin, dataStart + begin);
      if (got !== end - begin)
        throw new ModelFormatError(`short read (${got} of ${end - begin} bytes)`, file, name);
      out.set(name, { name, shape: e.shape.slice(), data: decode(e.dtype, raw) });
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

/** Writes tensors to one safetensors file in the given dtype (default F32). */
export function writeSafetensors(
  file: string,
  tensors: NamedTensor[],
  dtype: SafetensorsDtype = "F32",
  metadata: Record<string, string> = { format: "pt" },
): void {
  const bytes = BYTES[dtype]!;
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length)
      throw new ModelFormatError(
        `shape ${JSON.stringify(t.shape)} does not match ${t.data.length} values`,
        file,
        t.name,
      );
    header[t.name] = { dtype, shape: t.shape, data_offsets: [offset, offset + numel * bytes] };
    offset += numel * bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += " ";
  const hb = Buffer.from(json, "utf8");
  const fd = openSync(file, "w");
  try {
    const lenBuf = Buffer.alloc(8);
    lenBuf.writeBigUInt64LE(BigInt(hb.length), 0);
    writeSync(fd, lenBuf);
    writeSync(fd, hb);
    for (const t of tensors) {
      let buf: Buffer;
      if (dtype === "F32") buf = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      else {
        const u = new Uint16Array(t.data.length);
        const conv = dtype === "BF16" ? floatToBf16 : floatToHalf;
        for (let i = 0; i < t.data.length; i++) u[i] = conv(t.data[i]!);
        buf = Buffer.from(u.buffer);
      }
      writeSync(fd, buf);
    }
  } finally {
    closeSync(fd);
  }
}

export const SAFETENSORS_INDEX = "model.safetensors.index.json";
export const SAFETENSORS_FILE = "model.safetensors";

/** Reads a checkpoint directory: model.safetensors, or the shards listed in model.safetensors.index.json. */
export function readCheckpointDir(dir: string): Map<string, NamedTensor & { file: string }> {
  const indexPath = join(dir, SAFETENSORS_INDEX);
  const single = join(dir, SAFETENSORS_FILE);
  const out = new Map<string, NamedTensor & { file: string }>();
  if (existsSync(indexPath)) {
    let index: { weight_map?: Record<string, string> };
    try {
      index = JSON.parse(readFileSync(indexPath, "utf8"));
    } catch (e) {
      throw new ModelFormatError(`not valid JSON (${(e as Error).message})`, indexPath);
    }
    const map = index.weight_map;
    if (!map || typeof map !== "object")
      throw new ModelFormatError("missing weight_map", indexPath, "weight_map");
    const files = [...new Set(Object.values(map))];
    for (const f of files) {
      const path = join(dir, f);
      if (!existsSync(path))
        throw new ModelFormatError(`shard ${f} listed in the index is missing`, indexPath, f);
      const wanted = new Set(
        Object.entries(map)
          .filter(([, v]) => v === f)
          .map(([k]) => k),
      );
      const got = readSafetensors(path, (n) => wanted.has(n));
      for (const name of wanted)
        if (!got.has(name))
          throw new ModelFormatError(`tensor listed in the index is not in shard ${f}`, path, name);
      for (const [k, v] of got) out.set(k, { ...v, file: path });
    }
    return out;
  }
  if (!existsSync(single))
    throw new ModelFormatError(
      `no ${SAFETENSORS_FILE} or ${SAFETENSORS_INDEX} in ${dir}`,
      join(dir, SAFETENSORS_FILE),
    );
  for (const [k, v] of readSafetensors(single)) out.set(k, { ...v, file: single });
  return out;
}

/**
 * Writes a checkpoint directory; with `maxShardBytes`, splits it into model-0000i-of-0000n.safetensors
 * shards and an index.
 */
export function writeCheckpointDir(
  dir: string,
  tensors: NamedTensor[],
  dtype: SafetensorsDtype = "F32",
  maxShardBytes = Number.POSITIVE_INFINITY,
): string[] {
  const bytes = BYTES[dtype]!;
  const shards: NamedTensor[][] = [[]];
  let size = 0;
  for (const t of tensors) {
    const b = t.data.length * bytes;
    if (size > 0 && size + b > maxShardBytes) {
      shards.push([]);
      size = 0;
    }
    shards[shards.length - 1]!.push(t);
    size += b;
  }
  if (shards.length === 1) {
    writeSafetensors(join(dir, SAFETENSORS_FILE), tensors, dtype);
    return [SAFETENSORS_FILE];
  }
  const n = shards.length;
  const pad = (i: number) => String(i).padStart(5, "0");
  const names: string[] = [];
  const weightMap: Record<string, string> = {};
  let total = 0;
  shards.forEach((s, i) => {
    const name = `model-${pad(i + 1)}-of-${pad(n)}.safetensors`;
    writeSafetensors(join(dir, name), s, dtype);
    names.push(name);
    for (const t of s) {
      weightMap[t.name] = name;
      total += t.data.length * bytes;
    }
  });
  writeFileSync(
    join(dir, SAFETENSORS_INDEX),
    `${JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2)}\n`,
  );
  return [...names, basename(SAFETENSORS_INDEX)];
}
