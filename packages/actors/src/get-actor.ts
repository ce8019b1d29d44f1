import { getActor as coreGetActor } from "@torl-ts/core";
import type { ActorHandle } from "./handle-types.js";

/** Looks up a live named actor (rejects with ActorNotFoundError if there is none). */
export function getActor<T = unknown>(name: string): Promise<ActorHandle<T>> {
  return coreGetActor<T>(name);
}
