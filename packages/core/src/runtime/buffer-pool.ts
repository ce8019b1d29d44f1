/**
 * Recycled memory for `put`: large object buffers come from ArrayBuffers that earlier, freed
 * objects used, so the snapshot copy lands in pages the process has already touched (a copy into
 * fresh memory pays a page fault per 4 KiB page, which on some VMs makes it 50-100x slower).
 * Ray's plasma store gets the same effect from its preallocated arena.
 *
 * Buffers are grouped in size classes (8 per power of two, so at most 12.5% slack) and kept, most
 * recently released first, up to `maxBytes` in all; the least recently released go first when the
 * cap is reached, and buffers idle for `idleMs` are dropped so a burst of puts does not pin memory.
 *
 * The pool knows nothing about who can see a buffer: the caller (ObjectStore) must release a
 * buffer only when no view of it can be reached from user code or from a pending send. See the
 * rule in object-store.ts.
 */
import os from "node:os";

export interface BufferPoolOptions {
  /** Idle bytes kept at most (default min(1 GiB, total memory / 16); env TORL_OBJECT_POOL_BYTES). */
  maxBytes?: number;
  /** Objects smaller than this are not pooled (default 64 KiB). */
  minBytes?: number;
  /** Idle buffers older than this are dropped (default 30 s). */
  idleMs?: number;
}

export interface BufferPoolStats {
  idleBytes: number;
  idleBuffers: number;
  /** acquisitions served from the pool */
  hits: number;
  /** acquisitions of poolable size that needed fresh memory */
  misses: number;
  /** buffers dropped for the cap or for idling */
  evicted: number;
}

interface Idle {
  buf: ArrayBuffer;
  at: number;
}

/** Capacity of the size class holding `n` bytes: n rounded up to a multiple of 2^floor(log2 n) / 8. */
export function sizeClass(n: number): number {
  if (n <= 8) return 8;
  const step = 2 ** Math.floor(Math.log2(n)) / 8;
  return Math.ceil(n / step) * step;
}

export class BufferPool {
  readonly maxBytes: number;
  readonly minBytes: number;
  readonly idleMs: number;
  private classes = new Map<number, Idle[]>();
  private idleBytes = 0;
  private idleBuffers = 0;
  private hits = 0;
  private misses = 0;
  private evicted = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(opts: BufferPoolOptions = {}) {
    const env = Number(process.env.TORL_OBJECT_POOL_BYTES);
    this.maxBytes = opts.maxBytes ?? (Number.isFinite(env) && env >= 0 ? env : defaultMaxBytes());
    this.minBytes = opts.minBytes ?? 64 * 1024;
    this.idleMs = opts.idleMs ?? 30_000;
  }

  /** Whether an object buffer of `n` bytes comes from (and goes back to) the pool. */
  poolable(n: number): boolean {
    return n >= this.minBytes && sizeClass(n) <= this.maxBytes;
  }

  /**
   * A copy of `src` in pooled memory when its size is poolable (else in fresh memory). Every byte
   * of the returned view's ArrayBuffer is either copied from `src` or zero: a recycled buffer never
   * shows what an earlier object left in it, not even past the view's end (in `.buffer`).
   */
  copyIn(src: Uint8Array): Uint8Array {
    const n = src.byteLength;
    if (!this.poolable(n)) {
      const c = new Uint8Array(n);
      c.set(src);
      return c;
    }
    const cap = sizeClass(n);
    const buf = this.take(cap);
    const out = new Uint8Array(buf ?? new ArrayBuffer(cap), 0, n);
    out.set(src);
    if (buf) {
      this.hits++;
      if (cap > n) new Uint8Array(buf, n).fill(0);
    } else this.misses++;
    return out;
  }

  /** Gives a buffer back. The caller guarantees nothing else can see it any more. */
  release(buf: ArrayBuffer): void {
    const cap = buf.byteLength;
    // detached, foreign-sized or too large for the cap: let the GC have it
    if (cap < this.minBytes || cap !== sizeClass(cap) || cap > this.maxBytes) return;
    let list = this.classes.get(cap);
    if (!list) this.classes.set(cap, (list = []));
    list.push({ buf, at: Date.now() });
    this.idleBytes += cap;
    this.idleBuffers++;
    while (this.idleBytes > this.maxBytes) this.evictOldest();
    if (this.idleBuffers > 0 && !this.timer) {
      this.timer = setInterval(() => this.trimIdle(), Math.max(1000, this.idleMs / 2));
      this.timer.unref();
    }
  }

  /** Drops buffers idle for longer than `idleMs`. */
  trimIdle(now = Date.now()): void {
    for (const [cap, list] of this.classes) {
      while (list.length > 0 && now - list[0]!.at > this.idleMs) {
        list.shift();
        this.idleBytes -= cap;
        this.idleBuffers--;
        this.evicted++;
      }
      if (list.length === 0) this.classes.delete(cap);
    }
    this.stopTimerIfEmpty();
  }

  /** Drops every idle buffer. */
  clear(): void {
    this.classes.clear();
    this.idleBytes = 0;
    this.idleBuffers = 0;
    this.stopTimerIfEmpty();
  }

  stats(): BufferPoolStats {
    return {
      idleBytes: this.idleBytes,
      idleBuffers: this.idleBuffers,
      hits: this.hits,
      misses: this.misses,
      evicted: this.evicted,
    };
  }

  private take(cap: number): ArrayBuffer | null {
    const list = this.classes.get(cap);
    while (list && list.length > 0) {
      const { buf } = list.pop()!;
      this.idleBytes -= cap;
      this.idleBuffers--;
      if (list.length === 0) this.classes.delete(cap);
      if (buf.byteLength === cap) return buf; // not detached meanwhile
    }
    this.stopTimerIfEmpty();
    return null;
  }

  private evictOldest(): void {
    let oldest: number | null = null;
    let at = Number.POSITIVE_INFINITY;
    for (const [cap, list] of this.classes) {
      if (list.length > 0 && list[0]!.at < at) {
        at = list[0]!.at;
        oldest = cap;
      }
    }
    if (oldest === null) return;
    const list = this.classes.get(oldest)!;
    list.shift();
    if (list.length === 0) this.classes.delete(oldest);
    this.idleBytes -= oldest;
    this.idleBuffers--;
    this.evicted++;
  }

  private stopTimerIfEmpty(): void {
    if (this.idleBuffers === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}

function defaultMaxBytes(): number {
  return Math.min(1024 ** 3, Math.floor(os.totalmem() / 16));
}
