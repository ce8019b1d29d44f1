/**
 * Resource pools (a node, or a placement-group bundle) and allocation, including GPU ids with
 * fractional shares. Pure functions: the head's scheduler is built on these.
 */
import { ResourceRequestError } from "../errors.js";
import { shown } from "../options.js";

export type Resources = Record<string, number>;

const EPS = 1e-9;

export interface Pool {
  total: Resources;
  avail: Resources;
  /** Free share (0..1) of each GPU id in this pool. */
  gpuFree: Map<number, number>;
  /** For bundle pools: the GPU shares the bundle holds when empty. */
  bundleGpuShares?: Map<number, number>;
}

export interface Allocation {
  res: Resources;
  /** [gpu id, share] pairs. */
  gpus: Array<[number, number]>;
}

export function makePool(total: Resources, gpuIds: number[]): Pool {
  const gpuFree = new Map<number, number>();
  for (const id of gpuIds) gpuFree.set(id, 1);
  return { total: { ...total, GPU: gpuIds.length }, avail: { ...total, GPU: gpuIds.length }, gpuFree };
}

/**
 * The one check of a resource request's shape, for actors, tasks and placement-group bundles alike:
 * each amount a finite number >= 0, whole GPUs when more than one. Throws ResourceRequestError
 * naming `where` (e.g. "actor Counter") and the option (`label` turns a resource key into its name).
 */
export function validateRequest(
  req: Resources,
  where = "resource request",
  label = (key: string) => key,
): void {
  if (req === null || typeof req !== "object" || Array.isArray(req))
    throw new ResourceRequestError(`${where}: resources must be an object of amounts, got ${shown(req)}`);
  for (const [k, v] of Object.entries(req)) {
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
      throw new ResourceRequestError(`${where}: ${label(k)} must be a finite number >= 0, got ${shown(v)}`);
    }
  }
  const g = req.GPU ?? 0;
  if (g > 1 && !Number.isInteger(g)) {
    throw new ResourceRequestError(
      `${where}: ${label("GPU")} above 1 must be a whole number (fractions share one GPU), got ${g}`,
    );
  }
}

function pickGpus(gpuFree: Map<number, number>, n: number): Array<[number, number]> | null {
  if (n <= EPS) return [];
  if (n >= 1) {
    const whole = [...gpuFree.entries()].filter(([, f]) => f >= 1 - EPS).map(([id]) => id);
    if (whole.length < n) return null;
    return whole
      .sort((a, b) => a - b)
      .slice(0, n)
      .map((id) => [id, 1] as [number, number]);
  }
  // fractional: best fit (the most used GPU that still has room), lowest id on ties
  let best: [number, number] | null = null;
  for (const [id, f] of gpuFree) {
    if (f + EPS >= n && (!best || f < best[1] - EPS || (Math.abs(f - best[1]) < EPS && id < best[0])))
      best = [id, f];
  }
  return best ? [[best[0], n]] : null;
}

export function tryAllocate(pool: Pool, req: Resources): Allocation | null {
  for (const [k, v] of Object.entries(req)) {
    if (k === "GPU" || v <= EPS) continue;
    if ((pool.avail[k] ?? 0) + EPS < v) return null;
  }
  const gpus = pickGpus(pool.gpuFree, req.GPU ?? 0);
  if (!gpus) return null;
  for (const [k, v] of Object.entries(req)) if (k !== "GPU") pool.avail[k] = (pool.avail[k] ?? 0) - v;
  for (const [id, share] of gpus) {
    pool.gpuFree.set(id, pool.gpuFree.get(id)! - share);
    pool.avail.GPU = (pool.avail.GPU ?? 0) - share;
  }
  return { res: { ...req }, gpus };
}

export function release(pool: Pool, a: Allocation): void {
  for (const [k, v] of Object.entries(a.res)) if (k !== "GPU") pool.avail[k] = (pool.avail[k] ?? 0) + v;
  for (const [id, share] of a.gpus) {
    pool.gpuFree.set(id, Math.min(1, (pool.gpuFree.get(id) ?? 0) + share));
    pool.avail.GPU = (pool.avail.GPU ?? 0) + share;
  }
}

/** A copy of the pool with nothing allocated (a bundle pool holds the GPU shares it reserved). */
export function emptyPool(pool: Pool): Pool {
  const empty: Pool = {
    total: { ...pool.total },
    avail: { ...pool.total },
    gpuFree: pool.bundleGpuShares
      ? new Map(pool.bundleGpuShares)
      : new Map([...pool.gpuFree.keys()].map((id) => [id, 1])),
  };
  if (pool.bundleGpuShares) empty.bundleGpuShares = new Map(pool.bundleGpuShares);
  return empty;
}

/** Could the request fit this pool if it were empty? */
export function couldEverFit(pool: Pool, req: Resources): boolean {
  return tryAllocate(emptyPool(pool), req) !== null;
}

/** A pool for a bundle, made from its allocation on a node. */
export function bundlePool(a: Allocation): Pool {
  const gpuFree = new Map<number, number>();
  for (const [id, share] of a.gpus) gpuFree.set(id, (gpuFree.get(id) ?? 0) + share);
  const total = { ...a.res };
  const pool: Pool = { total, avail: { ...a.res }, gpuFree };
  pool.bundleGpuShares = new Map(gpuFree);
  return pool;
}

export function formatResources(r: Resources): string {
  return Object.entries(r)
    .filter(([, v]) => v !== 0)
    .map(([k, v]) => `${k}: ${Math.round(v * 1000) / 1000}`)
    .join(", ");
}
