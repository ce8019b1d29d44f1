/** What the head reports of the cluster: the resource totals and the full status (`torl status`). */
import { clusterKeys, refusedConnections } from "../wire/security.js";
import type { ActorDirectory } from "./actor-directory.js";
import type { ClientTable } from "./clients.js";
import type { ClusterStatus, HeadReplies } from "./messages.js";
import type { NodeTable } from "./node-table.js";
import { type PlacementGroups, pgInfo } from "./placement-groups.js";
import type { Resources } from "./resources.js";

/** The resources of the live nodes, summed: all they have, and what is free now. */
export function resourceTotals(nodes: NodeTable): HeadReplies["clusterResources"] {
  const total: Resources = {};
  const available: Resources = {};
  const alive = nodes.alive();
  for (const n of alive) {
    for (const [k, v] of Object.entries(n.pool.total)) total[k] = (total[k] ?? 0) + v;
    for (const [k, v] of Object.entries(n.pool.avail)) available[k] = (available[k] ?? 0) + v;
  }
  return { total, available, nodes: alive.length };
}

export interface StatusSources {
  /** Where the head listens (host:port), and the host it was told to listen on. */
  address: string;
  listen: string;
  startedAt: number;
  bytesReceived: number;
  nodes: NodeTable;
  actors: ActorDirectory;
  pgs: PlacementGroups;
  clients: ClientTable;
}

export function clusterStatus(s: StatusSources, now = Date.now()): ClusterStatus {
  return {
    address: s.address,
    uptimeS: Math.round((now - s.startedAt) / 1000),
    nodes: s.nodes.all().map((n) => ({
      nodeId: n.nodeId,
      ip: n.ip,
      alive: n.alive,
      pid: n.pid,
      total: n.pool.total,
      available: n.pool.avail,
      gpus: Object.fromEntries(n.pool.gpuFree),
    })),
    actors: s.actors.entries().map(([id, a]) => ({
      actorId: id,
      name: a.spec.name,
      className: a.spec.className ?? "(task executor)",
      state: a.state,
      nodeId: a.nodeId,
      pid: a.pid,
      resources: a.spec.resources,
      restarts: a.incarnation,
      nodeAffinity: a.spec.nodeAffinity,
      cause: a.cause?.message,
    })),
    placementGroups: s.pgs.all().map(pgInfo),
    clients: s.clients.size,
    bytesReceived: s.bytesReceived,
    security: {
      mode: clusterKeys() ? "curve" : "none",
      listen: s.listen,
      refusedConnections: refusedConnections(),
    },
  };
}
