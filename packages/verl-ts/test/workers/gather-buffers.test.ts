/**
 * GatherBuffers: arrays lent for whole-unit gathers come back when their borrower reclaims them, and the
 * next take of the same type and length gets the same memory; ShardedParameters gathers into a given
 * array and refuses one of the wrong type or length.
 */
import test from "ava";
import { HalfArray } from "../../src/models/half-precision.js";
import { GatherBuffers } from "../../src/workers/gather-buffers.js";
import type { OptimSettings } from "../../src/workers/optim.js";
import { ShardedParameters } from "../../src/workers/sharded-parameters.js";

const optim: OptimSettings = {
  lr: 1e-3,
  lr_warmup_steps: -1,
  lr_warmup_steps_ratio: 0,
  min_lr_ratio: null,
  warmup_style: "constant",
  total_training_steps: 1,
  weight_decay: 0,
};

test("a reclaimed array is lent again for the same type and length, and only then", (t) => {
  const pool = new GatherBuffers();
  const a = pool.take("actor", Uint16Array, 8);
  const b = pool.take("actor", Uint16Array, 4);
  t.is(pool.bytes, 24);
  t.is(pool.idleBytes, 0);
  // lent to the actor: the reference gets its own
  const r = pool.take("ref", Uint16Array, 8);
  t.not(r, a);
  pool.reclaim("actor");
  t.is(pool.idleBytes, 24);
  t.is(pool.take("ref", Uint16Array, 8), a, "the actor's array, once reclaimed");
  t.not(pool.take("ref", Float32Array, 4) as unknown, b, "another type is another array");
  t.is(pool.take("ref", Uint16Array, 4), b);
  t.not(pool.take("ref", Uint16Array, 8), r, "the reference still holds its first one");
  pool.reclaim("ref");
  pool.reclaim("nobody");
  t.is(pool.bytes, pool.idleBytes);
  t.is(pool.bytes, 16 + 8 + 16 + 16 + 16, "the five arrays made, nothing lost or doubled");
});

test("gatherUnitStored writes into the array it is given, and refuses one of the wrong type or length", async (t) => {
  const w = Float32Array.from({ length: 6 }, (_, i) => 1 + i / 3);
  const s = new ShardedParameters(new Map([["w", w]]), { rank: 0, worldSize: 1 }, optim);
  const out = new Uint16Array(6);
  const half = await s.gatherUnitStored(0, "bfloat16", out);
  t.true(half instanceof HalfArray);
  t.is((half as HalfArray).bits, out, "the bits are in the given array");
  t.deepEqual(out, HalfArray.fromFloat32(w, "bfloat16").bits);
  const f32 = new Float32Array(6);
  t.is(await s.gatherUnitStored(0, "float32", f32), f32);
  t.deepEqual(f32, w);
  await t.throwsAsync(s.gatherUnitStored(0, "bfloat16", new Uint16Array(5)), {
    instanceOf: RangeError,
    message: /5 values/,
  });
  await t.throwsAsync(s.gatherUnitStored(0, "bfloat16", new Float32Array(6)), {
    instanceOf: TypeError,
    message: /Uint16Array/,
  });
  await t.throwsAsync(s.gatherUnitStored(0, "float32", new Uint16Array(6)), {
    instanceOf: TypeError,
    message: /Float32Array/,
  });
});

test("an array marked as holding a gather's content is taken back with it until it is lent to be written", (t) => {
  const pool = new GatherBuffers();
  const a = pool.take("actor", Uint16Array, 8);
  a.fill(7);
  pool.markHolding(a, "shard 1.0 unit 0 bfloat16");
  t.false(pool.holds("shard 1.0 unit 0 bfloat16"), "lent, not idle: nothing to take back yet");
  pool.reclaim("actor");
  t.true(pool.holds("shard 1.0 unit 0 bfloat16"));
  t.false(pool.holds("shard 1.1 unit 0 bfloat16"), "another version is other content");
  const back = pool.takeHolding("actor", "shard 1.0 unit 0 bfloat16");
  t.is(back, a);
  t.deepEqual([...back!], new Array(8).fill(7));
  t.is(pool.takeHolding("actor", "shard 1.0 unit 0 bfloat16"), undefined, "lent again: not idle");
  pool.reclaim("actor");
  // a plain take prefers an array that holds nothing; once it must take the marked one, the mark is gone
  const plain = pool.take("ref", Uint16Array, 8);
  t.is(plain, a, "the only array of that length");
  pool.reclaim("ref");
  t.false(pool.holds("shard 1.0 unit 0 bfloat16"), "written by its last borrower: it holds nothing known");
  const b = pool.take("actor", Uint16Array, 8);
  const c = pool.take("actor", Uint16Array, 8);
  pool.markHolding(c, "x");
  pool.markHolding(b, "x");
  pool.reclaim("actor");
  t.is(pool.takeHolding("ref", "x"), b, "the last array marked with a content is the one holding it");
  t.is(pool.take("ref", Uint16Array, 8), c);
  t.throws(() => pool.markHolding(new Uint16Array(8), "y"), { message: /not lent from these buffers/ });
});

test("a shard's version changes with every optimizer step and load, and differs between shards", async (t) => {
  const values = new Map([["w", Float32Array.from([1, 2, 3, 4])]]);
  const s = new ShardedParameters(values, { rank: 0, worldSize: 1 }, optim);
  const other = new ShardedParameters(values, { rank: 0, worldSize: 1 }, optim);
  t.not(s.version, other.version);
  const before = s.version;
  t.is(s.version, before, "reading it changes nothing");
  await s.step(Float32Array.from([0.1, 0.2, 0.3, 0.4]), 1e-3, 1);
  t.not(s.version, before);
  t.true(await s.everyRank(true));
  t.false(await s.everyRank(false));
});

test("arrays carved out of a lent region: only for takes that carve, gone when its owner takes it back", (t) => {
  const pool = new GatherBuffers();
  const region = new Float32Array(64); // 256 bytes
  pool.lendRegion(region.buffer);
  t.throws(() => pool.lendRegion(new ArrayBuffer(8)), { message: /a region is lent already/ });
  const a = pool.take("actor", Uint16Array, 40, { carve: true });
  const b = pool.take("actor", Uint16Array, 40, { carve: true });
  t.is(a.buffer, region.buffer);
  t.is(b.buffer, region.buffer);
  t.is(b.byteOffset, 128, "the next carve starts at a 64-byte boundary");
  // no room left for a third: a new array of its own
  const c = pool.take("actor", Uint16Array, 40, { carve: true });
  t.not(c.buffer, region.buffer);
  t.is(pool.carvedBytes, 160);
  t.is(pool.bytes, 240);
  // the owner cannot take the region back while its arrays are lent
  t.throws(() => pool.reclaimRegion(), { message: /still read by actor/ });
  pool.reclaim("actor");
  // a take that does not carve never gets a carved array, though one is idle
  const d = pool.take("layers", Uint16Array, 40);
  t.is(d, c, "the one array of its own");
  t.not(pool.take("layers", Uint16Array, 40).buffer, region.buffer);
  pool.reclaim("layers");
  // the owner takes its memory back: the carved arrays are gone from the pool, the others stay
  pool.reclaimRegion();
  t.is(pool.carvedBytes, 0);
  t.is(pool.bytes, 160);
  region.fill(1); // the owner's again
  t.not(pool.take("actor", Uint16Array, 40, { carve: true }).buffer, region.buffer, "no region: no carving");
  // lent again: carving starts over from its beginning
  pool.lendRegion(region.buffer);
  t.is(pool.take("actor", Uint16Array, 100, { carve: true }).byteOffset, 0);
});
