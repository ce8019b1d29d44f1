import { DataProto, isDataProtoWire } from "../protocol/data-proto.js";
import { readWorkerEnv } from "./worker.js";

/** One role hosted in a worker process: the class's module, export name and constructor arguments. */
export interface HostedRoleSpec {
  role: string;
  module: string;
  exportName: string;
  args: unknown[];
}

/** A call to a role the host does not have or a method the role does not have. */
export class WorkerHostError extends Error {
  override name = "WorkerHostError";
}

/** DataProto <-> wire form on the way in and out (top level and one list level, as dispatch builds them). */
export function toWireValue(v: unknown): unknown {
  if (v instanceof DataProto) return v.toWire();
  if (Array.isArray(v) && v.some((x) => x instanceof DataProto))
    return v.map((x) => (x instanceof DataProto ? x.toWire() : x));
  return v;
}

export function fromWireValue(v: unknown): unknown {
  if (isDataProtoWire(v)) return DataProto.fromWire(v);
  if (Array.isArray(v) && v.some(isDataProtoWire))
    return v.map((x) => (isDataProtoWire(x) ? DataProto.fromWire(x) : x));
  return v;
}

/**
 * The actor class a WorkerGroup starts in every worker process. It imports each role's module and
 * constructs the roles (several when colocated, all sharing the process, rank and GPUs), then runs
 * registered methods on them with DataProtos converted from and to their wire form.
 */
export class WorkerHost {
  private roles = new Map<string, Record<string, unknown>>();
  private readonly loaded: Promise<void>;

  constructor(specs: HostedRoleSpec[]) {
    this.loaded = (async () => {
      for (const s of specs) {
        const mod = (await import(s.module)) as Record<string, unknown>;
        const Cls = mod[s.exportName] as (new (...a: unknown[]) => Record<string, unknown>) | undefined;
        if (typeof Cls !== "function") {
          throw new WorkerHostError(`${s.module} has no export "${s.exportName}" (role ${s.role})`);
        }
        this.roles.set(s.role, new Cls(...s.args.map(fromWireValue)));
      }
    })();
    this.loaded.catch(() => {});
  }

  /** Resolves once every role is constructed; rethrows a role constructor's error. */
  async hostReady(): Promise<{
    pid: number;
    roles: string[];
    rank: number;
    worldSize: number;
    cudaVisibleDevices?: string;
  }> {
    await this.loaded;
    const env = readWorkerEnv();
    return {
      pid: process.pid,
      roles: [...this.roles.keys()],
      rank: env.rank,
      worldSize: env.worldSize,
      cudaVisibleDevices: env.cudaVisibleDevices,
    };
  }

  async executeRegistered(role: string, method: string, args: unknown[]): Promise<unknown> {
    await this.loaded;
    const target = this.roles.get(role);
    if (!target)
      throw new WorkerHostError(
        `no role "${role}" in this worker (has: ${[...this.roles.keys()].join(", ")})`,
      );
    const fn = target[method];
    if (typeof fn !== "function") throw new WorkerHostError(`role "${role}" has no method "${method}"`);
    const out = await (fn as (...a: unknown[]) => unknown).apply(target, args.map(fromWireValue));
    return toWireValue(out);
  }

  /**
   * Runs a role's generator method and streams its items (a streaming actor method: the caller reads
   * them with `for await`); stopping the stream stops the role's generator (its `finally` blocks run).
   */
  async *streamRegistered(role: string, method: string, args: unknown[]): AsyncGenerator<unknown> {
    await this.loaded;
    const target = this.roles.get(role);
    const fn = target?.[method];
    if (typeof fn !== "function") throw new WorkerHostError(`role "${role}" has no method "${method}"`);
    const items = (fn as (...a: unknown[]) => unknown).apply(target, args.map(fromWireValue)) as
      | AsyncIterable<unknown>
      | undefined;
    if (typeof items?.[Symbol.asyncIterator] !== "function")
      throw new WorkerHostError(`role "${role}" method "${method}" is not an async generator`);
    for await (const item of items) yield toWireValue(item);
  }
}
