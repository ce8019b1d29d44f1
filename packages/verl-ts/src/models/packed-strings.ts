/**
 * Strings, and maps from strings to integers, kept in a few flat arrays instead of one heap object per
 * string. A byte-level BPE vocabulary has ~150k tokens and as many merges: held as JavaScript strings,
 * arrays and Maps they are tens of megabytes of small objects, which every full garbage collection of
 * the process walks. With Qwen's tokenizer loaded a model worker's full collection took three times as
 * long as without it; packed, the tables are a handful of objects.
 */

/** FNV-1a over the UTF-16 code units of s[start, end). */
function hashRange(s: string, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Strings by index, concatenated into one string; an index never given reads undefined. */
export class PackedStrings {
  private readonly text: string;
  /** Where entry i starts in `text`, or -1 where there is no entry. */
  private readonly starts: Int32Array;
  private readonly ends: Int32Array;

  constructor(strings: ArrayLike<string | undefined>) {
    const n = strings.length;
    this.starts = new Int32Array(n).fill(-1);
    this.ends = new Int32Array(n);
    const parts: string[] = [];
    let pos = 0;
    for (let i = 0; i < n; i++) {
      const s = strings[i];
      if (s === undefined) continue;
      if (typeof s !== "string") throw new TypeError(`entry ${i} is a ${typeof s}, not a string`);
      this.starts[i] = pos;
      parts.push(s);
      pos += s.length;
      this.ends[i] = pos;
    }
    this.text = parts.join("");
  }

  get length(): number {
    return this.starts.length;
  }

  at(i: number): string | undefined {
    const start = Number.isInteger(i) && i >= 0 && i < this.starts.length ? this.starts[i]! : -1;
    return start < 0 ? undefined : this.text.slice(start, this.ends[i]);
  }

  /** Whether entry i is `s` (false where there is no entry), without making a string. */
  equals(i: number, s: string): boolean {
    const start = this.starts[i]!;
    if (start < 0 || this.ends[i]! - start !== s.length) return false;
    for (let k = 0; k < s.length; k++) if (this.text.charCodeAt(start + k) !== s.charCodeAt(k)) return false;
    return true;
  }

  hash(i: number): number {
    return hashRange(this.text, this.starts[i]!, this.ends[i]!);
  }
}

/**
 * A read-mostly Map from strings to 32-bit integers: its keys packed (PackedStrings), found through an
 * open-addressing table of entry indices. `get` and `has` allocate nothing. Keys set after packing go
 * to a small Map, which is read first.
 */
export class PackedStringMap {
  private readonly keys: PackedStrings;
  private readonly values: Int32Array;
  /** Entry index per slot, -1 where empty; a power of two in size, at most half full. */
  private readonly slots: Int32Array;
  private readonly later = new Map<string, number>();

  /** Packs `entries`; undefined when a value is not a 32-bit integer (the caller keeps its Map). */
  static from(entries: Iterable<[string, number]>): PackedStringMap | undefined {
    const keys: string[] = [];
    const values: number[] = [];
    for (const [k, v] of entries) {
      if (typeof k !== "string" || !Number.isInteger(v) || v !== (v | 0)) return undefined;
      keys.push(k);
      values.push(v);
    }
    return new PackedStringMap(keys, values);
  }

  private constructor(keys: string[], values: number[]) {
    this.keys = new PackedStrings(keys);
    this.values = Int32Array.from(values);
    let size = 16;
    while (size < 2 * keys.length) size *= 2;
    this.slots = new Int32Array(size).fill(-1);
    const mask = size - 1;
    for (let i = 0; i < keys.length; i++) {
      let slot = this.keys.hash(i) & mask;
      while (this.slots[slot]! >= 0) slot = (slot + 1) & mask;
      this.slots[slot] = i;
    }
  }

  private find(key: string): number {
    const mask = this.slots.length - 1;
    for (let slot = hashRange(key, 0, key.length) & mask; ; slot = (slot + 1) & mask) {
      const entry = this.slots[slot]!;
      if (entry < 0 || this.keys.equals(entry, key)) return entry;
    }
  }

  get(key: string): number | undefined {
    const set = this.later.get(key);
    if (set !== undefined) return set;
    if (typeof key !== "string") return undefined;
    const entry = this.find(key);
    return entry < 0 ? undefined : this.values[entry];
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  set(key: string, value: number): this {
    this.later.set(key, value);
    return this;
  }

  get size(): number {
    let added = 0;
    for (const k of this.later.keys()) if (this.find(k) < 0) added++;
    return this.keys.length + added;
  }

  *entries(): IterableIterator<[string, number]> {
    for (let i = 0; i < this.keys.length; i++) {
      const k = this.keys.at(i)!;
      if (!this.later.has(k)) yield [k, this.values[i]!];
    }
    yield* this.later.entries();
  }

  [Symbol.iterator](): IterableIterator<[string, number]> {
    return this.entries();
  }
}
