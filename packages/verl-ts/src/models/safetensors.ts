/**
 * safetensors reader and writer: 8-byte little-endian header length, a JSON header mapping each tensor
 * name to {dtype, shape, data_offsets}, then the raw little-endian data. F32, F16 and BF16 (and F64) load
 * as Float32Array, or in their stored dtype (the *Stored readers: BF16/F16 as 16-bit patterns); saving
 * writes F32, F16 or BF16 (half bits already in the target dtype are written as they are, so a bf16 model
 * saves and reloads bit for bit). Sharded checkpoints use model.safetensors.index.json.
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
import {
  floatToBf16,
  floatToHalf,
  HalfArray,
  type HalfDtype,
  halfToFloat,
  type StoredValues,
  type WeightDtype,
} from "./half-precision.js";

export type SafetensorsDtype = "F32" | "F16" | "BF16";

export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** A tensor in its stored dtype: BF16 and F16 data kept as bit patterns (HalfArray), F32/F64 as float32. */
export interface StoredTensor {
  name: string;
  shape: number[];
  data: StoredValues;
}

/** The safetensors dtype name of a storage dtype, and back. */
export const SAFETENSORS_DTYPE_OF: Record<WeightDtype, SafetensorsDtype> = {
  float32: "F32",
  bfloat16: "BF16",
  float16: "F16",
};
export const WEIGHT_DTYPE_OF: Record<SafetensorsDtype, WeightDtype> = {
  F32: "float32",
  BF16: "bfloat16",
  F16: "float16",
};

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

function decode(dtype: string, raw: Buffer, keepHalf: boolean): StoredValues {
  const n = raw.length / BYTES[dtype]!;
  // Copy into an aligned buffer first: Buffer slices may start at any byte offset.
  const aligned = new Uint8Array(raw.length);
  aligned.set(raw);
  if (keepHalf && (dtype === "BF16" || dtype === "F16"))
    return new HalfArray(WEIGHT_DTYPE_OF[dtype] as HalfDtype, new Uint16Array(aligned.buffer));
  const out = new Float32Array(n);
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

/** Reads every tensor of one safetensors file as float32. */
export function readSafetensors(file: string, only?: (name: string) => boolean): Map<string, NamedTensor> {
  return readTensors(file, only, false) as Map<string, NamedTensor>;
}

/** Reads every tensor of one safetensors file in its stored dtype (BF16/F16 as bit patterns, no widening). */
export function readSafetensorsStored(
  file: string,
  only?: (name: string) => boolean,
): Map<string, StoredTensor> {
  return readTensors(file, only, true);
}

function readTensors(
  file: string,
  only: ((name: string) => boolean) | undefined,
  keepHalf: boolean,
): Map<string, StoredTensor> {
  const { entries, dataStart } = readSafetensorsHeader(file);
  const out = new Map<string, StoredTensor>();
  const fd = openSync(file, "r");
  try {
    for (const [name, e] of entries) {
      if (only && !only(name)) continue;
      const [begin, end] = e.data_offsets;
      const raw = Buffer.alloc(end - begin);
      const got = readSync(fd, raw, 0, end - begin, dataStart + begin);
      if (got !== end - begin)
        throw new ModelFormatError(`short read (${got} of ${end - begin} bytes)`, file, name);
      out.set(name, { name, shape: e.shape.slice(), data: decode(e.dtype, raw, keepHalf) });
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

/** Writes tensors to one safetensors file in the given dtype (default F32). */
export function writeSafetensors(
  file: string,
  tensors: StoredTensor[],
  dtype: SafetensorsDtype = "F32",
  metadata: Record<string, string> = { format: "pt" },
): void {
  for (const t of tensors) {
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length)
      throw new ModelFormatError(
        `shape ${JSON.stringify(t.shape)} does not match ${t.data.length} values`,
        file,
        t.name,
      );
  }
  const byName = new Map(tensors.map((t) => [t.name, t.data]));
  writeSafetensorsFrom(file, tensors, dtype, (name) => byName.get(name)!, metadata);
}

/**
 * Writes one safetensors file whose tensors are produced one at a time by `valuesOf` (called once per
 * tensor, in order), so a file larger than memory can be written: only one tensor's values exist at once.
 */
export function writeSafetensorsFrom(
  file: string,
  specs: readonly { name: string; shape: number[] }[],
  dtype: SafetensorsDtype,
  valuesOf: (name: string) => StoredValues,
  metadata: Record<string, string> = { format: "pt" },
): void {
  const bytes = BYTES[dtype]!;
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of specs) {
    const numel = t.shape.reduce((a, b) => a * b, 1);
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
    for (const t of specs) {
      const data = valuesOf(t.name);
      const numel = t.shape.reduce((a, b) => a * b, 1);
      if (numel !== data.length)
        throw new ModelFormatError(
          `shape ${JSON.stringify(t.shape)} does not match ${data.length} values`,
          file,
          t.name,
        );
      writeSync(fd, encode(data, dtype));
    }
  } finally {
    closeSync(fd);
  }
}

/** The bytes of stored values in a safetensors dtype; half bits already in that dtype go out verbatim. */
function encode(data: StoredValues, dtype: SafetensorsDtype): Uint8Array {
  if (data instanceof HalfArray && SAFETENSORS_DTYPE_OF[data.dtype] === dtype)
    return new Uint8Array(data.bits.buffer, data.bits.byteOffset, data.bits.byteLength);
  const values = data instanceof HalfArray ? data.toFloat32() : data;
  if (dtype === "F32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const u = new Uint16Array(values.length);
  const conv = dtype === "BF16" ? floatToBf16 : floatToHalf;
  for (let i = 0; i < values.length; i++) u[i] = conv(values[i]!);
  return new Uint8Array(u.buffer);
}

export const SAFETENSORS_INDEX = "model.safetensors.index.json";
export const SAFETENSORS_FILE = "model.safetensors";

/** Reads a checkpoint directory: model.safetensors, or the shards listed in model.safetensors.index.json. */
export function readCheckpointDir(dir: string): Map<string, NamedTensor & { file: string }> {
  return readDir(dir, readSafetensors) as Map<string, NamedTensor & { file: string }>;
}

/** readCheckpointDir keeping each tensor's stored dtype (BF16/F16 as bit patterns, half the memory). */
export function readCheckpointDirStored(dir: string): Map<string, StoredTensor & { file: string }> {
  return readDir(dir, readSafetensorsStored);
}

function readDir(
  dir: string,
  read: (file: string, only?: (name: string) => boolean) => Map<string, StoredTensor>,
): Map<string, StoredTensor & { file: string }> {
  const indexPath = join(dir, SAFETENSORS_INDEX);
  const single = join(dir, SAFETENSORS_FILE);
  const out = new Map<string, StoredTensor & { file: string }>();
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
      const got = read(path, (n) => wanted.has(n));
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
  for (const [k, v] of read(single)) out.set(k, { ...v, file: single });
  return out;
}

/**
 * Writes a checkpoint directory; with `maxShardBytes`, splits it into model-0000i-of-0000n.safetensors
 * shards and an index.
 */
export function writeCheckpointDir(
  dir: string,
  tensors: StoredTensor[],
  dtype: SafetensorsDtype = "F32",
  maxShardBytes = Number.POSITIVE_INFINITY,
): string[] {
  const bytes = BYTES[dtype]!;
  const shards: StoredTensor[][] = [[]];
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
