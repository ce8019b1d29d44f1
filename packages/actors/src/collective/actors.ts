/** Collective groups over actor handles (the runtime's `invokeInActor` carries the rendezvous). */
import { CollectiveArgumentError } from "./errors.js";
import {
  type CollectiveGroup,
  type CollectiveGroupOptions,
  type CollectiveMember,
  createCollectiveGroupOn,
} from "./group.js";

type InvokeInActor = (
  handle: unknown,
  moduleUrl: string,
  exportName: string,
  args: unknown[],
) => PromiseLike<unknown>;

async function runtimeInvoke(): Promise<InvokeInActor> {
  // Imported lazily: the runtime's entry re-exports this module.
  const runtime = (await import("../index.js")) as Record<string, unknown>;
  const invoke = runtime.invokeInActor;
  if (typeof invoke !== "function") {
    throw new CollectiveArgumentError(
      "the actor runtime does not export invokeInActor; collective groups over actors need it",
      "",
    );
  }
  return invoke as InvokeInActor;
}

/**
 * Makes a collective group of actors: rank i is `handles[i]`. Each actor joins through
 * `invokeInActor`, binds its own socket and connects to its ring successor; the group is usable
 * from actor code (`collective.allReduce(arr, "sum", name)`) once this resolves.
 */
export async function createCollectiveGroup(
  handles: readonly unknown[],
  options: CollectiveGroupOptions = {},
): Promise<CollectiveGroup> {
  const invoke = await runtimeInvoke();
  const members: CollectiveMember[] = handles.map((h) => ({
    invoke: (moduleUrl, exportName, args) => invoke(h, moduleUrl, exportName, args),
  }));
  return createCollectiveGroupOn(members, options);
}
