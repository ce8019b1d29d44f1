/**
 * Actor handles: a Proxy whose every property is a remote method. `handle.m(...args)` sends a call
 * and returns an ObjectRef at once. Handles can be passed to other actors and tasks.
 */
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

const NOT_METHODS = new Set(["then", "toJSON", "constructor", "inspect", "catch", "finally"]);

export function makeHandle(rt: Runtime, rec: ActorRecord): any {
  return methodProxy(new ActorHandleBase(rt, rec), (method, args) => rt.actors.call(rec, method, args));
}

/** A Proxy over `base` whose every other property is a remote method sending calls through `call`. */
export function methodProxy<B extends { _methods: Map<string, (...args: unknown[]) => ObjectRef> }>(
  base: B,
  call: (method: string, args: unknown[]) => ObjectRef,
): any {
  return new Proxy(base, {
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
}

/** A handle for a known actor id in this process (subscribing to its state at the head). */
export function handleFor(rt: Runtime, actorId: string, name?: string): any {
  const known = rt.actors.records.has(actorId);
  const rec = rt.actors.record(actorId, name);
  if (!known) rt.head.notify("subscribe", { actorId });
  return makeHandle(rt, rec);
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
