/**
 * Shard boundaries used by reduceScatter and allGather.
 *
 * An array of `length` elements split over `worldSize` ranks gives rank `i` the half-open range
 * `[start, end)` where the first `length % worldSize` ranks hold one element more than the others:
 *
 *   base = floor(length / worldSize), extra = length % worldSize
 *   size(i)  = base + (i < extra ? 1 : 0)
 *   start(i) = i * base + min(i, extra)
 *
 * So 10 elements over 4 ranks give sizes [3, 3, 2, 2] and starts [0, 3, 6, 8]. Ranks may hold
 * zero elements when `length < worldSize`.
 */
export interface ShardRange {
  /** First element of the shard (inclusive). */
  start: number;
  /** End of the shard (exclusive). */
  end: number;
}

function checkArgs(length: number, worldSize: number): void {
  if (!Number.isSafeInteger(length) || length < 0) {
    throw new RangeError(`shard length must be a non-negative integer, got ${length}`);
  }
  if (!Number.isSafeInteger(worldSize) || worldSize < 1) {
    throw new RangeError(`worldSize must be a positive integer, got ${worldSize}`);
  }
}

/** The `[start, end)` range of `rank`'s shard of an array of `length` elements. */
export function shardRange(length: number, worldSize: number, rank: number): ShardRange {
  checkArgs(length, worldSize);
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) {
    throw new RangeError(`rank must be in [0, ${worldSize}), got ${rank}`);
  }
  const base = Math.floor(length / worldSize);
  const extra = length % worldSize;
  const start = rank * base + Math.min(rank, extra);
  return { start, end: start + base + (rank < extra ? 1 : 0) };
}

/**
 * All shard boundaries at once: `worldSize + 1` offsets, rank `i` holds `[bounds[i], bounds[i + 1])`.
 */
export function shardBounds(length: number, worldSize: number): number[] {
  checkArgs(length, worldSize);
  const base = Math.floor(length / worldSize);
  const extra = length % worldSize;
  const bounds = new Array<number>(worldSize + 1);
  for (let i = 0; i <= worldSize; i++) bounds[i] = i * base + Math.min(i, extra);
  return bounds;
}
