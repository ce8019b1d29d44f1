/** Placing placement-group bundles on nodes by strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD). */
import type { PlacementStrategy } from "../runtime/protocol.js";
import { type Allocation, type Pool, type Resources, release, tryAllocate } from "./resources.js";

export interface NodePool {
  nodeId: string;
  pool: Pool;
}

export interface Placed {
  nodeId: string;
  alloc: Allocation;
}

/** Allocates every bundle or none (rolls back on failure). */
export function placeBundles(
  nodes: NodePool[],
  bundles: Resources[],
  strategy: PlacementStrategy,
): Placed[] | null {
  const placed: Array<Placed & { pool: Pool }> = [];
  const rollback = () => {
    for (const p of placed) release(p.pool, p.alloc);
    return null;
  };
  const tryOn = (n: NodePool, b: Resources): boolean => {
    const a = tryAllocate(n.pool, b);
    if (!a) return false;
    placed.push({ nodeId: n.nodeId, alloc: a, pool: n.pool });
    return true;
  };
  if (strategy === "STRICT_PACK" || strategy === "PACK") {
    for (const n of nodes) {
      let ok = true;
      for (const b of bundles) {
        if (!tryOn(n, b)) {
          ok = false;
          break;
        }
      }
      if (ok) return placed;
      rollback();
      placed.length = 0;
    }
    if (strategy === "STRICT_PACK") return null;
    // PACK fallback: fill nodes in order, each bundle on the node already holding most of the group.
    for (const b of bundles) {
      const counts = new Map<string, number>();
      for (const p of placed) counts.set(p.nodeId, (counts.get(p.nodeId) ?? 0) + 1);
      const order = [...nodes].sort((x, y) => (counts.get(y.nodeId) ?? 0) - (counts.get(x.nodeId) ?? 0));
      if (!order.some((n) => tryOn(n, b))) return rollback();
    }
    return placed;
  }
  // SPREAD / STRICT_SPREAD: each bundle on the node holding fewest bundles of this group.
  for (const b of bundles) {
    const counts = new Map<string, number>();
    for (const p of placed) counts.set(p.nodeId, (counts.get(p.nodeId) ?? 0) + 1);
    let order = [...nodes].sort((x, y) => (counts.get(x.nodeId) ?? 0) - (counts.get(y.nodeId) ?? 0));
    if (strategy === "STRICT_SPREAD") order = order.filter((n) => !counts.has(n.nodeId));
    if (!order.some((n) => tryOn(n, b))) return rollback();
  }
  return placed;
}
