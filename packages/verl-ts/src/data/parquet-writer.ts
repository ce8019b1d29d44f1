/**
 * A small Parquet writer for dataset files (veRL's parquet rows), so a split made here can be read by
 * `pnpm torl eval`, by hyparquet and by pyarrow alike. One row group, one uncompressed PLAIN data page
 * (v1) per column; every field required; lists as the standard three-level LIST group.
 *
 * The file: "PAR1", the column chunks, the footer (FileMetaData in Thrift's compact protocol), the
 * footer's length (u32 little-endian), "PAR1". A page: its PageHeader (compact Thrift), then, for a
 * column inside a list, repetition levels and definition levels (each a u32 length and RLE runs:
 * varint(count << 1), then the level in one byte), then the values (PLAIN: BYTE_ARRAY as u32 length +
 * bytes, INT64/DOUBLE as 8 bytes little-endian, BOOLEAN bit-packed, least significant bit first).
 */
import { writeFileSync } from "node:fs";
import { InputError } from "@torl-ts/core";

/** The schema of one field: a leaf, a struct of fields, or a list of one element type. */
export type ParquetField =
  | { name: string; kind: "string" | "int64" | "double" | "boolean" }
  | { name: string; kind: "struct"; fields: ParquetField[] }
  | { name: string; kind: "list"; element: ParquetField };

/** A row that does not fit the schema; names the row and the field path. */
export class ParquetWriteError extends InputError {
  override name = "ParquetWriteError";
  constructor(
    readonly path: string,
    message: string,
    readonly row?: number,
  ) {
    super(`${row !== undefined ? `row ${row}, ` : ""}${path}: ${message}`);
  }
}

// Thrift compact protocol (only what the footer and page headers use).
const T_I32 = 5;
const T_I64 = 6;
const T_BINARY = 8;
const T_LIST = 9;
const T_STRUCT = 12;

type ThriftValue =
  | { t: "i32"; v: number }
  | { t: "i64"; v: number }
  | { t: "string"; v: string }
  | { t: "list"; elem: "i32" | "string" | "struct"; v: ThriftValue[] }
  | { t: "struct"; v: [number, ThriftValue][] };

class ByteSink {
  private chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer | Uint8Array | number[]): void {
    const buf = Buffer.isBuffer(b) ? b : Buffer.from(b);
    this.chunks.push(buf);
    this.length += buf.length;
  }
  varint(n: bigint): void {
    const out: number[] = [];
    let x = n;
    do {
      let byte = Number(x & 0x7fn);
      x >>= 7n;
      if (x > 0n) byte |= 0x80;
      out.push(byte);
    } while (x > 0n);
    this.push(out);
  }
  zigzag(n: number): void {
    const b = BigInt(n);
    this.varint(b >= 0n ? b << 1n : (-b << 1n) - 1n);
  }
  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

const TYPE_CODE = { i32: T_I32, i64: T_I64, string: T_BINARY, list: T_LIST, struct: T_STRUCT } as const;

function writeThrift(out: ByteSink, value: ThriftValue): void {
  switch (value.t) {
    case "i32":
    case "i64":
      out.zigzag(value.v);
      return;
    case "string": {
      const b = Buffer.from(value.v, "utf8");
      out.varint(BigInt(b.length));
      out.push(b);
      return;
    }
    case "list": {
      const code = TYPE_CODE[value.elem];
      if (value.v.length < 15) out.push([(value.v.length << 4) | code]);
      else {
        out.push([0xf0 | code]);
        out.varint(BigInt(value.v.length));
      }
      for (const v of value.v) writeThrift(out, v);
      return;
    }
    case "struct": {
      let last = 0;
      for (const [id, v] of value.v) {
        const code = TYPE_CODE[v.t];
        const delta = id - last;
        if (delta > 0 && delta <= 15) out.push([(delta << 4) | code]);
        else {
          out.push([code]);
          out.zigzag(id);
        }
        last = id;
        writeThrift(out, v);
      }
      out.push([0]);
    }
  }
}

const i32 = (v: number): ThriftValue => ({ t: "i32", v });
const i64 = (v: number): ThriftValue => ({ t: "i64", v });
const str = (v: string): ThriftValue => ({ t: "string", v });
const struct = (...fields: [number, ThriftValue | undefined][]): ThriftValue => ({
  t: "struct",
  v: fields.filter((f): f is [number, ThriftValue] => f[1] !== undefined),
});

// Parquet enums (parquet.thrift).
const PHYSICAL = { boolean: 0, int64: 2, double: 5, string: 6 } as const;
const REQUIRED = 0;
const REPEATED = 2;
const CONVERTED_UTF8 = 0;
const CONVERTED_LIST = 3;
const ENCODING_PLAIN = 0;
const ENCODING_RLE = 3;

/** One leaf column: its path, physical type, and the most repetition/definition levels it can have. */
interface Leaf {
  path: string[];
  kind: "string" | "int64" | "double" | "boolean";
  maxRep: number;
  maxDef: number;
}

/** The schema as Parquet's flattened list of SchemaElements (depth first), and the leaf columns. */
function flatten(fields: ParquetField[]): { elements: ThriftValue[]; leaves: Leaf[] } {
  const elements: ThriftValue[] = [struct([4, str("schema")], [5, i32(fields.length)])];
  const leaves: Leaf[] = [];
  const visit = (f: ParquetField, path: string[], rep: number, repetition: number, level: number) => {
    const p = [...path, f.name];
    if (f.kind === "struct") {
      elements.push(struct([3, i32(repetition)], [4, str(f.name)], [5, i32(f.fields.length)]));
      for (const c of f.fields) visit(c, p, rep, REQUIRED, level);
    } else if (f.kind === "list") {
      // <name> (LIST) { repeated group list { required <element> } }
      elements.push(
        struct([3, i32(repetition)], [4, str(f.name)], [5, i32(1)], [6, i32(CONVERTED_LIST)]),
        struct([3, i32(REPEATED)], [4, str("list")], [5, i32(1)]),
      );
      visit({ ...f.element, name: "element" }, [...p, "list"], rep + 1, REQUIRED, level + 1);
    } else {
      elements.push(
        struct(
          [1, i32(PHYSICAL[f.kind])],
          [3, i32(repetition)],
          [4, str(f.name)],
          [6, f.kind === "string" ? i32(CONVERTED_UTF8) : undefined],
        ),
      );
      leaves.push({ path: p, kind: f.kind, maxRep: rep, maxDef: level });
    }
  };
  for (const f of fields) visit(f, [], 0, REQUIRED, 0);
  return { elements, leaves };
}

type Leaf3 = { rep: number; def: number; value?: unknown };

/** The (repetition level, definition level, value) triples of one leaf over all rows. */
function shred(fields: ParquetField[], rows: readonly Record<string, unknown>[], leaf: Leaf): Leaf3[] {
  const out: Leaf3[] = [];
  // depth: the field's index in leaf.path; lists: how many lists enclose it (its repetition level if repeated)
  const walk = (
    field: ParquetField,
    value: unknown,
    depth: number,
    lists: number,
    rep: number,
    def: number,
    row: number,
    where: string,
  ) => {
    if (value === undefined || value === null)
      throw new ParquetWriteError(where, "is missing (every field is required)", row);
    if (field.kind === "struct") {
      if (typeof value !== "object" || Array.isArray(value))
        throw new ParquetWriteError(where, "must be an object", row);
      const child = field.fields.find((c) => c.name === leaf.path[depth + 1])!;
      const v = (value as Record<string, unknown>)[child.name];
      walk(child, v, depth + 1, lists, rep, def, row, `${where}.${child.name}`);
    } else if (field.kind === "list") {
      if (!Array.isArray(value)) throw new ParquetWriteError(where, "must be an array", row);
      if (value.length === 0) out.push({ rep, def });
      const element = { ...field.element, name: "element" };
      for (const [i, v] of value.entries())
        walk(element, v, depth + 2, lists + 1, i === 0 ? rep : lists + 1, def + 1, row, `${where}[${i}]`);
    } else {
      const ok =
        field.kind === "string"
          ? typeof value === "string"
          : field.kind === "boolean"
            ? typeof value === "boolean"
            : field.kind === "int64"
              ? Number.isSafeInteger(value)
              : typeof value === "number";
      if (!ok) throw new ParquetWriteError(where, `must be ${field.kind}, got ${JSON.stringify(value)}`, row);
      out.push({ rep, def, value });
    }
  };
  const top = fields.find((f) => f.name === leaf.path[0])!;
  for (const [i, r] of rows.entries()) walk(top, r[top.name], 0, 0, 0, 0, i, top.name);
  return out;
}

/** RLE runs of levels, prefixed with their byte length (u32 LE); levels fit one byte. */
function encodeLevels(levels: number[]): Buffer {
  const sink = new ByteSink();
  for (let i = 0; i < levels.length; ) {
    let j = i;
    while (j < levels.length && levels[j] === levels[i]) j++;
    sink.varint(BigInt(j - i) << 1n);
    sink.push([levels[i]!]);
    i = j;
  }
  const body = sink.bytes();
  const len = Buffer.alloc(4);
  len.writeUInt32LE(body.length);
  return Buffer.concat([len, body]);
}

function encodeValues(kind: Leaf["kind"], values: unknown[]): Buffer {
  if (kind === "string")
    return Buffer.concat(
      values.flatMap((v) => {
        const b = Buffer.from(v as string, "utf8");
        const len = Buffer.alloc(4);
        len.writeUInt32LE(b.length);
        return [len, b];
      }),
    );
  if (kind === "boolean") {
    const b = Buffer.alloc(Math.ceil(values.length / 8));
    values.forEach((v, i) => {
      if (v) b[i >> 3]! |= 1 << (i & 7);
    });
    return b;
  }
  const b = Buffer.alloc(values.length * 8);
  values.forEach((v, i) => {
    if (kind === "int64") b.writeBigInt64LE(BigInt(v as number), i * 8);
    else b.writeDoubleLE(v as number, i * 8);
  });
  return b;
}

/** The Parquet file's bytes for `rows` under `fields`. */
export function encodeParquet(fields: ParquetField[], rows: readonly Record<string, unknown>[]): Buffer {
  const { elements, leaves } = flatten(fields);
  const file = new ByteSink();
  file.push(Buffer.from("PAR1"));
  const chunks: ThriftValue[] = [];
  let totalBytes = 0;
  for (const leaf of leaves) {
    const triples = shred(fields, rows, leaf);
    const body = Buffer.concat([
      leaf.maxRep > 0 ? encodeLevels(triples.map((t) => t.rep)) : Buffer.alloc(0),
      leaf.maxDef > 0 ? encodeLevels(triples.map((t) => t.def)) : Buffer.alloc(0),
      encodeValues(
        leaf.kind,
        triples.filter((t) => t.def === leaf.maxDef).map((t) => t.value),
      ),
    ]);
    const header = new ByteSink();
    writeThrift(
      header,
      struct(
        [1, i32(0)], // DATA_PAGE
        [2, i32(body.length)],
        [3, i32(body.length)],
        [
          5,
          struct(
            [1, i32(triples.length)],
            [2, i32(ENCODING_PLAIN)],
            [3, i32(ENCODING_RLE)],
            [4, i32(ENCODING_RLE)],
          ),
        ],
      ),
    );
    const offset = file.length;
    const page = Buffer.concat([header.bytes(), body]);
    file.push(page);
    totalBytes += page.length;
    chunks.push(
      struct(
        [2, i64(offset)],
        [
          3,
          struct(
            [1, i32(PHYSICAL[leaf.kind])],
            [2, { t: "list", elem: "i32", v: [i32(ENCODING_PLAIN), i32(ENCODING_RLE)] }],
            [3, { t: "list", elem: "string", v: leaf.path.map(str) }],
            [4, i32(0)], // UNCOMPRESSED
            [5, i64(triples.length)],
            [6, i64(page.length)],
            [7, i64(page.length)],
            [9, i64(offset)],
          ),
        ],
      ),
    );
  }
  const footer = new ByteSink();
  writeThrift(
    footer,
    struct(
      [1, i32(1)],
      [2, { t: "list", elem: "struct", v: elements }],
      [3, i64(rows.length)],
      [
        4,
        {
          t: "list",
          elem: "struct",
          v: [
            struct(
              [1, { t: "list", elem: "struct", v: chunks }],
              [2, i64(totalBytes)],
              [3, i64(rows.length)],
            ),
          ],
        },
      ],
      [6, str("torl-ts parquet-writer")],
    ),
  );
  const footerBytes = footer.bytes();
  const len = Buffer.alloc(4);
  len.writeUInt32LE(footerBytes.length);
  file.push(footerBytes);
  file.push(len);
  file.push(Buffer.from("PAR1"));
  return file.bytes();
}

function inferField(name: string, values: unknown[], where: string): ParquetField {
  const present = values.filter((v) => v !== undefined && v !== null);
  if (present.length < values.length)
    throw new ParquetWriteError(where, "is missing in some rows (every field is required)");
  if (present.length === 0) throw new ParquetWriteError(where, "has no values to infer a type from");
  if (present.every((v) => typeof v === "string")) return { name, kind: "string" };
  if (present.every((v) => typeof v === "boolean")) return { name, kind: "boolean" };
  if (present.every((v) => typeof v === "number"))
    return { name, kind: present.every((v) => Number.isSafeInteger(v)) ? "int64" : "double" };
  if (present.every((v) => Array.isArray(v))) {
    const items = present.flat();
    if (items.length === 0) return { name, kind: "list", element: { name: "element", kind: "string" } };
    return { name, kind: "list", element: inferField("element", items, `${where}[]`) };
  }
  if (present.every((v) => typeof v === "object" && !Array.isArray(v))) {
    const keys = [...new Set(present.flatMap((v) => Object.keys(v as object)))];
    return {
      name,
      kind: "struct",
      fields: keys.map((k) =>
        inferField(
          k,
          present.map((v) => (v as Record<string, unknown>)[k]),
          `${where}.${k}`,
        ),
      ),
    };
  }
  throw new ParquetWriteError(where, "mixes value types across rows");
}

/** The schema of `rows`, inferred from their values: strings, integers (int64), other numbers, booleans, arrays, objects. */
export function inferParquetSchema(rows: readonly Record<string, unknown>[]): ParquetField[] {
  if (rows.length === 0) throw new ParquetWriteError("(rows)", "no rows to infer a schema from");
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  return keys.map((k) =>
    inferField(
      k,
      rows.map((r) => r[k]),
      k,
    ),
  );
}

/** Writes `rows` (e.g. veRL dataset rows) to a Parquet file; the schema is inferred unless given. */
export function writeParquetRows(file: string, rows: readonly object[], fields?: ParquetField[]): void {
  const records = rows as readonly Record<string, unknown>[];
  writeFileSync(file, encodeParquet(fields ?? inferParquetSchema(records), records));
}
