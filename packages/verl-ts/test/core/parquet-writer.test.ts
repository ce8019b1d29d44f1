import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { parquetMetadata, parquetReadObjects } from "hyparquet";
import {
  encodeParquet,
  inferParquetSchema,
  ParquetWriteError,
  type RlDatasetRow,
  readParquetRows,
  writeParquetRows,
} from "../../src/index.js";

const ROWS: RlDatasetRow[] = Array.from({ length: 40 }, (_, i) => ({
  data_source: `tiny/${["gcd", "lcm", "modpow"][i % 3]}`,
  prompt: [
    ...(i % 4 === 0 ? [{ role: "system", content: "Be brief. ✓" }] : []),
    { role: "user", content: `What is ${i} + ${i * 7}? “quoted” ${"x".repeat(i)}` },
  ],
  ability: "math",
  reward_model: { ground_truth: String(i * 8), style: "rule" },
  extra_info: {
    split: "val",
    index: i,
    hard: i % 2 === 0,
    weight: i / 3,
    tags: i % 5 === 0 ? [] : ["a", `t${i}`],
  },
}));

function tmp(t: { teardown: (f: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-parquet-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("dataset rows written as parquet read back equal with the project's reader (readParquetRows)", async (t) => {
  const file = join(tmp(t), "rows.parquet");
  writeParquetRows(file, ROWS);
  const back = await readParquetRows(file);
  t.deepEqual(back, ROWS);
});

test("the file reads back with hyparquet directly: lists of structs, empty lists, int64, double, boolean", async (t) => {
  const bytes = encodeParquet(
    inferParquetSchema(ROWS as unknown as Record<string, unknown>[]),
    ROWS as never,
  );
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  const meta = parquetMetadata(buf);
  t.is(Number(meta.num_rows), ROWS.length);
  const records = (await parquetReadObjects({ file: buf })) as Record<string, any>[];
  t.is(records.length, ROWS.length);
  t.deepEqual(records[5]!.extra_info.tags, []);
  t.deepEqual(records[6]!.extra_info.tags, ["a", "t6"]);
  t.is(records[3]!.extra_info.index, 3n, "integers are int64");
  t.is(records[3]!.extra_info.weight, 1);
  t.is(records[4]!.extra_info.hard, true);
  t.is(records[4]!.prompt.length, 2);
  t.is(records[4]!.prompt[0].content, "Be brief. ✓");
});

test("python3 reads the file when pyarrow is installed (skipped otherwise)", (t) => {
  let hasPyarrow = true;
  try {
    execFileSync("python3", ["-c", "import pyarrow"], { stdio: "ignore" });
  } catch {
    hasPyarrow = false;
  }
  if (!hasPyarrow) {
    t.log("pyarrow not installed: the independent reader check is skipped");
    t.pass();
    return;
  }
  const file = join(tmp(t), "rows.parquet");
  writeParquetRows(file, ROWS);
  const out = execFileSync(
    "python3",
    [
      "-c",
      "import sys, json, pyarrow.parquet as pq; print(json.dumps(pq.read_table(sys.argv[1]).to_pylist()))",
      file,
    ],
    { encoding: "utf8" },
  );
  t.deepEqual(JSON.parse(out), JSON.parse(JSON.stringify(ROWS)));
});

test("a row that does not fit the schema is refused, naming the row and the field", (t) => {
  const rows = [ROWS[0]!, { ...ROWS[1]!, reward_model: { ground_truth: 7, style: "rule" } }];
  const schema = inferParquetSchema([ROWS[0]!] as never);
  const e = t.throws(() => encodeParquet(schema, rows as never), { instanceOf: ParquetWriteError });
  t.regex(e!.message, /row 1, reward_model\.ground_truth: must be string/);
  const f = t.throws(() => inferParquetSchema([{ a: 1 }, { a: "x" }]), { instanceOf: ParquetWriteError });
  t.regex(f!.message, /^a: mixes value types/);
});

test("the file starts and ends with PAR1 and its footer length points at the footer", (t) => {
  const file = join(tmp(t), "rows.parquet");
  writeParquetRows(file, ROWS.slice(0, 3));
  const b = readFileSync(file);
  t.is(b.subarray(0, 4).toString(), "PAR1");
  t.is(b.subarray(-4).toString(), "PAR1");
  const footerLen = b.readUInt32LE(b.length - 8);
  t.true(footerLen > 0 && footerLen < b.length - 12);
});
