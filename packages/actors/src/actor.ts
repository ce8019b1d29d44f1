/** `actor(Class, { module })`: an actor definition whose `.remote(...)` starts a worker process. */
import { type ActorOptions, checkActorOptions, createActor } from "@torl-ts/core";
import type { ActorHandle, RemoteArgs } from "./handle-types.js";

export interface ActorDefinitionOptions extends ActorOptions {
  /** URL of the module that exports the class (pass `import.meta.url`). */
  module: string;
  /** Export name of the class in that module (default: the class's name). */
  exportName?: string;
}

type Ctor = abstract new (...args: any[]) => any;

export class ActorClass<C extends Ctor> {
  constructor(
    readonly cls: C,
    readonly defaults: ActorDefinitionOptions,
  ) {
    // checked where they are given (actor(), .options()), not first at remote()
    checkActorOptions(defaults, this.where(), true);
  }

  private where(): string {
    return `actor ${this.defaults.exportName ?? this.cls.name}`;
  }

  /** Starts the actor; returns its handle at once (calls queue until the worker is up). */
  remote(...args: RemoteArgs<ConstructorParameters<C>>): ActorHandle<InstanceType<C>> {
    const { module, exportName, ...opts } = this.defaults;
    return createActor<InstanceType<C>>(module, exportName ?? this.cls.name, args, opts);
  }

  /** The same definition with some options overridden (name, resources, restarts ...). */
  options(overrides: ActorOptions): ActorClass<C> {
    // the overrides alone first: spreading null or a string would pass unseen
    checkActorOptions(overrides, this.where(), true);
    return new ActorClass(this.cls, { ...this.defaults, ...overrides });
  }
}

/** Defines an actor class. The class must be exported from `opts.module` under its own name (or `exportName`). */
export function actor<C extends Ctor>(cls: C, opts: ActorDefinitionOptions): ActorClass<C> {
  if (!opts?.module)
    throw new TypeError(
      `actor(${cls?.name}): pass { module: import.meta.url } so workers can import the class`,
    );
  return new ActorClass(cls, opts);
}
