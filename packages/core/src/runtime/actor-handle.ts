/**
 * Actor handles: a Proxy whose every property is a remote method. `handle.m(...args)` sends a call
 * and returns an ObjectRef at once. Handles can be passed to other actors and tasks.
 */
import type { ActorHandle } from "../handle-types.js";
import { registerClass } from "../wire/codec.js";
import type { ActorRecord } from "./actor-calls.js";
import { currentRuntime, maybeRuntime } from "./current.js";
import type { ObjectRef } from "./object-ref.js";
import type { Runtime } from "./runtime.js";

export class ActorHandleBase {
  /** @internal */
  readonly _methods = new Map<string, (...args: unknown[]) => ObjectRef>();
  constructor(
    /** @internal */ readonly _rt: Runtime,
    /** @internal */ readonly _rec: ActorRecord,
  ) {}

  get actorId(): string {
    return this._rec.actorId;
  }

  get actorName(): string | undefined {
    return this._rec.name;
  }

  /** Resolves once the actor's constructor has finished (rejects if it failed or the actor died). */
  ready(): ObjectRef<null> {
    return this._rt.actors.call(this._rec, "__ready__", []) as ObjectRef<null>;
  }

  toString(): string {
    return `ActorHandle(${this._rec.name ?? this._rec.actorId})`;
  }
}

/** Names a handle never treats as remote methods (ActorHandle<T> leaves them out of its type too). */
const NOT_METHODS = new Set(["then", "toJSON", "constructor", "inspect", "catch", "finally"]);

export function makeHandle<T>(rt: Runtime, rec: ActorRecord): ActorHandle<T> {
  return methodProxy<T>(new ActorHandleBase(rt, rec), (method, args) => rt.actors.call(rec, method, args));
}

/**
 * The one constructor of typed handles (process and thread actors alike): a Proxy over `base` whose
 * every other property is a remote method of T sending calls through `call`.
 */
export function methodProxy<T>(
  base: { _methods: Map<string, (...args: unknown[]) => ObjectRef> },
  call: (method: string, args: unknown[]) => ObjectRef,
): ActorHandle<T> {
  const proxy = new Proxy(base, {
    get(target, prop, receiver) {
      if (typeof prop === "symbol" || prop in target) return Reflect.get(target, prop, receiver);
      if (NOT_METHODS.has(prop)) return undefined;
      let f = target._methods.get(prop);
      if (!f) {
        f = (...args: unknown[]) => call(prop, args);
        target._methods.set(prop, f);
      }
      return f;
    },
  });
  // The Proxy's type is its target's: T's methods exist only at run time (made on first read above),
  // so this is the one place the handle's type is asserted rather than inferred.
  return proxy as unknown as ActorHandle<T>;
}

/** A handle for a known actor id in this process (subscribing to its state at the head). */
export function handleFor<T>(rt: Runtime, actorId: string, name?: string): ActorHandle<T> {
  const known = rt.actors.records.has(actorId);
  const rec = rt.actors.record(actorId, name);
  if (!known) rt.head.notify("subscribe", { actorId });
  return makeHandle<T>(rt, rec);
}

registerClass(
  0x61,
  ActorHandleBase,
  (h: ActorHandleBase) => [h._rec.actorId, h._rec.name ?? null],
  (d: any[]) => {
    const rt = maybeRuntime();
    if (!rt) return { actorId: d[0], actorName: d[1] ?? undefined };
    return handleFor(currentRuntime(), d[0], d[1] ?? undefined);
  },
);
