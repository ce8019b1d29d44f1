/** Types that turn a class into its remote handle, comlink-style, with no code generation. */
import type { ObjectRef } from "./runtime/object-ref.js";

/** Each argument may be passed as a value or as an ObjectRef to that value (resolved before the call). */
export type RemoteArgs<P extends readonly unknown[]> = { [I in keyof P]: P[I] | ObjectRef<P[I]> };

/** What every handle has of its own, whatever T is. */
interface HandleOwn {
  readonly actorId: string;
  readonly actorName: string | undefined;
  /** Resolves (to null) once the constructor has finished; rejects if it threw or the actor died. */
  ready(): ObjectRef<null>;
  toString(): string;
}

/**
 * Names a handle never sends as calls: its own members (the handle answers them itself), `constructor`
 * (the handle's class), and those that would make it look like a promise or confuse inspection (the
 * handle's Proxy answers `undefined` for them).
 */
type Unforwarded = keyof HandleOwn | "then" | "catch" | "finally" | "toJSON" | "constructor" | "inspect";

type MethodKeys<T> = { [K in keyof T]: T[K] extends (...args: never[]) => unknown ? K : never }[keyof T];

/** A handle to an actor of class T: every method returns an awaitable ObjectRef of its (awaited) result. */
export type ActorHandle<T> = {
  [K in Exclude<MethodKeys<T>, Unforwarded>]: T[K] extends (...args: infer P) => infer R
    ? (...args: RemoteArgs<P>) => ObjectRef<Awaited<R>>
    : never;
} & HandleOwn;
