import test from "ava";
import { createActor, free, get, init, put, shutdown } from "../src/index.js";
import { BufferPool, sizeClass } from "../src/runtime/buffer-pool.js";
import { currentRuntime } from "../src/runtime/current.js";

const FIXTURE = new URL("./fixtures/counter.ts", import.meta.url).href;
const MIB = 1024 * 1024;

/** The stored value of an owned ref, read without handing it out (which would stop recycling). */
function peek(ref: { seq: number }): any {
  return currentRuntime().store.entries.get(ref.seq)?.value;
}

function pool(): BufferPool {
  return currentRuntime().store.pool;
}

function filled(bytes: number, v: number): Float32Array {
  return new Float32Array(bytes / 4).fill(v);
}

test.before(async () => {
  await init({ numCpus: 1 });
});
test.after.always(async () => {
  await shutdown();
});

test.serial("size classes: 8 per power of two, exact at powers of two", (t) => {
  t.is(sizeClass(64 * MIB), 64 * MIB);
  t.is(sizeClass(1_000_000), MIB);
  t.is(sizeClass(MIB + 1), MIB + MIB / 8);
  for (const n of [65_536, 100_000, 3 * MIB + 7, 200 * MIB]) {
    const c = sizeClass(n);
    t.true(c >= n && c <= n * 1.125 + 8, `class ${c} for ${n}`);
    t.is(sizeClass(c), c);
  }
});

test.serial(
  "the pool reuses a released buffer, zeroes the slack past the copy, and keeps to its cap (LRU)",
  (t) => {
    const p = new BufferPool({ maxBytes: 3 * MIB, minBytes: 64 * 1024 });
    const first = p.copyIn(new Uint8Array(MIB).fill(0xee));
    t.is(first.buffer.byteLength, MIB);
    p.release(first.buffer as ArrayBuffer);
    const src = new Uint8Array(1_000_000).fill(0x11);
    const again = p.copyIn(src);
    t.is(again.buffer, first.buffer, "served from the pool");
    t.is(again.byteLength, 1_000_000);
    const all = new Uint8Array(again.buffer);
    t.true(all.subarray(0, 1_000_000).every((b) => b === 0x11));
    t.true(
      all.subarray(1_000_000).every((b) => b === 0),
      "no old bytes past the object's end",
    );
    t.deepEqual(p.stats().hits, 1);

    // cap: 4 x 1 MiB released into a 3 MiB pool keeps the 3 most recent
    const bufs = [0, 1, 2, 3].map(() => p.copyIn(new Uint8Array(MIB)).buffer as ArrayBuffer);
    for (const b of bufs) p.release(b);
    t.is(p.stats().idleBytes, 3 * MIB);
    t.is(p.stats().evicted, 1);
    const got = [0, 1, 2].map(() => p.copyIn(new Uint8Array(MIB)).buffer);
    t.deepEqual(new Set(got), new Set(bufs.slice(1)), "the least recently released one was dropped");

    // small objects are never pooled; idle buffers are trimmed
    p.release(new ArrayBuffer(1024));
    t.is(p.stats().idleBuffers, 0);
    p.release(got[0] as ArrayBuffer);
    p.trimIdle(Date.now() + p.idleMs + 1);
    t.is(p.stats().idleBuffers, 0);
  },
);

test.serial(
  "a freed put's buffer is recycled into the next put without leaking its old contents",
  async (t) => {
    const a = put(filled(4 * MIB, 7));
    const bufA = peek(a).buffer;
    const hits = pool().stats().hits;
    free(a);
    const b = put(filled(4 * MIB, 9));
    t.is(peek(b).buffer, bufA, "the second put reused the first one's memory");
    t.is(pool().stats().hits, hits + 1);
    const vb = (await get(b)) as Float32Array;
    t.is(vb.length, MIB);
    t.true(vb.every((x) => x === 9));

    // a smaller object in the same size class: the slack past its end is zero, not the old 7s
    const c = put(filled(MIB, 5));
    free(c);
    const d = put(new Float32Array(250_000).fill(3)); // 1,000,000 bytes: class 1 MiB
    const vd = (await get(d)) as Float32Array;
    t.is(vd.buffer.byteLength, MIB, "served from the 1 MiB buffer c used");
    t.true(vd.every((x) => x === 3));
    t.true(new Uint8Array(vd.buffer, vd.byteLength).every((x) => x === 0));
  },
);

test.serial("a value returned by get is never overwritten by later puts", async (t) => {
  const r = put(filled(4 * MIB, 1));
  const v = (await get(r)) as Float32Array;
  const idle = pool().stats().idleBuffers;
  free(r);
  t.is(pool().stats().idleBuffers, idle, "a handed-out buffer does not go back to the pool");
  const later = [];
  for (let i = 0; i < 4; i++) {
    const x = put(filled(4 * MIB, 100 + i));
    t.not(peek(x).buffer, v.buffer);
    later.push(x);
  }
  for (const x of later) free(x);
  t.true(v.every((x) => x === 1));
});

test.serial("put still snapshots when it copies into a recycled buffer", async (t) => {
  free(put(filled(4 * MIB, 0)));
  const hits = pool().stats().hits;
  const src = filled(4 * MIB, 2);
  const r = put(src);
  t.is(pool().stats().hits, hits + 1);
  src.fill(-1);
  const v = (await get(r)) as Float32Array;
  t.true(v.every((x) => x === 2));
  free(r);
});

test.serial("an object another process fetched is not recycled, and the reader sees its value", async (t) => {
  const c = createActor(FIXTURE, "Counter", [0]);
  await c.ready();
  const r = put(filled(4 * MIB, 1)); // over the 1 MiB inline limit: the actor fetches it
  const sum = await (c as any).sum(r);
  t.is(sum, MIB);
  const idle = pool().stats().idleBuffers;
  free(r);
  t.is(pool().stats().idleBuffers, idle, "a served object's buffer is not recycled");
  // and a later put with other contents does not change what a new read of a fresh object sees
  const r2 = put(filled(4 * MIB, 2));
  t.is(await (c as any).sum(r2), 2 * MIB);
});
