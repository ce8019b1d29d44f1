/**
 * The head's placement groups: bundles of resources reserved together on nodes by strategy (PACK,
 * SPREAD, STRICT_PACK, STRICT_SPREAD, see placement.ts), which actors are then placed into. A group
 * is PENDING until every bundle fits, CREATED once reserved, INFEASIBLE when it can never be placed
 * (or a node holding a bundle died), REMOVED when removed or its owner left.
 */
import { InfeasibleResourceError, PlacementGroupError } from "../errors.js";
import { randomId } from "../runtime/ids.js";
import type { PlacementStrategy } from "../runtime/protocol.js";
import type { ClientToHead, PlacementGroupStatus } from "./messages.js";
import type { NodeTable } from "./node-table.js";
import { placeBundles } from "./placement.js";
import {
  type Allocation,
  bundlePool,
  emptyPool,
  formatResources,
  type Pool,
  type Resources,
  release,
  validateRequest,
} from "./resources.js";

/** Told once when a group is created (its status) or can no longer be (the error). */
export type PgWaiter = (result: PlacementGroupStatus | Error) => void;

export interface HeadPg {
  pgId: string;
  name?: string;
  bundles: Resources[];
  strategy: PlacementStrategy;
  state: PlacementGroupStatus["state"];
  /** Each bundle's node, its reservation there, and the pool actors in the bundle draw from. */
  placed: Array<{ nodeId: string; alloc: Allocation; pool: Pool }> | null;
  waiters: PgWaiter[];
  ownerClientId: string;
  error?: string;
}

/** What the placement groups ask of the rest of the head. */
export interface PgHooks {
  /** Resources changed: place what waits. */
  schedule(): void;
  /** Kill the actors placed in this group (it is being removed). */
  killActorsIn(pgId: string): void;
}

const STRATEGIES: PlacementStrategy[] = ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"];

export class PlacementGroups {
  private pgs = new Map<string, HeadPg>();

  constructor(
    private nodes: NodeTable,
    private hooks: PgHooks,
  ) {}

  get(pgId: string): HeadPg | undefined {
    return this.pgs.get(pgId);
  }

  all(): HeadPg[] {
    return [...this.pgs.values()];
  }

  /** A new group (the same pgId again returns the existing one); INFEASIBLE at once if it can never be placed. */
  create(m: Extract<ClientToHead, { t: "createPg" }>): PlacementGroupStatus {
    const bundles = m.bundles as Resources[];
    if (!Array.isArray(bundles) || bundles.length === 0)
      throw new Error("a placement group needs at least one bundle");
    for (const b of bundles) validateRequest(b);
    const strategy = (m.strategy ?? "PACK") as PlacementStrategy;
    if (!STRATEGIES.includes(strategy)) {
      throw new Error(`unknown placement strategy '${strategy}'; one of ${STRATEGIES.join(", ")}`);
    }
    const existing = typeof m.pgId === "string" ? this.pgs.get(m.pgId) : undefined;
    if (existing) return pgInfo(existing);
    const pg: HeadPg = {
      pgId: typeof m.pgId === "string" ? m.pgId : `pg-${randomId(4)}`,
      name: m.name,
      bundles,
      strategy,
      state: "PENDING",
      placed: null,
      waiters: [],
      ownerClientId: m.clientId,
    };
    this.pgs.set(pg.pgId, pg);
    // infeasible if it cannot be placed on an empty cluster
    const empty = this.nodes.alive().map((n) => ({ nodeId: n.nodeId, pool: emptyPool(n.pool) }));
    if (!placeBundles(empty, bundles, strategy)) {
      pg.state = "INFEASIBLE";
      pg.error = `placement group ${pg.pgId} (${strategy}, bundles ${bundles.map((b) => `{${formatResources(b)}}`).join(", ")}) can never be placed on this cluster (${this.nodes.describe()})`;
      return pgInfo(pg);
    }
    this.hooks.schedule();
    return pgInfo(pg);
  }

  /**
   * The group's status once created; throws when it never will be. While it is pending, `waiter` is
   * told later and this returns null (a pending group needs a waiter).
   */
  wait(pgId: string, waiter: PgWaiter | undefined): PlacementGroupStatus | null {
    const pg = this.pgs.get(pgId);
    if (!pg) throw new PlacementGroupError(`no placement group ${pgId}`);
    if (pg.state === "CREATED") return pgInfo(pg);
    if (pg.state !== "PENDING") throw pgError(pg);
    if (!waiter) throw new Error("waitPg is a request: it needs a rid to be answered");
    pg.waiters.push(waiter);
    return null;
  }

  /** Reserves the bundles of each pending group that now fits, and tells its waiters. */
  placePending(): void {
    for (const pg of this.pgs.values()) {
      if (pg.state !== "PENDING") continue;
      const nodes = this.nodes.alive().map((n) => ({ nodeId: n.nodeId, pool: n.pool }));
      const placed = placeBundles(nodes, pg.bundles, pg.strategy);
      if (!placed) continue;
      pg.placed = placed.map((p) => ({ ...p, pool: bundlePool(p.alloc) }));
      pg.state = "CREATED";
      for (const w of pg.waiters.splice(0)) w(pgInfo(pg));
    }
  }

  /** Removes a group: its actors are killed, its reservations freed, its waiters told. */
  remove(pgId: string): void {
    const pg = this.pgs.get(pgId);
    if (!pg || pg.state === "REMOVED") return;
    this.hooks.killActorsIn(pgId);
    for (const p of pg.placed ?? []) {
      const node = this.nodes.get(p.nodeId);
      if (node) release(node.pool, p.alloc);
    }
    pg.state = "REMOVED";
    pg.error = "it was removed";
    for (const w of pg.waiters.splice(0)) w(pgError(pg));
    this.hooks.schedule();
  }

  /** Removes the groups the client `clientId` created (it left or died). */
  removeOwnedBy(clientId: string): void {
    for (const pg of this.pgs.values()) if (pg.ownerClientId === clientId) this.remove(pg.pgId);
  }

  /** The groups holding a bundle on this node can no longer be used. */
  nodeDied(nodeId: string): void {
    for (const pg of this.pgs.values()) {
      if (pg.placed?.some((p) => p.nodeId === nodeId)) {
        pg.state = "INFEASIBLE";
        pg.error = `node ${nodeId} holding some of its bundles died`;
      }
    }
  }
}

export function pgInfo(pg: HeadPg): PlacementGroupStatus {
  return {
    pgId: pg.pgId,
    name: pg.name,
    state: pg.state,
    strategy: pg.strategy,
    bundles: pg.bundles,
    bundleNodes: pg.placed?.map((p) => p.nodeId) ?? null,
    bundleGpus: pg.placed?.map((p) => p.alloc.gpus.map(([id]) => id)) ?? null,
    error: pg.error,
  };
}

function pgError(pg: HeadPg): Error {
  const message = pg.error ?? `placement group ${pg.pgId} is ${pg.state}`;
  return pg.state === "INFEASIBLE" ? new InfeasibleResourceError(message) : new PlacementGroupError(message);
}
