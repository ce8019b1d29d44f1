/**
 * The flat layout FSDP shards over: every parameter of the model, in checkpoint order, laid end to end
 * in one Float32Array. Rank r of W owns the elements `shardRange(total, W, r)` of that vector (the
 * first total % W ranks hold one element more), so one reduce-scatter / all-gather moves all of them.
 */

/** One parameter's place in the flat vector. */
export interface FlatEntry {
  name: string;
  offset: number;
  size: number;
}

export class FlatLayout {
  readonly entries: FlatEntry[];
  readonly total: number;

  constructor(params: { name: string; size: number }[]) {
    let offset = 0;
    this.entries = params.map((p) => {
      const e = { name: p.name, offset, size: p.size };
      offset += p.size;
      return e;
    });
    this.total = offset;
  }

  /** Layout of a map of flat arrays (insertion order). */
  static of(values: Map<string, Float32Array>): FlatLayout {
    return new FlatLayout([...values].map(([name, v]) => ({ name, size: v.length })));
  }

  /** Concatenates arrays by name into one flat vector (into `out` when given). */
  flatten(values: Map<string, ArrayLike<number>>, out = new Float32Array(this.total)): Float32Array {
    for (const e of this.entries) {
      const v = values.get(e.name);
      if (!v) throw new RangeError(`flatten: parameter ${e.name} is missing`);
      if (v.length !== e.size)
        throw new RangeError(`flatten: parameter ${e.name} has ${v.length} values, expected ${e.size}`);
      out.set(v, e.offset);
    }
    return out;
  }

  /** Views of the flat vector by name (no copies). */
  unflatten(flat: Float32Array): Map<string, Float32Array> {
    if (flat.length !== this.total)
      throw new RangeError(`unflatten: got ${flat.length} values, layout holds ${this.total}`);
    return new Map(this.entries.map((e) => [e.name, flat.subarray(e.offset, e.offset + e.size)]));
  }
}
