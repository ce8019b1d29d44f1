/**
 * The head's scheduler: places queued actors on nodes, in arrival order, where resources allow. An
 * actor in a placement group draws from its bundle's pool (a given bundle, or the first that fits);
 * one with node affinity goes to that node (a soft affinity falls back to any node); any other goes
 * to the live node with the most free CPU. What fits nowhere now waits for resources to be freed;
 * what can never fit is refused at creation (see `infeasible`).
 */
import type { ActorSpec } from "../runtime/protocol.js";
import type { ActorDirectory, HeadActor } from "./actor-directory.js";
import type { HeadNode, NodeTable } from "./node-table.js";
import type { Outbox } from "./outbox.js";
import type { PlacementGroups } from "./placement-groups.js";
import { type Allocation, couldEverFit, formatResources, type Pool, tryAllocate } from "./resources.js";

export class Scheduler {
  private pending: string[] = [];

  constructor(
    private nodes: NodeTable,
    private pgs: PlacementGroups,
    private actors: ActorDirectory,
    private out: Outbox,
  ) {}

  /** Queues an actor for placement (at creation, or to restart it). */
  enqueue(actorId: string): void {
    this.pending.push(actorId);
  }

  /** The actors waiting for resources, in arrival order. */
  waiting(): readonly string[] {
    return this.pending;
  }

  /** Reserves pending placement groups that now fit, then places pending actors where resources allow. */
  schedule(): void {
    this.pgs.placePending();
    const still: string[] = [];
    for (const id of this.pending) {
      const a = this.actors.get(id);
      if (!a || a.state === "DEAD") continue;
      if (a.nodeId) continue;
      if (!this.place(id, a)) still.push(id);
    }
    this.pending = still;
  }

  /** Why a spec can never be placed, or null. */
  infeasible(spec: ActorSpec): string | null {
    const req = spec.resources;
    if (spec.placementGroup) {
      const pg = this.pgs.get(spec.placementGroup);
      if (!pg) return `placement group ${spec.placementGroup} does not exist`;
      if (pg.state === "REMOVED" || pg.state === "INFEASIBLE")
        return `placement group ${pg.pgId} is ${pg.state.toLowerCase()}`;
      const idx = spec.bundleIndex ?? -1;
      if (idx >= pg.bundles.length)
        return `bundle index ${idx} is out of range: the group has ${pg.bundles.length} bundles`;
      const bundles = idx >= 0 ? [pg.bundles[idx]!] : pg.bundles;
      const fits = bundles.some((b) => {
        const gpuShares = new Map<number, number>();
        if ((b.GPU ?? 0) > 0) {
          const g = b.GPU!;
          if (g >= 1) for (let i = 0; i < g; i++) gpuShares.set(i, 1);
          else gpuShares.set(0, g);
        }
        return couldEverFit({ total: b, avail: b, gpuFree: gpuShares, bundleGpuShares: gpuShares }, req);
      });
      if (!fits) {
        return `${describeActor(spec)} requests {${formatResources(req)}} but bundle${idx >= 0 ? ` ${idx}` : "s"} of placement group ${pg.pgId} hold${idx >= 0 ? "s" : ""} only ${bundles.map((b) => `{${formatResources(b)}}`).join(" / ")}`;
      }
      return null;
    }
    const affinity = this.affinityProblem(spec);
    if (affinity && !spec.nodeAffinity!.soft) return affinity;
    if (spec.nodeAffinity && !affinity) return null;
    if (this.nodes.alive().some((n) => couldEverFit(n.pool, req))) return null;
    return `${describeActor(spec)} requests {${formatResources(req)}}, which no node in the cluster can ever provide (${this.nodes.describe()})`;
  }

  /** Why the node an actor has affinity to cannot take it (dead, unknown, too small), or null. */
  private affinityProblem(spec: ActorSpec): string | null {
    const na = spec.nodeAffinity;
    if (!na) return null;
    const n = this.nodes.get(na.nodeId);
    const kind = na.soft ? "soft" : "hard";
    if (!n)
      return `${describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which is not in the cluster`;
    if (!n.alive) return `${describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which is dead`;
    if (!couldEverFit(n.pool, spec.resources)) {
      return `${describeActor(spec)} has ${kind} affinity to node ${na.nodeId}, which can never provide {${formatResources(spec.resources)}} (it has {${formatResources(n.pool.total)}})`;
    }
    return null;
  }

  /** Places one actor and tells its node to start the worker; false when nothing fits now. */
  private place(id: string, a: HeadActor): boolean {
    const req = a.spec.resources;
    let chosen: { node: HeadNode; pool: Pool; alloc: Allocation; bundle?: number } | null = null;
    if (a.spec.placementGroup) {
      const pg = this.pgs.get(a.spec.placementGroup);
      if (!pg || pg.state === "REMOVED" || pg.state === "INFEASIBLE") {
        this.actors.setDead(id, a, {
          kind: "infeasible",
          message: `placement group ${a.spec.placementGroup} is gone`,
        });
        return true;
      }
      if (pg.state !== "CREATED" || !pg.placed) return false;
      const indices = (a.spec.bundleIndex ?? -1) >= 0 ? [a.spec.bundleIndex!] : pg.placed.map((_, i) => i);
      for (const i of indices) {
        const b = pg.placed[i]!;
        const node = this.nodes.get(b.nodeId);
        if (!node?.alive) continue;
        const alloc = tryAllocate(b.pool, req);
        if (alloc) {
          chosen = { node, pool: b.pool, alloc, bundle: i };
          break;
        }
      }
    } else {
      let nodes = this.nodes.alive();
      const na = a.spec.nodeAffinity;
      if (na) {
        // the node may have died since creation (a restart): hard affinity cannot go elsewhere
        const problem = this.affinityProblem(a.spec);
        if (!problem) nodes = [this.nodes.get(na.nodeId)!];
        else if (!na.soft) {
          this.actors.setDead(id, a, { kind: "infeasible", message: problem, nodeId: na.nodeId });
          return true;
        }
      }
      // prefer the node with the most free CPU (spread load), then registration order
      nodes.sort((x, y) => (y.pool.avail.CPU ?? 0) - (x.pool.avail.CPU ?? 0));
      for (const node of nodes) {
        const alloc = tryAllocate(node.pool, req);
        if (alloc) {
          chosen = { node, pool: node.pool, alloc };
          break;
        }
      }
    }
    if (!chosen) return false;
    this.actors.placed(a, chosen.node.nodeId, chosen.pool, chosen.alloc);
    this.out.send(chosen.node.peer, {
      t: "startWorker",
      spec: a.spec,
      incarnation: a.incarnation,
      gpuIds: chosen.alloc.gpus.map(([gid]) => gid),
      resources: chosen.alloc.res,
      bundleIndex: chosen.bundle,
    });
    return true;
  }
}

function describeActor(spec: ActorSpec): string {
  return `${spec.className ?? "task executor"}${spec.name ? ` '${spec.name}'` : ""} (${spec.actorId})`;
}
