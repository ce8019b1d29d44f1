/** Collective groups over actor handles (the runtime's `invokeInActor` carries the rendezvous). */
import { invokeInActor } from "@torl-ts/core";
import type { ActorHandle } from "../handle-types.js";
import {
  type CollectiveGroup,
  type CollectiveGroupOptions,
  type CollectiveMember,
  createCollectiveGroupOn,
} from "./group.js";

/**
 * Makes a collective group of actors: rank i is `handles[i]`. Each actor joins through
 * `invokeInActor`, binds its own socket and connects to its ring successor; the group is usable
 * from actor code (`collective.allReduce(arr, "sum", name)`) once this resolves.
 */
export async function createCollectiveGroup(
  handles: readonly ActorHandle<unknown>[],
  options: CollectiveGroupOptions = {},
): Promise<CollectiveGroup> {
  const members: CollectiveMember[] = handles.map((h) => ({
    invoke: (moduleUrl, exportName, args) => invokeInActor(h, moduleUrl, exportName, args),
  }));
  return createCollectiveGroupOn(members, options);
}
