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
  const optim: OptimSettings = {
    lr: 1e-3,
    lr_warmup_steps: -1,
    lr_warmup_steps_ratio: 0,
    min_lr_ratio: null,
    warmup_style: "constant",
    total_training_steps: 1,
    weight_decay: 0,
  };
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
