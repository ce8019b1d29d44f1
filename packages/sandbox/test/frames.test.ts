import test from "ava";
import { FrameReader } from "../src/index.js";

function frame(body: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  return Buffer.concat([head, body]);
}

function* chunks(data: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

test("a 32 MiB frame in 64 KiB chunks is received with each byte copied once (linear, not quadratic)", (t) => {
  const body = Buffer.alloc(32 << 20);
  for (let i = 0; i < body.length; i += 4096) body[i] = i & 0xff;
  const got: Buffer[] = [];
  const reader = new FrameReader(
    (b) => got.push(Buffer.from(b)),
    () => t.fail("no frame is oversize"),
  );
  for (const c of chunks(frame(body), 64 << 10)) reader.push(c);
  t.is(got.length, 1);
  t.true(got[0]!.equals(body));
  // the quadratic reader copied the frame so far on every chunk: ~512 x 16 MiB = 8 GiB here
  t.is(reader.copiedBytes, body.length);
});

test("frames split anywhere (inside the length header too) or packed together come out whole and in order", (t) => {
  const bodies = ["{}", `{"a":${"1".repeat(300)}}`, "", '{"b":2}'].map((s) => Buffer.from(s));
  const stream = Buffer.concat(bodies.map(frame));
  for (const size of [1, 2, 3, 5, 7, 64, stream.length]) {
    const got: string[] = [];
    const reader = new FrameReader(
      (b) => got.push(b.toString()),
      () => t.fail("no frame is oversize"),
    );
    for (const c of chunks(stream, size)) reader.push(c);
    t.deepEqual(
      got,
      bodies.map((b) => b.toString()),
      `chunks of ${size}`,
    );
    // frames that arrive whole in one chunk are handed on as views, not copied
    if (size === stream.length) t.is(reader.copiedBytes, 0);
    t.true(reader.copiedBytes <= stream.length);
  }
});

test("a frame over the limit is read past without being kept, and the next frame still comes out", (t) => {
  const oversize: number[] = [];
  const got: string[] = [];
  const reader = new FrameReader(
    (b) => got.push(b.toString()),
    (n) => oversize.push(n),
    100,
  );
  const stream = Buffer.concat([frame(Buffer.alloc(1000, 120)), frame(Buffer.from('{"ok":1}'))]);
  for (const c of chunks(stream, 64)) reader.push(c);
  t.deepEqual(oversize, [1000]);
  t.deepEqual(got, ['{"ok":1}']);
  t.is(reader.copiedBytes, 0);
});
