import test from "ava";
import { DataProto, DataProtoError, isDataProtoWire } from "../../src/protocol/index.js";

function sample(n = 4): DataProto {
  const ids = new Int32Array(n * 3).map((_, i) => i);
  const scores = new Float32Array(n).map((_, i) => i * 0.5);
  return DataProto.fromDict(
    { input_ids: { data: ids, shape: [n, 3] }, scores: { data: scores, shape: [n] } },
    { uid: Array.from({ length: n }, (_, i) => `u${i}`) },
    { temperature: 1 },
  );
}

const rowsOf = (d: DataProto, key = "input_ids") => {
  const t = d.tensor<Int32Array>(key);
  const w = t.shape[1] ?? 1;
  return Array.from({ length: t.shape[0]! }, (_, i) => Array.from(t.data.subarray(i * w, (i + 1) * w)));
};

test("constructor rejects tensors that disagree on dim 0 or data that does not match the shape", (t) => {
  const e1 = t.throws(
    () =>
      DataProto.fromDict({
        a: { data: new Float32Array(4), shape: [4] },
        b: { data: new Float32Array(6), shape: [3, 2] },
      }),
    { instanceOf: DataProtoError },
  );
  t.regex(e1!.message, /"a" has 4 rows but "b" has 3/);
  t.throws(() => DataProto.fromDict({ a: { data: new Float32Array(5), shape: [2, 2] } }), {
    message: /holds 4 elements but data has 5/,
  });
  t.throws(() => DataProto.fromDict({ a: { data: new Float32Array(2), shape: [2] } }, { s: ["x"] }), {
    message: /"a" has 2 rows but "s" has 1/,
  });
});

test("chunk splits into equal views that share memory and concat restores the batch", (t) => {
  const d = sample(4);
  const parts = d.chunk(2);
  t.is(parts.length, 2);
  t.deepEqual(rowsOf(parts[1]!), [
    [6, 7, 8],
    [9, 10, 11],
  ]);
  t.deepEqual(parts[1]!.column("uid"), ["u2", "u3"]);
  t.is(parts[0]!.tensor("input_ids").data.buffer, d.tensor("input_ids").data.buffer, "chunks are views");
  const back = DataProto.concat(parts);
  t.deepEqual(rowsOf(back), rowsOf(d));
  t.deepEqual(back.column("uid"), d.column("uid"));
  t.deepEqual(back.metaInfo, { temperature: 1 });
  t.throws(() => d.chunk(3), { instanceOf: DataProtoError, message: /4 rows cannot be split into 3/ });
});

test("split gives parts of the given size with a shorter last part", (t) => {
  const parts = sample(5).split(2);
  t.deepEqual(
    parts.map((p) => p.length),
    [2, 2, 1],
  );
  t.deepEqual(parts[2]!.column("uid"), ["u4"]);
});

test("union merges keys, accepts equal duplicates and errors on conflicts naming the key", (t) => {
  const d = sample(2);
  const other = DataProto.fromDict(
    { extra: { data: new Float32Array([1, 2]), shape: [2] }, scores: d.tensor("scores") },
    { uid: ["u0", "u1"] },
  );
  d.union(other);
  t.deepEqual(Object.keys(d.batch).sort(), ["extra", "input_ids", "scores"]);
  const clash = DataProto.fromDict({ scores: { data: new Float32Array([9, 9]), shape: [2] } });
  t.throws(() => d.union(clash), {
    instanceOf: DataProtoError,
    message: /conflicting values for batch key "scores"/,
  });
  t.throws(() => d.union(DataProto.fromDict({}, { uid: ["x", "y"] })), {
    message: /nonTensorBatch key "uid"/,
  });
  t.throws(() => d.union(DataProto.fromDict({}, {}, { temperature: 0 })), {
    message: /metaInfo key "temperature"/,
  });
  t.throws(() => d.union(sample(3)), { message: /batch sizes differ/ });
});

test("select keeps the named keys sharing memory; pop removes them from the source", (t) => {
  const d = sample(3);
  const s = d.select(["scores"], []);
  t.deepEqual(Object.keys(s.batch), ["scores"]);
  t.deepEqual(Object.keys(s.nonTensorBatch), []);
  t.is(s.tensor("scores").data, d.tensor("scores").data);
  const deep = d.select(["scores"], [], undefined, true);
  t.not(deep.tensor("scores").data, d.tensor("scores").data);
  t.throws(() => d.select(["nope"]), { message: /no key "nope" in batch/ });
  const popped = d.pop(["input_ids"], ["uid"]);
  t.deepEqual(Object.keys(d.batch), ["scores"]);
  t.deepEqual(Object.keys(d.nonTensorBatch), []);
  t.deepEqual(popped.column("uid"), ["u0", "u1", "u2"]);
  t.throws(() => d.tensor("input_ids"), { message: /no tensor "input_ids" in batch \(has: scores\)/ });
});

test("repeat interleaves (a,a,b,b) by default and tiles (a,b,a,b) otherwise", (t) => {
  const d = sample(2);
  t.deepEqual(d.repeat(2).column("uid"), ["u0", "u0", "u1", "u1"]);
  t.deepEqual(rowsOf(d.repeat(2)), [
    [0, 1, 2],
    [0, 1, 2],
    [3, 4, 5],
    [3, 4, 5],
  ]);
  t.deepEqual(d.repeat(3, false).column("uid"), ["u0", "u1", "u0", "u1", "u0", "u1"]);
  t.deepEqual(Array.from(d.repeat(2, false).tensor("scores").data), [0, 0.5, 0, 0.5]);
});

test("reorder permutes rows in place and rejects non-permutations", (t) => {
  const d = sample(3);
  d.reorder([2, 0, 1]);
  t.deepEqual(d.column("uid"), ["u2", "u0", "u1"]);
  t.deepEqual(rowsOf(d)[0], [6, 7, 8]);
  t.throws(() => d.reorder([0, 0, 1]), { message: /not a permutation/ });
  t.throws(() => d.reorder([0, 1]), { message: /got 2 indices for 3 rows/ });
});

test("padToDivisor cycles the first rows and unpad strips them", (t) => {
  const d = sample(5);
  const { data, padSize } = d.padToDivisor(4);
  t.is(padSize, 3);
  t.is(data.length, 8);
  t.deepEqual(data.column("uid").slice(5), ["u0", "u1", "u2"]);
  const small = sample(1).padToDivisor(3);
  t.deepEqual(small.data.column("uid"), ["u0", "u0", "u0"]);
  const back = data.unpad(padSize);
  t.deepEqual(rowsOf(back), rowsOf(d));
  t.is(d.padToDivisor(5).padSize, 0);
});

test("toWire is a plain object whose tensors are the same typed arrays; fromWire reads it back", (t) => {
  const d = sample(2);
  const wire = d.toWire();
  t.true(isDataProtoWire(wire));
  t.is(Object.getPrototypeOf(wire), Object.prototype);
  t.is(wire.batch["input_ids"]!.data, d.tensor("input_ids").data, "no copy");
  // A structured clone stands in for a codec: typed arrays survive as typed arrays.
  const back = DataProto.fromWire(structuredClone(wire));
  t.deepEqual(rowsOf(back), rowsOf(d));
  t.deepEqual(back.column("uid"), ["u0", "u1"]);
  t.deepEqual(back.metaInfo, { temperature: 1 });
  t.throws(
    () => DataProto.fromWire({ __dataproto: 1, batch: { x: { data: [1] as any, shape: [1] } } } as any),
    {
      message: /not a typed array/,
    },
  );
});

test("selectRows gathers a copy in the given order; slice shares memory", (t) => {
  const d = sample(4);
  const g = d.selectRows([3, 1]);
  t.deepEqual(g.column("uid"), ["u3", "u1"]);
  t.deepEqual(rowsOf(g), [
    [9, 10, 11],
    [3, 4, 5],
  ]);
  const s = d.slice(-2);
  t.deepEqual(s.column("uid"), ["u2", "u3"]);
  t.throws(() => d.selectRows([4]), { message: /out of range/ });
});

const T = (n: number) => ({ data: new Float32Array(n * 2), shape: [n, 2] });
/** What a DataProto holds, to compare before and after a call that must leave it as it was. */
const snapshot = (d: DataProto) => ({
  batch: Object.fromEntries(Object.entries(d.batch).map(([k, v]) => [k, v])),
  nonTensorBatch: Object.fromEntries(Object.entries(d.nonTensorBatch).map(([k, v]) => [k, v])),
  metaInfo: { ...d.metaInfo },
});

test("union checks everything before it merges: a refused union leaves the DataProto as it was", (t) => {
  const u = new DataProto({ batch: { a: T(4) }, metaInfo: { x: 1 } });
  const before = snapshot(u);
  t.throws(() => u.union(new DataProto({ batch: { b: T(4) }, metaInfo: { x: 2 } })), {
    instanceOf: DataProtoError,
    message: /metaInfo key "x"/,
  });
  t.deepEqual(snapshot(u), before);
  const ones = { data: new Float32Array(8).fill(1), shape: [4, 2] };
  t.throws(() => u.union(new DataProto({ batch: { b: T(4), a: ones } })), {
    message: /batch key "a"/,
  });
  t.deepEqual(snapshot(u), before);
  // a 0-row column beside 4-row tensors: refused, nothing merged
  const u2 = new DataProto({ batch: { a: T(4) } });
  const e = t.throws(() => u2.union(new DataProto({ nonTensorBatch: { s: [] } })), {
    instanceOf: DataProtoError,
  });
  t.regex(e!.message, /4 vs 0|4 rows .* 0|0 rows .* 4/);
  t.deepEqual(Object.keys(u2.nonTensorBatch), []);
  t.is(u2.length, 4);
  // a DataProto with meta info only still merges into one with rows
  u2.union(new DataProto({ metaInfo: { y: 1 } }));
  t.is(u2.metaInfo.y, 1);
  t.throws(() => u2.union({ batch: {} } as unknown as DataProto), {
    instanceOf: DataProtoError,
    message: /union: expects a DataProto/,
  });
});

test("slice, unpad, split and chunk take integers; a bad argument is refused naming the method and argument", (t) => {
  const d = new DataProto({ batch: { a: T(4) } });
  t.throws(() => d.slice(Number.NaN), {
    instanceOf: DataProtoError,
    message: /slice: start must be an integer, got NaN/,
  });
  t.throws(() => d.slice(0.5, 2.5), {
    instanceOf: DataProtoError,
    message: /slice: start must be an integer, got 0\.5/,
  });
  t.throws(() => d.slice(0, 2.5), {
    instanceOf: DataProtoError,
    message: /slice: end must be an integer, got 2\.5/,
  });
  t.throws(() => d.slice("1" as unknown as number), { message: /slice: start must be an integer, got "1"/ });
  t.throws(() => d.unpad(1.5), {
    instanceOf: DataProtoError,
    message: /unpad: padSize must be an integer in \[0, 4\], got 1\.5/,
  });
  t.throws(() => d.unpad(Number.NaN), { message: /unpad: padSize must be an integer in \[0, 4\], got NaN/ });
  t.throws(() => d.unpad(5), { message: /unpad: padSize must be an integer in \[0, 4\], got 5/ });
  // negative indices count from the end (documented); the range clamps as Python's slicing does
  t.is(d.slice(-3, -1).length, 2);
  t.is(d.slice(2, 10).length, 2);
  t.is(d.unpad(1).length, 3);
  t.throws(() => d.repeat(2, "no" as unknown as boolean), {
    message: /repeat: interleave must be a boolean, got "no"/,
  });
});

test("a tensor or column added by hand must match the DataProto's rows: refused where it is added", (t) => {
  const d = new DataProto({ batch: { a: T(4) }, nonTensorBatch: { s: ["a", "b", "c", "d"] } });
  const e = t.throws(
    () => {
      d.batch.b = T(2);
    },
    { instanceOf: DataProtoError },
  );
  t.regex(e!.message, /batch\["b"\] has 2 rows but the DataProto has 4/);
  t.false("b" in d.batch);
  t.throws(
    () => {
      d.nonTensorBatch.u = ["x"];
    },
    { instanceOf: DataProtoError, message: /nonTensorBatch\["u"\] has 1 rows but the DataProto has 4/ },
  );
  t.throws(
    () => {
      d.batch.c = { data: new Float32Array(3), shape: [4, 2] };
    },
    { instanceOf: DataProtoError, message: /batch\["c"\]: shape \[4, 2\] holds 8 elements but data has 3/ },
  );
  t.throws(
    () => {
      d.nonTensorBatch.v = "abcd" as unknown as string[];
    },
    { message: /nonTensorBatch\["v"\] must be an array/ },
  );
  t.throws(() => Object.assign(d.batch, { c: T(3) }), { message: /batch\["c"\] has 3 rows/ });
  t.throws(
    () => {
      d.batch = { x: T(2) };
    },
    { instanceOf: DataProtoError, message: /"x" has 2 rows but "s" has 4/ },
  );
  t.deepEqual(Object.keys(d.batch), ["a"]);
  t.deepEqual(Object.keys(d.nonTensorBatch), ["s"]);
  d.batch.b = T(4);
  d.nonTensorBatch.u = [1, 2, 3, 4];
  t.deepEqual(
    d.chunk(2).map((c) => c.length),
    [2, 2],
  );
  // replacing the only key may change the row count
  const one = new DataProto({ batch: { a: T(4) } });
  one.batch.a = T(2);
  t.is(one.length, 2);
});

test("concat takes an array of DataProto", (t) => {
  const d = new DataProto({ batch: { a: T(2) } });
  t.throws(() => DataProto.concat(d as unknown as DataProto[]), {
    instanceOf: DataProtoError,
    message: /concat: expects an array of DataProto/,
  });
  t.throws(() => DataProto.concat([d, { batch: {} } as unknown as DataProto]), {
    instanceOf: DataProtoError,
    message: /concat: part 1 is not a DataProto/,
  });
  t.is(DataProto.concat([d, d]).length, 4);
});

test("rename, pop and select refuse bad key lists and leave the DataProto as it was", (t) => {
  const d = new DataProto({ batch: { a: T(2), b: T(2) }, nonTensorBatch: { s: ["x", "y"] } });
  const before = snapshot(d);
  t.throws(() => d.rename(["a"], ["b"]), {
    instanceOf: DataProtoError,
    message: /rename: "b" is already a key/,
  });
  t.throws(() => d.rename(["a", "b"], ["c", "c"]), { message: /rename: new key "c" appears twice/ });
  t.throws(() => d.rename(["a", "nope"], ["c", "d"]), { message: /no tensor "nope"/ });
  t.throws(() => d.rename("a" as unknown as string[], ["c"]), {
    message: /rename: oldKeys must be an array of strings/,
  });
  t.throws(() => d.pop("a" as unknown as string[]), {
    message: /pop: batchKeys must be an array of strings/,
  });
  t.throws(() => d.pop(["a"], ["nope"]), { message: /no key "nope" in nonTensorBatch/ });
  t.throws(() => d.select("a" as unknown as string[]), {
    message: /select: batchKeys must be an array of strings/,
  });
  t.deepEqual(snapshot(d), before);
  // swapping two names is a rename, not a clash
  d.rename(["a", "b"], ["b", "a"]);
  t.is(d.batch.a, before.batch.b);
  t.throws(() => new DataProto({ batch: { a: T(2) }, nonTensor: { s: [] } } as never), {
    instanceOf: DataProtoError,
    message: /unknown option "nonTensor"/,
  });
});
