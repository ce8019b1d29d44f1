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

test("pieces of files mapped into one reserved array read as the files hold them; offsets off a page are refused", (t) => {
  const blas = addon(t);
  if (!blas) return;
  const page = blas.pageSize();
  t.true(page >= 4096 && (page & (page - 1)) === 0, `page ${page}`);
  const dir = mkdtempSync(join(tmpdir(), "torl-map-"));
  const fds: number[] = [];
  try {
    // two files of three pages each, word i of file f holding f * 50000 + i
    const files = [0, 1].map((f) => {
      const words = Uint16Array.from({ length: (3 * page) / 2 }, (_, i) => (f * 50000 + i) & 0xffff);
      const fd = openSync(join(dir, `f${f}`), "w+");
      fds.push(fd);
      writeSync(fd, new Uint8Array(words.buffer));
      return { fd, words };
    });
    const buffer = blas.reserveMapping(4 * page);
    const view = new Uint16Array(buffer);
    t.true(
      view.every((w) => w === 0),
      "reserved memory reads as zeros",
    );
    // page 0 <- file 0's page 1; pages 2-3 <- file 1's pages 0-1; page 1 stays private
    blas.mapFileInto(buffer, 0, files[0]!.fd, page, page);
    blas.mapFileInto(buffer, 2 * page, files[1]!.fd, 0, 2 * page);
    view.fill(7, page / 2, page);
    const words = page / 2;
    t.deepEqual(view.subarray(0, words), files[0]!.words.subarray(words, 2 * words));
    t.true(view.subarray(words, 2 * words).every((w) => w === 7));
    t.deepEqual(view.subarray(2 * words), files[1]!.words.subarray(0, 2 * words));
    // the mapped pages read from the files again after a release; the private page is zeros then
    blas.releaseMapped(buffer, 0, 4 * page);
    t.deepEqual(view.subarray(0, words), files[0]!.words.subarray(words, 2 * words));
    t.true(view.subarray(words, 2 * words).every((w) => w === 0));
    t.deepEqual(view.subarray(2 * words), files[1]!.words.subarray(0, 2 * words));
    t.throws(() => blas.mapFileInto(buffer, 100, files[0]!.fd, 0, page), { message: /must be whole pages/ });
    t.throws(() => blas.mapFileInto(buffer, 0, files[0]!.fd, 100 * 2, page), {
      message: /must be whole pages/,
    });
    t.throws(() => blas.mapFileInto(buffer, 3 * page, files[0]!.fd, 0, 2 * page), {
      message: /runs past the buffer/,
    });
    t.throws(() => blas.reserveMapping(0), { message: /reserveMapping: length must be a whole number/ });
  } finally {
    for (const fd of fds) closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
});
