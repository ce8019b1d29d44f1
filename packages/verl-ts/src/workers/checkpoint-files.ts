/**
 * Actor checkpoint shards on disk: for each rank r, `rank_<r>.json` (the ranges of the flat vector its
 * shard holds, in order, and the optimizer/scheduler counters) and `rank_<r>.bin` (params, exp_avg,
 * exp_avg_sq of the shard, float32 little-endian, one after the other). Loading reads every rank's files and takes the
 * range the loading rank owns, so a checkpoint written by W ranks loads on any number of ranks.
 *
 * The params are the optimizer's float32 master copy whatever the model's storage dtype; `dtype` records
 * that storage dtype (actor_rollout_ref.model.dtype), so a resumed run stores its weights the same way
 * and an export keeps it.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { WEIGHT_DTYPES, type WeightDtype } from "../models/half-precision.js";

export interface ShardCounters {
  rank: number;
  worldSize: number;
  total: number;
  /** AdamW updates applied. */
  adamStep: number;
  /** Scheduler steps taken (update_actor calls). */
  schedulerStep: number;
  /** Parameter names and sizes of the flat layout (checked on load). */
  layout: [string, number][];
  /** Storage dtype of the model's weights; absent in checkpoints written before it was recorded (float32). */
  dtype?: WeightDtype;
}

/**
 * Where a shard lies in the flat vector: its [start, end) ranges, end to end in the file (one per unit
 * of per-layer sharding), or one range as start and end (shards written before the units).
 */
export type ShardPlace = { ranges: [number, number][] } | { start: number; end: number };

export type ShardMeta = ShardCounters & ShardPlace;

/** The ranges of a shard, whichever way its file gives them. */
export function shardRanges(meta: ShardPlace): [number, number][] {
  return "ranges" in meta ? meta.ranges : [[meta.start, meta.end]];
}

/** A checkpoint directory that cannot be loaded (missing or inconsistent shards); names the file. */
export class CheckpointError extends Error {
  override name = "CheckpointError";
}

export function writeShard(
  dir: string,
  meta: ShardMeta,
  params: Float32Array,
  expAvg: Float32Array,
  expAvgSq: Float32Array,
): void {
  mkdirSync(dir, { recursive: true });
  const n = shardRanges(meta).reduce((a, [start, end]) => a + end - start, 0);
  const buf = new Float32Array(3 * n);
  buf.set(params, 0);
  buf.set(expAvg, n);
  buf.set(expAvgSq, 2 * n);
  writeFileSync(join(dir, `rank_${meta.rank}.bin`), new Uint8Array(buf.buffer));
  writeFileSync(join(dir, `rank_${meta.rank}.json`), JSON.stringify(meta));
}

export interface FullState {
  params: Float32Array;
  expAvg: Float32Array;
  expAvgSq: Float32Array;
  adamStep: number;
  schedulerStep: number;
  layout: [string, number][];
  /** Storage dtype of the model that wrote it. */
  dtype: WeightDtype;
}

/** Reads every rank's shard of `dir` into full flat vectors. */
export function readAllShards(dir: string): FullState {
  if (!existsSync(dir)) throw new CheckpointError(`checkpoint directory ${dir} does not exist`);
  const metas = readdirSync(dir)
    .filter((f) => /^rank_\d+\.json$/.test(f))
    .map((f) => {
      try {
        return JSON.parse(readFileSync(join(dir, f), "utf8")) as ShardMeta;
      } catch (e) {
        throw new CheckpointError(`${join(dir, f)}: not valid JSON (${(e as Error).message})`);
      }
    })
    .sort((a, b) => a.rank - b.rank);
  if (metas.length === 0) throw new CheckpointError(`${dir} holds no rank_<r>.json shard files`);
  const W = metas[0]!.worldSize;
  if (metas.length !== W || metas.some((m, i) => m.rank !== i || m.worldSize !== W)) {
    throw new CheckpointError(
      `${dir}: expected shards of ranks 0..${W - 1}, found ranks [${metas.map((m) => m.rank).join(", ")}]`,
    );
  }
  const dtype = metas[0]!.dtype ?? "float32";
  const odd = metas.find(
    (m) => (m.dtype ?? "float32") !== dtype || !WEIGHT_DTYPES.includes(m.dtype ?? "float32"),
  );
  if (odd)
    throw new CheckpointError(
      `${join(dir, `rank_${odd.rank}.json`)}: dtype ${JSON.stringify(odd.dtype)} where rank 0 has ${JSON.stringify(dtype)} (one of ${WEIGHT_DTYPES.join(", ")} expected, the same on every rank)`,
    );
  const total = metas[0]!.total;
  const params = new Float32Array(total);
  const expAvg = new Float32Array(total);
  const expAvgSq = new Float32Array(total);
  for (const m of metas) {
    const file = join(dir, `rank_${m.rank}.bin`);
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch (e) {
      throw new CheckpointError(`${file}: cannot read (${(e as Error).message})`);
    }
    const ranges = shardRanges(m);
    const n = ranges.reduce((a, [start, end]) => a + end - start, 0);
    if (bytes.byteLength !== 12 * n)
      throw new CheckpointError(`${file}: holds ${bytes.byteLength} bytes, expected ${12 * n}`);
    const f = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    let local = 0;
    for (const [start, end] of ranges) {
      if (start < 0 || end > total || end < start)
        throw new CheckpointError(`${file}: range [${start}, ${end}) lies outside the ${total} parameters`);
      const k = end - start;
      params.set(f.subarray(local, local + k), start);
      expAvg.set(f.subarray(n + local, n + local + k), start);
      expAvgSq.set(f.subarray(2 * n + local, 2 * n + local + k), start);
      local += k;
    }
  }
  const m0 = metas[0]!;
  return {
    params,
    expAvg,
    expAvgSq,
    adamStep: m0.adamStep,
    schedulerStep: m0.schedulerStep,
    layout: m0.layout,
    dtype,
  };
}
