/**
 * The member side of collective groups: what runs inside each actor process.
 *
 * `createCollectiveGroup` (driver) calls `joinCollectiveGroup` then `connectCollectiveGroup` in
 * every member through `invokeInActor`; after that, actor code calls `collective.allReduce(...)`
 * and friends with the group's name.
 */

import { getRuntimeContext, isInitialized, traceSpan } from "@torl-ts/core";
import type { CollectiveArray, ReduceOp } from "./dtype.js";
import { CollectiveArgumentError, CollectiveGroupNotFoundError } from "./errors.js";
import type { PublishedArrays } from "./published.js";
import { type CollectiveTransport, type MemberAddress, RingMember } from "./ring.js";
import { type ShardRange, shardRange } from "./shard.js";
import type { SharedRegions } from "./shared-memory.js";

/** URL of this module, for `invokeInActor(handle, MEMBER_MODULE_URL, "joinCollectiveGroup", ...)`. */
export const MEMBER_MODULE_URL: string = import.meta.url;

export const DEFAULT_GROUP = "default";

/** Per-process registry, kept on globalThis so two copies of this module still share it. */
const REGISTRY_KEY = Symbol.for("torl-ts.collective.groups");
type Registry = Map<string, RingMember>;
const registry: Registry =
  ((globalThis as Record<symbol, unknown>)[REGISTRY_KEY] as Registry | undefined) ??
  new Map<string, RingMember>();
(globalThis as Record<symbol, unknown>)[REGISTRY_KEY] = registry;

/** Settings a member receives from the group creator. */
export interface MemberJoinSpec {
  group: string;
  rank: number;
  worldSize: number;
  /** Address to bind TCP on (the one peers reach this process at); "" = the node's address. */
  host: string;
  transport: CollectiveTransport;
  sliceBytes: number;
  timeoutMs: number;
}

/** The node's address in an actor (from the runtime), else TORL_NODE_IP, else 127.0.0.1. */
function defaultHost(): string {
  if (isInitialized()) {
    const m = /^tcp:\/\/([^:/]+):/.exec(getRuntimeContext().address?.tcp ?? "");
    if (m && m[1] !== "0.0.0.0" && m[1] !== "*") return m[1]!;
  }
  return process.env.TORL_NODE_IP || "127.0.0.1";
}

/** Step 1 of the rendezvous: open this member's receiving socket and report its addresses. */
export async function joinCollectiveGroup(spec: MemberJoinSpec): Promise<MemberAddress> {
  const old = registry.get(spec.group);
  if (old && !old.isClosed) {
    throw new CollectiveArgumentError(
      `this process (pid ${process.pid}) is already rank ${old.rank} of group "${spec.group}"; destroy it first`,
      spec.group,
      old.rank,
    );
  }
  const member = new RingMember(spec.group, spec.rank, spec.worldSize, {
    sliceBytes: spec.sliceBytes,
    timeoutMs: spec.timeoutMs,
  });
  registry.set(spec.group, member);
  try {
    return await member.bind(spec.host || defaultHost(), spec.transport);
  } catch (err) {
    member.close();
    registry.delete(spec.group);
    throw err;
  }
}

/** Step 2: connect to the successor's address and wait for the predecessor's hello. */
export async function connectCollectiveGroup(
  group: string,
  nextEndpoint: string | undefined,
): Promise<number> {
  const member = lookup(group);
  try {
    await member.connect(nextEndpoint);
  } catch (err) {
    member.close();
    registry.delete(group);
    throw err;
  }
  return member.rank;
}

/** Step 3, where every member made shared files on one host: opens the peers' files; whether all opened. */
export function openSharedCollective(group: string, regions: SharedRegions[]): boolean {
  return lookup(group).openShared(regions);
}

/** Step 4, once every member opened its peers' files: allGather and reduceScatter go through them from now on. */
export function useSharedCollective(group: string): void {
  lookup(group).useShared();
}

/** Closes this process's sockets of `group`; returns false when it was not a member. */
export function leaveCollectiveGroup(group: string): boolean {
  const member = registry.get(group);
  if (!member) return false;
  member.close();
  registry.delete(group);
  return true;
}

/** An operation of this rank as a span of the cluster timeline (`torl timeline`), with its bytes. */
function traced<T>(
  op: string,
  group: string,
  arr: CollectiveArray | undefined,
  f: () => Promise<T>,
): Promise<T> {
  return traceSpan(op, f, {
    cat: "collective",
    args: { group, ...(ArrayBuffer.isView(arr) ? { bytes: arr.byteLength, length: arr.length } : {}) },
  });
}

function lookup(group: string): RingMember {
  const member = registry.get(group);
  if (!member || member.isClosed) {
    const known = [...registry.keys()];
    throw new CollectiveGroupNotFoundError(
      `this process (pid ${process.pid}) is not a member of collective group "${group}"` +
        (known.length ? ` (its groups: ${known.join(", ")})` : " (it belongs to no group)") +
        "; create it from the driver with createCollectiveGroup(handles, { name })",
      group,
    );
  }
  return member;
}

/** Options of collective.allGather. */
export interface AllGatherOptions {
  /**
   * The caller promises to leave its input as it is until this rank's next allReduce, allGather,
   * reduceScatter or barrier of the group has returned: the input is then sent without a copy.
   */
  inputUnchanged?: boolean;
}

/**
 * Collective operations, called from inside member processes. Every rank of the group must make
 * the same calls in the same order, with arrays of the same type (and length, except allGather).
 */
export const collective = {
  // The calls are async so that every failure (unknown group, bad argument) is a rejection.
  /** Element-wise reduction across ranks, in place; resolves to `arr` holding the result. */
  async allReduce<T extends CollectiveArray>(
    arr: T,
    op: ReduceOp = "sum",
    group: string = DEFAULT_GROUP,
  ): Promise<T> {
    return traced("allReduce", group, arr, () => lookup(group).allReduce(arr, op));
  },
  /** Overwrites `arr` on every rank with `srcRank`'s `arr` (in place). */
  async broadcast<T extends CollectiveArray>(arr: T, srcRank = 0, group: string = DEFAULT_GROUP): Promise<T> {
    return traced("broadcast", group, arr, () => lookup(group).broadcast(arr, srcRank));
  },
  /**
   * Concatenation of every rank's `arr` in rank order (lengths may differ). With `out`, writes
   * into it; rank i's `arr` must then be `shardRange(out.length, worldSize, i)` long, and may be that
   * range of `out` itself (an in-place gather: nothing copied); other overlaps are refused.
   * `options.inputUnchanged`: the caller leaves `arr` as it is until this rank's next allReduce,
   * allGather, reduceScatter or barrier of the group has returned, so its bytes are sent from `arr`
   * itself; otherwise they are sent from a copy (a pass over `arr`, and fresh memory above 64 MiB).
   */
  async allGather<T extends CollectiveArray>(
    arr: T,
    group: string = DEFAULT_GROUP,
    out?: T,
    options: AllGatherOptions = {},
  ): Promise<T> {
    if (options.inputUnchanged !== undefined && typeof options.inputUnchanged !== "boolean")
      throw new TypeError(
        `allGather: options.inputUnchanged must be a boolean, got ${String(options.inputUnchanged)}`,
      );
    return traced("allGather", group, arr, () =>
      lookup(group).allGather(arr, out, options.inputUnchanged === true),
    );
  },
  /**
   * Element-wise reduction, of which this rank receives only its shard:
   * elements `shardRange(arr.length, worldSize, rank)`, in `out` when given (of the shard's length).
   * `arr` is left unchanged, unless `out` is `arr`'s own shard itself (in place: the result replaces
   * those elements and needs no memory of its own); an `out` that overlaps `arr` anywhere else is
   * refused with CollectiveArgumentError.
   */
  async reduceScatter<T extends CollectiveArray>(
    arr: T,
    op: ReduceOp = "sum",
    group: string = DEFAULT_GROUP,
    out?: T,
  ): Promise<T> {
    return traced("reduceScatter", group, arr, () => lookup(group).reduceScatter(arr, op, out));
  },
  /**
   * Writes this rank's `arr` once into shared memory, as every rank of the group does with its own, and
   * resolves to the published arrays: from then on any rank reads any rank's array
   * (`read(rank, start, into)`) at any time, without a collective call, until it closes them. For data
   * that never changes (a frozen model's shards): an allGather writes its input to shared memory again on
   * every call. Needs a group that uses shared memory (`usesSharedMemory`), else rejects with
   * CollectiveArgumentError. Where some rank cannot write its array (no space in /dev/shm) or open the
   * others', every rank rejects alike with a CollectiveError naming it, and the group stays usable.
   * The memory is /dev/shm's (shared memory, not the process's own) until every rank closed its arrays
   * or exited.
   */
  async publish<T extends CollectiveArray>(
    arr: T,
    group: string = DEFAULT_GROUP,
  ): Promise<PublishedArrays<T>> {
    return traced("publish", group, arr, () => lookup(group).publish(arr));
  },
  /** Resolves when every rank has reached the barrier. */
  async barrier(group: string = DEFAULT_GROUP): Promise<void> {
    return traced("barrier", group, undefined, () => lookup(group).barrier());
  },
  getRank(group: string = DEFAULT_GROUP): number {
    return lookup(group).rank;
  },
  getWorldSize(group: string = DEFAULT_GROUP): number {
    return lookup(group).worldSize;
  },
  /**
   * Whether this group's allGather and reduceScatter go through shared memory (every member on one
   * host, each able to open the others' files; see createCollectiveGroup's `sharedMemory`) rather than
   * the ring.
   */
  usesSharedMemory(group: string = DEFAULT_GROUP): boolean {
    return lookup(group).usesSharedMemory;
  },
  /** This rank's `[start, end)` of an array of `length` elements, as reduceScatter splits it. */
  shardRange(length: number, group: string = DEFAULT_GROUP): ShardRange {
    const m = lookup(group);
    return shardRange(length, m.worldSize, m.rank);
  },
  /** Where this member listens and sends (for logs and debugging). */
  describe(group: string = DEFAULT_GROUP): {
    rank: number;
    worldSize: number;
    address: MemberAddress;
    next: string;
  } {
    const m = lookup(group);
    return { rank: m.rank, worldSize: m.worldSize, address: m.address, next: m.nextEndpoint };
  },
  isInitialized(group: string = DEFAULT_GROUP): boolean {
    const m = registry.get(group);
    return m !== undefined && !m.isClosed;
  },
  /** Leaves the group in this process only (the driver's destroyCollectiveGroup leaves it everywhere). */
  destroyGroup(group: string = DEFAULT_GROUP): boolean {
    return leaveCollectiveGroup(group);
  },
};
