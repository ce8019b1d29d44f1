/**
 * The typed handle of an actor: `ActorHandle<T>` maps every method of class T to one that returns an
 * ObjectRef of its awaited result (comlink's `Remote<T>` idea). The runtime that serves these calls
 * is @torl-ts/core's, so the types live there; this package re-exports them with its programming model.
 */
export type { ActorHandle, RemoteArgs } from "@torl-ts/core";
