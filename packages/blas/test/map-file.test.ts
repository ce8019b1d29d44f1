// mapFile and releaseMapped: a file read in place, its pages let go and read again; bad arguments refused.
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { addon } from "./helpers.js";

/** Resident pages of this process in mappings of `path` (from /proc/self/smaps), in KiB. */
function residentKib(path: string): number {
  let kib = 0;
  let inside = false;
  for (const line of readFileSync("/proc/self/smaps", "utf8").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inside = line.endsWith(path);
    else if (inside && line.startsWith("Rss:")) kib += Number(line.split(/\s+/)[1]);
  }
  return kib;
}

test("a mapped file reads as written, with nothing copied; released pages read the same again; a write stays out of the file", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const dir = mkdtempSync(join(tmpdir(), "torl-map-"));
  const path = join(dir, "values");
  const words = Uint16Array.from({ length: 300_000 }, (_, i) => (i * 7919) & 0xffff);
  const fd = openSync(path, "w+");
  try {
    writeSync(fd, new Uint8Array(words.buffer));
    const buffer = blas.mapFile(fd, words.byteLength);
    const mapped = new Uint16Array(buffer);
    t.is(buffer.byteLength, words.byteLength);
    t.deepEqual(mapped, words);
    const touched = residentKib(path);
    t.true(touched >= (words.byteLength / 1024) * 0.9, `${touched} KiB resident after a read`);
    // the middle lets go of its pages; the file keeps them
    blas.releaseMapped(buffer, 100_000, 300_000);
    t.true(residentKib(path) <= touched - 280, `${residentKib(path)} KiB resident after the release`);
    t.deepEqual(mapped, words);
    // private: a write changes this process's copy, never the file
    mapped[5] = 12345;
    const again = new Uint16Array(blas.mapFile(fd, words.byteLength));
    t.is(again[5], words[5]);
    t.is(new Uint16Array(readFileSync(path).buffer, 0, 8)[5], words[5]);
    // bad arguments, named
    t.throws(() => blas.mapFile(fd, 0), {
      message: /mapFile: length must be a whole number of bytes of at least 1/,
    });
    t.throws(() => blas.mapFile(-1, 10), { message: /mapFile: fd must be/ });
    t.throws(() => blas.mapFile(1_000_000, 10), {
      message: /mapFile: mmap of fd 1000000 failed: Bad file descriptor/,
    });
    t.throws(() => blas.releaseMapped(buffer, 10, words.byteLength), { message: /runs past the buffer/ });
    t.throws(() => blas.releaseMapped(new Uint8Array(4) as never, 0, 1), {
      message: /buffer must be an ArrayBuffer from mapFile/,
    });
    t.throws(() => blas.releaseMapped(buffer, 1.5, 1), { message: /byteOffset must be a whole number/ });
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
});
