/** `task(fn, { module })`: a remote function whose `.remote(...)` runs it on a pooled worker. */
import { checkTaskOptions, type ObjectRef, submitTask, type TaskOptions } from "@torl-ts/core";
import type { RemoteArgs } from "./handle-types.js";

export interface TaskDefinitionOptions extends TaskOptions {
  /** URL of the module that exports the function (pass `import.meta.url`). */
  module: string;
  /** Export name (default: the function's name). */
  exportName?: string;
}

type Fn = (...args: any[]) => any;

export class RemoteFunction<F extends Fn> {
  constructor(
    readonly fn: F,
    readonly defaults: TaskDefinitionOptions,
  ) {
    // checked where they are given (task(), .options()), not first at remote()
    checkTaskOptions(defaults, this.where(), true);
  }

  private where(): string {
    return `task ${this.defaults.exportName ?? this.fn.name}`;
  }

  remote(...args: RemoteArgs<Parameters<F>>): ObjectRef<Awaited<ReturnType<F>>> {
    const { module, exportName, ...opts } = this.defaults;
    return submitTask(module, exportName ?? this.fn.name, args, opts);
  }

  options(overrides: TaskOptions): RemoteFunction<F> {
    // the overrides alone first: spreading null or a string would pass unseen
    checkTaskOptions(overrides, this.where(), true);
    return new RemoteFunction(this.fn, { ...this.defaults, ...overrides });
  }
}

/** Defines a remote function. It must be exported from `opts.module` under its own name (or `exportName`). */
export function task<F extends Fn>(fn: F, opts: TaskDefinitionOptions): RemoteFunction<F> {
  if (!opts?.module)
    throw new TypeError(`task(${fn?.name}): pass { module: import.meta.url } so workers can import it`);
  if (!opts.exportName && !fn.name) throw new TypeError("task(): anonymous functions need { exportName }");
  return new RemoteFunction(fn, opts);
}
