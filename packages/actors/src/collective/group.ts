/**
 * The driver side of collective groups: rendezvous of the members and teardown.
 *
 * Rendezvous, in two rounds run in every member through `invoke`:
 *   1. `joinCollectiveGroup({group, rank, worldSize, ...})`: the member binds its receiving socket
 *      and answers with its addresses (TCP, plus IPC when allowed) and a host id;
 *   2. `connectCollectiveGroup(group, successorAddress)`: the member connects to its successor
 *      (IPC when both share a host and the transport allows it) and waits for its predecessor's
 *      hello, so the call returns only once the whole ring carries messages;
 *   3. and 4. where every member shares one host: `openSharedCollective`, then `useSharedCollective`
 *      (allGather and reduceScatter through shared memory; see shared-memory.ts).
 * Data never passes through the driver.
 */
import { MAX_FRAME_BYTES } from "@torl-ts/core";
import { CollectiveArgumentError, CollectiveError } from "./errors.js";
import { DEFAULT_GROUP, MEMBER_MODULE_URL, type MemberJoinSpec } from "./member.js";
import { type CollectiveTransport, cancelFormation, localHostId, type MemberAddress } from "./ring.js";

/** Anything that can run an exported function in a member process (an actor, a child process). */
export interface CollectiveMember {
  invoke(moduleUrl: string, exportName: string, args: unknown[]): PromiseLike<unknown>;
}

export interface CollectiveGroupOptions {
  /** Group name used by `collective.*` calls inside the members (default "default"). */
  name?: string;
  /** "auto" (default): IPC between members on the same host, TCP otherwise. */
  transport?: CollectiveTransport;
  /**
   * Address each member binds its TCP socket on and advertises. Default: the member's
   * `TORL_NODE_IP` environment variable, else 127.0.0.1.
   */
  host?: string;
  /** Largest message (bytes); slices this size let reduction overlap transfer. Default 1 MiB. */
  sliceBytes?: number;
  /** A member waiting longer than this for its predecessor fails the call. Default 30 min; 0 = never. */
  timeoutMs?: number;
  /**
   * allGather and reduceScatter through files in /dev/shm where every member shares one host and can
   * open the others' (shared-memory.ts), instead of the ring: two copies per byte. Default true (where
   * the members cannot, the ring: `collective.usesSharedMemory(group)` says which); false keeps the ring.
   * `true` with transport "tcp" is refused.
   */
  sharedMemory?: boolean;
}

const DEFAULT_SLICE_BYTES = 1 << 20;
const DEFAULT_TIMEOUT_MS = 30 * 60 * 1000;

/** A group as the driver sees it. */
export class CollectiveGroup {
  private destroyed = false;
  constructor(
    readonly name: string,
    readonly members: readonly CollectiveMember[],
  ) {}

  get worldSize(): number {
    return this.members.length;
  }

  /** Closes the group's sockets in every member; members that already died are skipped. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    if (driverGroups.get(this.name) === this) driverGroups.delete(this.name);
    await Promise.allSettled(
      this.members.map((m) =>
        Promise.resolve(m.invoke(MEMBER_MODULE_URL, "leaveCollectiveGroup", [this.name])),
      ),
    );
  }
}

const driverGroups = new Map<string, CollectiveGroup>();

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/**
 * Makes a collective group of `members` (rank = position in the array) through a generic invoker.
 * `createCollectiveGroup` is this with actor handles.
 */
export async function createCollectiveGroupOn(
  members: readonly CollectiveMember[],
  options: CollectiveGroupOptions = {},
): Promise<CollectiveGroup> {
  const name = options.name ?? DEFAULT_GROUP;
  if (members.length === 0) {
    throw new CollectiveArgumentError("a collective group needs at least one member", name);
  }
  if (driverGroups.has(name)) {
    throw new CollectiveArgumentError(
      `collective group "${name}" already exists in this driver; destroy it first or pick another name`,
      name,
    );
  }
  const transport = options.transport ?? "auto";
  if (options.sharedMemory !== undefined && typeof options.sharedMemory !== "boolean")
    throw new CollectiveArgumentError(
      `sharedMemory must be true or false, got ${JSON.stringify(options.sharedMemory)}`,
      name,
    );
  if (options.sharedMemory === true && transport === "tcp")
    throw new CollectiveArgumentError(
      'sharedMemory: true needs members that may share a host; transport "tcp" keeps every byte on sockets (leave sharedMemory out, or use transport "auto" or "ipc")',
      name,
    );
  if (!["auto", "tcp", "ipc"].includes(transport)) {
    throw new CollectiveArgumentError(`unknown transport "${transport}" (auto, tcp or ipc)`, name);
  }
  const sliceBytes = options.sliceBytes ?? DEFAULT_SLICE_BYTES;
  if (!Number.isInteger(sliceBytes) || sliceBytes < 8 || sliceBytes > MAX_FRAME_BYTES) {
    throw new CollectiveArgumentError(
      `sliceBytes must be an integer from 8 to ${MAX_FRAME_BYTES} (the largest frame a member accepts), got ${sliceBytes}`,
      name,
    );
  }
  const W = members.length;
  const group = new CollectiveGroup(name, members);
  driverGroups.set(name, group);
  const specs: MemberJoinSpec[] = members.map((_, rank) => ({
    group: name,
    rank,
    worldSize: W,
    host: options.host ?? "",
    transport,
    sliceBytes,
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  }));
  const joined = await Promise.allSettled(
    members.map((m, rank) =>
      Promise.resolve(m.invoke(MEMBER_MODULE_URL, "joinCollectiveGroup", [specs[rank]])),
    ),
  );
  const failed = joined.findIndex((j) => j.status === "rejected");
  if (failed >= 0) {
    await group.destroy();
    throw new CollectiveError(
      `rank ${failed} could not join collective group "${name}": ${describe((joined[failed] as PromiseRejectedResult).reason)}`,
      name,
      failed,
    );
  }
  const addresses = joined.map((j) => (j as PromiseFulfilledResult<MemberAddress>).value);
  let endpoints: (string | undefined)[];
  try {
    endpoints = addresses.map((_, rank) => {
      const next = addresses[(rank + 1) % W]!;
      const sameHost = next.hostId === addresses[rank]!.hostId;
      if (transport === "ipc" && !sameHost) {
        throw new CollectiveArgumentError(
          `transport "ipc" needs all members on one host; rank ${rank} (${addresses[rank]!.hostId}) and rank ${(rank + 1) % W} (${next.hostId}) differ`,
          name,
        );
      }
      return sameHost && next.ipc ? next.ipc : next.tcp;
    });
  } catch (err) {
    await group.destroy();
    throw err;
  }
  // A member that fails to connect (it died, say) leaves the others waiting in hello for a
  // predecessor that will never come: the first failure cancels their wait at once.
  const failures: { rank: number; reason: unknown }[] = [];
  await Promise.allSettled(
    members.map((m, rank) =>
      Promise.resolve(m.invoke(MEMBER_MODULE_URL, "connectCollectiveGroup", [name, endpoints[rank]])).catch(
        (reason: unknown) => {
          failures.push({ rank, reason });
          if (failures.length === 1) {
            const why = `rank ${rank} could not connect: ${describe(reason)}`;
            addresses.forEach((address, other) => {
              if (other === rank) return;
              const own = address.ipc && address.hostId === localHostId() ? address.ipc : address.tcp;
              if (own) cancelFormation(own, why).catch(() => undefined);
            });
          }
          throw reason;
        },
      ),
    ),
  );
  const first = failures[0];
  if (first) {
    await group.destroy();
    const { rank, reason } = first;
    throw new CollectiveError(
      `rank ${rank} could not connect collective group "${name}": ${describe(reason)}`,
      name,
      rank,
    );
  }
  if (options.sharedMemory !== false && transport !== "tcp") await shareMemory(group, addresses);
  return group;
}

/**
 * Steps 3 and 4: where every member is on one host and made its shared files, each opens the others';
 * if all of them could, every member gathers through them from then on, else none does. A member
 * that fails to switch (it died) leaves the group broken: it is destroyed and the error thrown.
 */
async function shareMemory(group: CollectiveGroup, addresses: MemberAddress[]): Promise<void> {
  const W = addresses.length;
  const regions = addresses.map((a) => a.shared);
  if (
    W < 2 ||
    regions.some((r) => r === undefined) ||
    addresses.some((a) => a.hostId !== addresses[0]!.hostId)
  )
    return;
  const opened = await Promise.allSettled(
    group.members.map((m) =>
      Promise.resolve(m.invoke(MEMBER_MODULE_URL, "openSharedCollective", [group.name, regions])),
    ),
  );
  if (!opened.every((o) => o.status === "fulfilled" && o.value === true)) return;
  const used = await Promise.allSettled(
    group.members.map((m) =>
      Promise.resolve(m.invoke(MEMBER_MODULE_URL, "useSharedCollective", [group.name])),
    ),
  );
  const failed = used.findIndex((u) => u.status === "rejected");
  if (failed >= 0) {
    await group.destroy();
    throw new CollectiveError(
      `rank ${failed} could not switch collective group "${group.name}" to shared memory: ${describe((used[failed] as PromiseRejectedResult).reason)}`,
      group.name,
      failed,
    );
  }
}

/** Destroys a group made by this driver, by object or by name. Returns false if unknown. */
export async function destroyCollectiveGroup(
  group: CollectiveGroup | string = DEFAULT_GROUP,
): Promise<boolean> {
  const g = typeof group === "string" ? driverGroups.get(group) : group;
  if (!g) return false;
  await g.destroy();
  return true;
}

/** The driver's group of that name, if it made one. */
export function getCollectiveGroup(name: string = DEFAULT_GROUP): CollectiveGroup | undefined {
  return driverGroups.get(name);
}
